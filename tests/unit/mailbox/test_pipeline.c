/*
 * test_pipeline.c — the whole path on SQLite: a group is created and changed (membership
 * Controls through the commit), a message mentioning a member is committed, the fanout turns
 * the outbox into dispatch records, and the mailbox materializes them. Every member's mailbox
 * ends with Membership, Message (+ Mention) and the removal, in commit order; the sender's
 * tenant, user and ClientMessageId travel in the dispatch (encoding version 2) into the entries.
 */
#include "commit/commit.h"
#include "fanout/fanout.h"
#include "group/group.h"
#include "mb_fixture.h"

static void run_fanout(qim_store *s) {
  qim_fanout_options fo = {.shards = fx_shards()};
  qim_fanout *f;
  assert_int_equal(qim_fanout_new(s, &fo, &f), 0);
  uint32_t n;
  do assert_int_equal(qim_fanout_run_once(f, 64, &n), 0);
  while (n > 0);
  qim_fanout_free(f);
}

static void test_group_messages_and_changes_reach_every_mailbox(void **state) {
  (void)state;
  fx_env *env = fx_env_new("mb-pipe");
  qim_commit *commit;
  assert_int_equal(qim_commit_create(env->store, qim_clock_system(), NULL, NULL, &commit), 0);
  qim_groups *groups;
  assert_int_equal(qim_group_open(env->store, commit, qim_clock_system(), NULL, &groups), 0);
  qim_user_id owner = fx_user_on(0, 0, 0), m1 = fx_user_on(1, 1, 0), m2 = fx_user_on(2, 0, 0), m3 = fx_user_on(0, 1, 0);
  qim_authenticated_actor oa = fx_actor(owner, 1);
  qim_user_id invitees[] = {m1, m2, m3};
  qim_group_create_request cr = {.group_id = {{0x6A, 1}}, .invitees = invitees, .invitee_count = 3};
  qim_trace_id trace = qim_trace_id_new();
  qim_group_created created;
  assert_int_equal(qim_group_create(groups, &oa, &cr, &trace, &created, NULL), 0);

  char doc[256], name[32];
  qim_user_id_format(m2, name, sizeof name);
  snprintf(doc, sizeof doc, "{\"txt\":\"hi @m2\",\"ent\":[{\"tp\":\"MN\",\"data\":{\"val\":\"%s\"}}]}", name);
  qim_authenticated_send send = {.actor = oa, .trace_id = trace};
  send.request.client_message_id.b[0] = 0xC7;
  send.request.client_message_id.b[15] = 1;
  send.request.conversation_id = qim_group_conversation(cr.group_id);
  send.request.content.message_type = QIM_MESSAGE_TYPE_TEXT;
  send.request.content.payload_or_ciphertext = (qim_bytes){(uint8_t *)doc, strlen(doc)};
  send.request.mention_targets = &m2;
  send.request.mention_count = 1;
  qim_commit_result res;
  assert_int_equal(qim_commit_send_sync(commit, &send, &res), 0);
  qim_group_change_result removed;
  assert_int_equal(qim_group_remove(groups, &oa, cr.group_id, m3, &trace, &removed), 0);
  assert_int_equal(removed.control_status, 0);

  run_fanout(env->store);
  qim_mailbox_options o = fx_mb_options();
  qim_mailbox *m = fx_mailbox(env->store, &o);
  fx_acquire_all(m);
  assert_int_equal(qim_mailbox_drain(m, 10000), 0);

  qim_user_id all[] = {owner, m1, m2, m3};
  for (int i = 0; i < 4; i++) {
    fx_pulled p = fx_pull_all(m, all[i], 0, 100);
    size_t want = 3 + (i == 2);
    assert_int_equal(p.n, want);
    assert_int_equal(p.e[0].event_type, QIM_EVENT_TYPE_MEMBERSHIP);
    assert_string_equal(p.e[0].content.custom_type, QIM_MAILBOX_MEMBERSHIP_TYPE);
    const qim_mailbox_entry *msg = &p.e[1];
    assert_int_equal(msg->event_type, QIM_EVENT_TYPE_MESSAGE);
    assert_true(qim_u128_eq(msg->tenant_id.v, fx_tenant().v));
    assert_true(qim_u128_eq(msg->sender_id.v, owner.v));
    assert_int_equal(msg->coordinates.conversation_seq, res.ack.coordinates.conversation_seq);
    assert_memory_equal(msg->coordinates.message_id.b, res.ack.coordinates.message_id.b, 16);
    assert_int_equal(msg->has_client_message_id, i == 0);
    if (i == 0) assert_memory_equal(msg->client_message_id.b, send.request.client_message_id.b, 16);
    assert_true(msg->body_included);
    assert_int_equal(msg->content.payload_or_ciphertext.n, strlen(doc));
    if (i == 2) assert_int_equal(p.e[2].event_type, QIM_EVENT_TYPE_MENTION);
    const qim_mailbox_entry *rm = &p.e[want - 1];
    assert_int_equal(rm->event_type, QIM_EVENT_TYPE_MEMBERSHIP); /* m3 learns of its own removal */
    assert_true(p.e[0].mailbox_seq < msg->mailbox_seq && msg->mailbox_seq < rm->mailbox_seq);
    fx_pulled_free(&p);
  }
  qim_mailbox_free(m);
  qim_group_close(groups);
  qim_commit_destroy(commit);
  fx_env_free(env);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_group_messages_and_changes_reach_every_mailbox),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
