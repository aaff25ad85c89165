/*
 * test_event.c — the pure part of materialization: which EventType a content gives, and which
 * users a Drafty document mentions (sorted, unique, bounded; nothing from non-Drafty payloads,
 * controls or malformed JSON; in a Tinode payload, the document under "content").
 */
#include "mb_fixture.h"
#include "qim/payload.h"

static qim_message_content content(qim_message_type t, const char *custom, const char *payload) {
  qim_message_content c = {.message_type = t, .custom_type = (char *)custom};
  c.payload_or_ciphertext = (qim_bytes){(uint8_t *)payload, strlen(payload)};
  return c;
}

static void test_event_type_follows_message_type_and_custom_type(void **state) {
  (void)state;
  qim_message_content c = content(QIM_MESSAGE_TYPE_TEXT, NULL, "\"hi\"");
  assert_int_equal(qim_mailbox_event_type(&c), QIM_EVENT_TYPE_MESSAGE);
  c.message_type = QIM_MESSAGE_TYPE_MEDIA;
  assert_int_equal(qim_mailbox_event_type(&c), QIM_EVENT_TYPE_MESSAGE);
  c = content(QIM_MESSAGE_TYPE_CUSTOM, QIM_MAILBOX_MEMBERSHIP_TYPE, "{}"); /* only a Control is a change */
  assert_int_equal(qim_mailbox_event_type(&c), QIM_EVENT_TYPE_MESSAGE);
  c.message_type = QIM_MESSAGE_TYPE_CONTROL;
  assert_int_equal(qim_mailbox_event_type(&c), QIM_EVENT_TYPE_MEMBERSHIP);
  c.custom_type = "qim.edit";
  assert_int_equal(qim_mailbox_event_type(&c), QIM_EVENT_TYPE_CONTROL);
  c.custom_type = NULL;
  assert_int_equal(qim_mailbox_event_type(&c), QIM_EVENT_TYPE_CONTROL);
}

static char *drafty_mentioning(const qim_user_id *users, size_t n, bool duplicate_first) {
  size_t cap = 64 + (n + 1) * 64;
  char *s = malloc(cap), name[32];
  size_t len = (size_t)sprintf(s, "{\"txt\":\"x\",\"ent\":[");
  for (size_t i = 0; i < n + duplicate_first; i++) {
    qim_user_id_format(users[i % n], name, sizeof name);
    len += (size_t)sprintf(s + len, "%s{\"tp\":\"MN\",\"data\":{\"val\":\"%s\"}}", i ? "," : "", name);
  }
  strcpy(s + len, "]}");
  return s;
}

static void test_mentions_are_sorted_unique_and_bounded(void **state) {
  (void)state;
  qim_user_id users[QIM_MAILBOX_MENTIONS_MAX + 10];
  for (size_t i = 0; i < QIM_MAILBOX_MENTIONS_MAX + 10; i++) users[i] = (qim_user_id){{7, 1000 - i}};
  char *doc = drafty_mentioning(users, 3, true);
  qim_message_content c = content(QIM_MESSAGE_TYPE_TEXT, NULL, doc);
  qim_user_id *out;
  size_t n;
  qim_mailbox_mentions(&c, &out, &n);
  assert_int_equal(n, 3);
  assert_true(qim_u128_eq(out[0].v, users[2].v)); /* ascending */
  assert_true(qim_u128_eq(out[2].v, users[0].v));
  qim_free(out);
  free(doc);
  doc = drafty_mentioning(users, QIM_MAILBOX_MENTIONS_MAX + 10, false);
  c = content(QIM_MESSAGE_TYPE_TEXT, NULL, doc);
  qim_mailbox_mentions(&c, &out, &n);
  assert_int_equal(n, QIM_MAILBOX_MENTIONS_MAX);
  assert_true(qim_u128_eq(out[0].v, users[QIM_MAILBOX_MENTIONS_MAX + 9].v)); /* the lowest ids kept */
  qim_free(out);
  /* the same document in a Control mentions nobody */
  c.message_type = QIM_MESSAGE_TYPE_CONTROL;
  qim_mailbox_mentions(&c, &out, &n);
  assert_int_equal(n, 0);
  assert_null(out);
  free(doc);
}

static void test_payloads_that_are_not_drafty_mention_nobody(void **state) {
  (void)state;
  const char *payloads[] = {
      "\"plain text @usrAAAAAAAAAAAAAAAAAAAAAQ\"",
      "{\"ent\":[{\"tp\":\"MN\",\"data\":{\"val\":\"usrAAAAAAAAAAAAAAAAAAAAAQ\"}}",       /* truncated */
      "{\"ent\":[{\"tp\":\"MN\",\"data\":{\"val\":\"grpAAAAAAAAAAAAAAAAAAAAAQ\"}}]}",    /* a group */
      "{\"ent\":[{\"tp\":\"LN\",\"data\":{\"val\":\"usrAAAAAAAAAAAAAAAAAAAAAQ\"}}]}",    /* a link */
      "{\"ent\":{\"tp\":\"MN\"}}",
      "{\"ent\":[{\"tp\":\"MN\",\"tp\":\"MN\",\"data\":{\"val\":\"usrAAAAAAAAAAAAAAAAAAAAAQ\"}}]}", /* dup key */
      "",
      NULL,
  };
  for (int i = 0; payloads[i]; i++) {
    qim_message_content c = content(QIM_MESSAGE_TYPE_TEXT, NULL, payloads[i]);
    qim_user_id *out;
    size_t n;
    qim_mailbox_mentions(&c, &out, &n);
    assert_int_equal(n, 0);
    assert_null(out);
  }
  qim_message_content ok = content(QIM_MESSAGE_TYPE_TEXT, NULL,
                                   "{\"ent\":[{\"tp\":\"MN\",\"data\":{\"val\":\"usrAAAAAAAAAAAAAAAAAAAAAQ\"}}]}");
  qim_user_id *out;
  size_t n;
  qim_mailbox_mentions(&ok, &out, &n);
  assert_int_equal(n, 1);
  assert_int_equal(out[0].v.lo, 1);
  qim_free(out);
}

/* The stored form of a Tinode {pub} (qim/payload.h): the Drafty document is the content. */
static void test_tinode_payload_mentions_come_from_its_content(void **state) {
  (void)state;
  const char *mn = "{\"tp\":\"MN\",\"data\":{\"val\":\"usrAAAAAAAAAAAAAAAAAAAAAQ\"}}";
  char doc[512];
  snprintf(doc, sizeof doc, "{\"content\":{\"ent\":[%s],\"txt\":\"@a\"},\"head\":{\"mime\":\"text/x-drafty\"}}", mn);
  qim_message_content c = content(QIM_MESSAGE_TYPE_TEXT, NULL, doc);
  c.schema_version = QIM_PAYLOAD_SCHEMA_TINODE;
  qim_user_id *out;
  size_t n;
  qim_mailbox_mentions(&c, &out, &n);
  assert_int_equal(n, 1);
  assert_int_equal(out[0].v.lo, 1);
  qim_free(out);
  /* read as a bare document, the same bytes mention nobody: "ent" is not at the top */
  c.schema_version = 0;
  qim_mailbox_mentions(&c, &out, &n);
  assert_int_equal(n, 0);
  /* an entity list in the head is not the document */
  snprintf(doc, sizeof doc, "{\"content\":\"@a\",\"head\":{\"ent\":[%s]}}", mn);
  c = content(QIM_MESSAGE_TYPE_TEXT, NULL, doc);
  c.schema_version = QIM_PAYLOAD_SCHEMA_TINODE;
  qim_mailbox_mentions(&c, &out, &n);
  assert_int_equal(n, 0);
  assert_null(out);
  /* a link, not a mention: nothing to find, and no parse needed */
  c = content(QIM_MESSAGE_TYPE_TEXT, NULL,
              "{\"content\":{\"ent\":[{\"tp\":\"LN\",\"data\":{\"url\":\"https://x\"}}],\"txt\":\"x\"}}");
  c.schema_version = QIM_PAYLOAD_SCHEMA_TINODE;
  qim_mailbox_mentions(&c, &out, &n);
  assert_int_equal(n, 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_event_type_follows_message_type_and_custom_type),
      cmocka_unit_test(test_mentions_are_sorted_unique_and_bounded),
      cmocka_unit_test(test_payloads_that_are_not_drafty_mention_nobody),
      cmocka_unit_test(test_tinode_payload_mentions_come_from_its_content),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
