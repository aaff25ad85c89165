/*
 * test_history_publish.c — {pub} content mapping onto MessageContent (table-driven) and
 * back, the sender's own receipts, edits through head.replace, mention filtering, and
 * read/recv notes with their Control event to the reader's own devices.
 */
#include "history_fixture.h"
#include "testsupport.h"

static int setup(void **state) {
  hx *x = calloc(1, sizeof *x);
  hx_open(x, "hpub", NULL);
  *state = x;
  return 0;
}

static int teardown(void **state) {
  hx_close(*state);
  free(*state);
  return 0;
}

/* ---- content mapping ----------------------------------------------------------------------- */

typedef struct content_case {
  const char *name;
  const char *head, *content; /* JSON texts; head NULL = none */
  int rc;
  qim_message_type type;
  const char *custom_type;
  int attachments; /* entries in media_metadata; -1 = none */
  size_t mentions;
  qim_conversation_seq reply, replace;
} content_case;

#define USR_A "usrAAAAAAAAAAAAAAAAAAAAAQ"
#define USR_B "usrAAAAAAAAAAAAAAAAAAAAAg"

static const content_case CONTENT[] = {
    {"a plain string is Text", NULL, "\"hello\"", 0, QIM_MESSAGE_TYPE_TEXT, NULL, -1, 0, 0, 0},
    {"drafty text with two mentions (one twice, one malformed)", "{\"mime\":\"text/x-drafty\"}",
     "{\"txt\":\"@a @b @a\",\"ent\":[{\"tp\":\"MN\",\"data\":{\"val\":\"" USR_A
     "\"}},{\"tp\":\"MN\",\"data\":{\"val\":\"" USR_B
     "\"}},{\"tp\":\"MN\",\"data\":{\"val\":\"" USR_A
     "\"}},{\"tp\":\"MN\",\"data\":{\"val\":\"bob\"}}]}",
     0, QIM_MESSAGE_TYPE_TEXT, NULL, -1, 2, 0, 0},
    {"a drafty image by reference is Media", "{\"mime\":\"text/x-drafty\"}",
     "{\"txt\":\" "
     "\",\"fmt\":[{\"len\":1}],\"ent\":[{\"tp\":\"IM\",\"data\":{\"mime\":\"image/png\",\"ref\":\"/"
     "v0/file/s/abc.png\",\"size\":1234,\"width\":10,\"height\":20}}]}",
     0, QIM_MESSAGE_TYPE_MEDIA, NULL, 1, 0, 0, 0},
    {"a drafty file by reference is Media", NULL,
     "{\"txt\":\"f\",\"ent\":[{\"tp\":\"EX\",\"data\":{\"mime\":\"application/pdf\",\"ref\":\"/v0/"
     "file/s/x.pdf\",\"name\":\"x.pdf\"}}]}",
     0, QIM_MESSAGE_TYPE_MEDIA, NULL, 1, 0, 0, 0},
    {"an inline image (val, no ref) stays Text", NULL,
     "{\"txt\":\" "
     "\",\"ent\":[{\"tp\":\"IM\",\"data\":{\"mime\":\"image/png\",\"val\":\"iVBORw0KGgo=\"}}]}",
     0, QIM_MESSAGE_TYPE_TEXT, NULL, -1, 0, 0, 0},
    {"head.attachments is Media", "{\"attachments\":[\"/v0/file/s/a\",\"/v0/file/s/b\"]}",
     "\"see\"", 0, QIM_MESSAGE_TYPE_MEDIA, NULL, 2, 0, 0, 0},
    {"an application mime is Custom", "{\"mime\":\"application/x-poll\"}", "{\"q\":\"lunch?\"}", 0,
     QIM_MESSAGE_TYPE_CUSTOM, "application/x-poll", -1, 0, 0, 0},
    {"reply and replace by :N", "{\"reply\":\":3\",\"replace\":\":5\"}", "\"v2\"", 0,
     QIM_MESSAGE_TYPE_TEXT, NULL, -1, 0, 3, 5},
    {"a reply to another topic references nothing here", "{\"reply\":\"grpX:3\"}", "\"r\"", 0,
     QIM_MESSAGE_TYPE_TEXT, NULL, -1, 0, 0, 0},
    {"seed 003's integer replace", "{\"replace\":41}", "\"v2\"", 0, QIM_MESSAGE_TYPE_TEXT, NULL, -1,
     0, 0, 41},
    {"a malformed replace", "{\"replace\":\"five\"}", "\"x\"", QIM_E_MESSAGE_STORE_INVALID_CONTENT,
     0, NULL, -1, 0, 0, 0},
    {"replace :0", "{\"replace\":\":0\"}", "\"x\"", QIM_E_MESSAGE_STORE_INVALID_CONTENT, 0, NULL,
     -1, 0, 0, 0},
    {"a head that is not an object", "[1,2]", "\"x\"", QIM_E_MESSAGE_STORE_INVALID_CONTENT, 0, NULL,
     -1, 0, 0, 0},
    {"a mime that is not a string", "{\"mime\":7}", "\"x\"", QIM_E_MESSAGE_STORE_INVALID_CONTENT, 0,
     NULL, -1, 0, 0, 0},
    {"null content", NULL, "null", QIM_E_MESSAGE_STORE_INVALID_CONTENT, 0, NULL, -1, 0, 0, 0},
};

static void test_content_maps_onto_message_content(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof CONTENT / sizeof CONTENT[0]; i++) {
    const content_case *c = &CONTENT[i];
    json_t *head = c->head ? json_loads(c->head, JSON_DECODE_ANY, NULL) : NULL;
    json_t *content = json_loads(c->content, JSON_DECODE_ANY, NULL);
    assert_non_null(content);
    qim_history_tinode_msg m;
    int rc = qim_history_content_from_tinode(head, content, 128 * 1024, 64, &m);
    bool ok = rc == c->rc;
    if (ok && rc == 0) {
      ok = m.content.message_type == c->type &&
           m.content.schema_version == QIM_PAYLOAD_SCHEMA_TINODE &&
           (c->custom_type ? m.content.custom_type && !strcmp(m.content.custom_type, c->custom_type)
                           : !m.content.custom_type) &&
           m.mention_count == c->mentions && m.has_reply_to == (c->reply != 0) &&
           m.reply_to == c->reply && m.has_replace == (c->replace != 0) &&
           m.replace == c->replace && m.content.has_media_metadata == (c->attachments >= 0);
      if (ok && c->attachments >= 0) {
        json_t *meta = json_loadb((const char *)m.content.media_metadata.p,
                                  m.content.media_metadata.n, 0, NULL);
        ok = (int)json_array_size(json_object_get(meta, "attachments")) == c->attachments &&
             json_is_string(
                 json_object_get(json_array_get(json_object_get(meta, "attachments"), 0), "ref"));
        json_decref(meta);
      }
      /* and back: the head (minus sender) and the content exactly */
      json_t *h2, *c2;
      ok = ok && qim_history_content_to_tinode(&m.content, &h2, &c2) == 0;
      if (ok) {
        ok = json_equal(c2, content) &&
             (head && json_object_size(head) ? json_equal(h2, head) : h2 == NULL);
        json_decref(h2);
        json_decref(c2);
      }
      qim_history_tinode_msg_free(&m);
    }
    if (!ok) fail_msg("case '%s': rc %d (want %d)", c->name, rc, c->rc);
    json_decref(head);
    json_decref(content);
  }
}

static void test_the_client_sender_header_is_dropped_and_size_is_bounded(void **state) {
  (void)state;
  json_t *head = json_pack("{ssss}", "sender", "usrEVIL", "mime", "text/plain");
  json_t *content = json_string("hi");
  qim_history_tinode_msg m;
  assert_int_equal(qim_history_content_from_tinode(head, content, 1024, 8, &m), 0);
  json_t *h2, *c2;
  assert_int_equal(qim_history_content_to_tinode(&m.content, &h2, &c2), 0);
  assert_null(json_object_get(h2, "sender"));
  assert_string_equal(json_string_value(json_object_get(h2, "mime")), "text/plain");
  json_decref(h2);
  json_decref(c2);
  size_t exact = m.content.payload_or_ciphertext.n;
  qim_history_tinode_msg_free(&m);
  assert_int_equal(qim_history_content_from_tinode(head, content, (uint32_t)exact, 8, &m), 0);
  qim_history_tinode_msg_free(&m);
  assert_int_equal(qim_history_content_from_tinode(head, content, (uint32_t)exact - 1, 8, &m),
                   QIM_E_COMMIT_MESSAGE_TOO_LARGE);
  json_decref(head);
  json_decref(content);
}

static void test_opaque_ciphertext_becomes_base64_content(void **state) {
  (void)state;
  qim_message_content c = {.message_type = QIM_MESSAGE_TYPE_CUSTOM,
                           .custom_type = "qim.e2e",
                           .schema_version = 2,
                           .payload_or_ciphertext = {(uint8_t *)"\x01\x02\xff", 3}};
  json_t *h, *body;
  assert_int_equal(qim_history_content_to_tinode(&c, &h, &body), 0);
  assert_string_equal(json_string_value(body), "AQL/");
  assert_string_equal(json_string_value(json_object_get(h, "mime")), "qim.e2e");
  json_decref(h);
  json_decref(body);
}

/* ---- publishing
 * ---------------------------------------------------------------------------------- */

static void test_publishing_marks_the_senders_own_read_and_recv(void **state) {
  hx *x = *state;
  hx_group_create(x, 1, 1, 2, 1);
  hx_pub(x, 1, 1, "one");
  qim_history_pub_result r;
  assert_int_equal(hx_pub_json(x, 1, 2, NULL, "\"two\"", &r), 0);
  assert_int_equal(r.commit.ack.coordinates.conversation_seq, 2);
  assert_int_equal(r.read, 2);
  assert_int_equal(r.recv, 2);
  qim_store_member m = hx_member(x, 1, 2);
  assert_int_equal(m.read_seq, 2);
  qim_store_conversation c = hx_conversation(x, 1);
  assert_int_equal(qim_history_unread(&c, &m), 0);
  qim_store_member_free(&m);
  m = hx_member(x, 1, 1);
  assert_int_equal(qim_history_unread(&c, &m), 1); /* the owner read its own one, not two */
  qim_store_member_free(&m);
  qim_store_conversation_free(&c);
}

static void test_a_bad_pub_is_refused_before_the_commit(void **state) {
  hx *x = *state;
  hx_group_create(x, 1, 1, 2, 1);
  qim_history_pub_result r;
  assert_int_equal(hx_pub_json(x, 1, 2, "\"str\"", "\"x\"", &r),
                   QIM_E_MESSAGE_STORE_INVALID_CONTENT);
  assert_int_equal(r.commit.status, QIM_E_MESSAGE_STORE_INVALID_CONTENT);
  qim_store_conversation c = hx_conversation(x, 1);
  assert_int_equal(c.latest_seq, 0);
  qim_store_conversation_free(&c);
}

static void test_mentions_of_non_members_are_dropped_not_fatal(void **state) {
  hx *x = *state;
  hx_group_create(x, 1, 1, 2, 1);
  char content[512];
  snprintf(content, sizeof content,
           "{\"txt\":\"@b "
           "@z\",\"ent\":[{\"tp\":\"MN\",\"data\":{\"val\":\"%s\"}},{\"tp\":\"MN\",\"data\":{"
           "\"val\":\"%s\"}}]}",
           hx_name(2), hx_name(99));
  qim_history_pub_result r;
  assert_int_equal(hx_pub_json(x, 1, 1, "{\"mime\":\"text/x-drafty\"}", content, &r), 0);
  assert_int_equal(r.commit.ack.coordinates.conversation_seq, 1);
}

/* ---- edits
 * ------------------------------------------------------------------------------------------- */

static void test_an_edit_is_a_new_seq_and_marks_the_original(void **state) {
  hx *x = *state;
  hx_group_create(x, 1, 1, 2, 1);
  hx_pub(x, 1, 2, "typo");
  qim_history_pub_result r;
  assert_int_equal(hx_pub_json(x, 1, 2, "{\"replace\":\":1\"}", "\"fixed\"", &r), 0);
  assert_true(r.edit);
  assert_int_equal(r.replaced, 1);
  assert_int_equal(r.commit.ack.coordinates.conversation_seq, 2);
  assert_int_equal(r.control_status, 0);
  qim_message_record orig = hx_record(x, 1, 1);
  assert_int_equal(orig.state, QIM_MESSAGE_STATE_EDITED);
  json_t *h, *c;
  assert_int_equal(qim_history_content_to_tinode(&orig.content, &h, &c), 0);
  assert_string_equal(json_string_value(c), "typo"); /* the original keeps its text */
  json_decref(h);
  json_decref(c);
  qim_message_record_free(&orig);
  qim_committed_envelope env = {0};
  json_t *j = hx_last_control(x, &env);
  assert_string_equal(hx_str(j, "op"), "edit");
  assert_int_equal(hx_int(j, "seq"), 1);
  assert_int_equal(hx_int(j, "replacement"), 2);
  assert_string_equal(hx_str(j, "actor"), hx_name(2));
  assert_int_equal(env.intent.delivery.audience.kind, QIM_DELIVERY_AUDIENCE_GROUP_SNAPSHOT);
  assert_int_equal(env.intent.coordinates.conversation_seq,
                   2); /* no new seq: the current position */
  qim_committed_envelope_free(&env);
  json_decref(j);
  /* both are in history, as Tinode returns them */
  char got[64];
  qim_history_get q = {0};
  assert_int_equal(hx_get(x, 1, 1, &q, got, sizeof got, NULL), 0);
  assert_string_equal(got, "2,1");
}

static void test_edits_of_others_or_invisible_messages_are_refused(void **state) {
  hx *x = *state;
  hx_group_create(x, 1, 1, 2, 1);
  hx_pub(x, 1, 1, "owner's");
  qim_history_pub_result r;
  assert_int_equal(hx_pub_json(x, 1, 2, "{\"replace\":\":1\"}", "\"mine now\"", &r),
                   QIM_E_MESSAGE_STORE_EDIT_NOT_PERMITTED);
  assert_int_equal(hx_pub_json(x, 1, 2, "{\"replace\":\":9\"}", "\"ghost\"", &r),
                   QIM_E_COMMIT_INVALID_REFERENCE);
  hx_pub(x, 1, 2, "gone soon"); /* 2 */
  qim_history_delete_req d = {.actor = hx_actor(2),
                              .conversation_id = hx_conv(1),
                              .ranges = (qim_store_seq_range[]){{2, 0}},
                              .range_count = 1,
                              .hard = true};
  qim_history_delete_result dr;
  assert_int_equal(qim_history_delete(x->history, &d, &dr), 0);
  qim_history_delete_result_free(&dr);
  assert_int_equal(hx_pub_json(x, 1, 2, "{\"replace\":\":2\"}", "\"back\"", &r),
                   QIM_E_COMMIT_INVALID_REFERENCE);
  qim_store_conversation c = hx_conversation(x, 1);
  assert_int_equal(c.latest_seq, 2); /* nothing was stored */
  qim_store_conversation_free(&c);
}

/* ---- receipts
 * ------------------------------------------------------------------------------------------ */

static int note(hx *x, uint64_t user, qim_history_note_kind what, qim_conversation_seq seq,
                qim_history_note_result *out) {
  qim_history_note_req n = {.actor = hx_actor(user),
                            .conversation_id = hx_conv(1),
                            .what = what,
                            .seq = seq,
                            .trace_id = qim_trace_id_new()};
  return qim_history_note(x->history, &n, out);
}

typedef struct note_case {
  const char *name;
  qim_history_note_kind what;
  qim_conversation_seq seq;
  int rc;
  bool changed;
  qim_conversation_seq read, recv;
  uint32_t unread;
  bool control; /* a read-position Control was committed */
} note_case;

static const note_case NOTES[] = {
    {"recv moves recv only", QIM_HISTORY_NOTE_RECV, 3, 0, true, 0, 3, 5, false},
    {"a stale recv is ignored", QIM_HISTORY_NOTE_RECV, 2, 0, false, 0, 3, 5, false},
    {"read implies recv", QIM_HISTORY_NOTE_READ, 4, 0, true, 4, 4, 1, true},
    {"the same read twice is harmless", QIM_HISTORY_NOTE_READ, 4, 0, false, 4, 4, 1, false},
    {"a stale read is ignored", QIM_HISTORY_NOTE_READ, 1, 0, false, 4, 4, 1, false},
    {"read up to the latest", QIM_HISTORY_NOTE_READ, 5, 0, true, 5, 5, 0, true},
    {"seq 0", QIM_HISTORY_NOTE_READ, 0, QIM_E_MESSAGE_STORE_INVALID_RANGE, false, 0, 0, 0, false},
    {"seq above the latest", QIM_HISTORY_NOTE_RECV, 6, QIM_E_MESSAGE_STORE_INVALID_RANGE, false, 0,
     0, 0, false},
};

static void test_receipts_move_forward_only(void **state) {
  hx *x = *state;
  hx_group_create(x, 1, 1, 2, 1);
  hx_pub_many(x, 1, 1, 5);
  for (size_t i = 0; i < sizeof NOTES / sizeof NOTES[0]; i++) {
    const note_case *c = &NOTES[i];
    json_t *all = hx_controls(x, NULL);
    size_t before = json_array_size(all);
    json_decref(all);
    qim_history_note_result r;
    int rc = note(x, 2, c->what, c->seq, &r);
    all = hx_controls(x, NULL);
    bool controlled = json_array_size(all) == before + 1;
    json_decref(all);
    bool ok = rc == c->rc;
    if (ok && rc == 0)
      ok = r.changed == c->changed && r.read == c->read && r.recv == c->recv &&
           r.unread == c->unread && controlled == c->control && r.control_status == 0;
    if (!ok)
      fail_msg("case '%s': rc %d changed %d read %llu recv %llu unread %u control %d", c->name, rc,
               r.changed, (unsigned long long)r.read, (unsigned long long)r.recv, r.unread,
               controlled);
  }
}

static void test_a_read_control_goes_only_to_the_readers_devices(void **state) {
  hx *x = *state;
  hx_group_create(x, 1, 1, 2, 2);
  hx_pub_many(x, 1, 1, 3);
  qim_history_note_result r;
  assert_int_equal(note(x, 2, QIM_HISTORY_NOTE_READ, 2, &r), 0);
  qim_committed_envelope env = {0};
  json_t *j = hx_last_control(x, &env);
  assert_string_equal(hx_str(j, "op"), "read");
  assert_string_equal(hx_str(j, "user"), hx_name(2));
  assert_int_equal(hx_int(j, "read"), 2);
  assert_int_equal(hx_int(j, "recv"), 2);
  assert_int_equal(env.intent.delivery.audience.kind, QIM_DELIVERY_AUDIENCE_DIRECT);
  assert_int_equal(env.intent.delivery.audience.direct.recipient_count, 1);
  assert_true(qim_u128_eq(env.intent.delivery.audience.direct.recipients[0].v, hx_user(2).v));
  qim_committed_envelope_free(&env);
  json_decref(j);
}

static void test_notes_from_non_members_are_access_denied(void **state) {
  hx *x = *state;
  hx_group_create(x, 1, 1, 2, 1);
  hx_pub_many(x, 1, 1, 2);
  qim_history_note_result r;
  assert_int_equal(note(x, 9, QIM_HISTORY_NOTE_READ, 1, &r),
                   QIM_E_MESSAGE_STORE_HISTORY_ACCESS_DENIED);
  hx_group_leave(x, 1, 2);
  assert_int_equal(note(x, 2, QIM_HISTORY_NOTE_RECV, 1, &r),
                   QIM_E_MESSAGE_STORE_HISTORY_ACCESS_DENIED);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_content_maps_onto_message_content),
      cmocka_unit_test(test_the_client_sender_header_is_dropped_and_size_is_bounded),
      cmocka_unit_test(test_opaque_ciphertext_becomes_base64_content),
      cmocka_unit_test_setup_teardown(test_publishing_marks_the_senders_own_read_and_recv, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_a_bad_pub_is_refused_before_the_commit, setup, teardown),
      cmocka_unit_test_setup_teardown(test_mentions_of_non_members_are_dropped_not_fatal, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_an_edit_is_a_new_seq_and_marks_the_original, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_edits_of_others_or_invisible_messages_are_refused, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_receipts_move_forward_only, setup, teardown),
      cmocka_unit_test_setup_teardown(test_a_read_control_goes_only_to_the_readers_devices, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_notes_from_non_members_are_access_denied, setup,
                                      teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
