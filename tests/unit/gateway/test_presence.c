/*
 * test_presence.c — the presence registry's coalescing and bounds (src/gateway/presence.c):
 * only a user's first / last session makes an on / off; a flap within one interval makes
 * nothing; member changes of one topic are limited per take to fanout_max / sessions
 * attached, the rest wait (counted) and still coalesce; entries go away once nobody counts
 * them and clients know them as off. And through a real in-process server: a user
 * sharing a direct (p2p) conversation sees the other come online and go offline on `me`,
 * and the one coming online is told who is online already.
 */
#include "gateway/gateway_int.h"
#include "gwclient.h"
#include "qim/mem.h"
#include "testsupport.h"

static const qim_tenant_id T = {{0, 1}};

static qim_user_id user(uint64_t n) {
  return (qim_user_id){{0, n}};
}
static qim_conversation_id conv(uint64_t n) {
  return (qim_conversation_id){{7, n}};
}

/* One session of user u attaching (+1) or detaching (-1) topic c, as session.c counts it. */
static void attach(gw_presence *p, uint64_t c, uint64_t u, int d) {
  qim__gw_presence_count(p, GW_PRES_MEMBER, T, conv(c), user(u), d);
  qim__gw_presence_count(p, GW_PRES_TOPIC, T, conv(c), user(u), d);
}

/* Takes with a generous bound; returns the number of changes of `kind`. */
static size_t take_kind(gw_presence *p, uint32_t max, gw_pres_kind kind, bool *on_out,
                        uint64_t *deferred) {
  gw_pres_change *ch;
  uint64_t d = 0;
  size_t n = qim__gw_presence_take(p, max, &ch, &d), k = 0;
  for (size_t i = 0; i < n; i++)
    if (ch[i].kind == kind) {
      k++;
      if (on_out) *on_out = ch[i].on;
    }
  if (deferred) *deferred = d;
  qim_free(ch);
  return k;
}

/* A reply that lists who is online (the `me` "on" reply) says only what a take announced:
 * an attach its take has not announced could still flap back within the interval, and then
 * no "off" would follow the "on" the reply gave. */
static void test_is_on_follows_what_was_announced_not_the_live_count(void **state) {
  (void)state;
  gw_presence *p = qim__gw_presence_new();
  qim_conversation_id none = {{0, 0}};
  qim__gw_presence_count(p, GW_PRES_ME, T, none, user(1), +1);
  assert_false(qim__gw_presence_is_on(p, GW_PRES_ME, T, none, user(1))); /* not announced yet */
  qim__gw_presence_count(p, GW_PRES_ME, T, none, user(1), -1);              /* a flap */
  assert_int_equal(take_kind(p, 100, GW_PRES_ME, NULL, NULL), 0);
  assert_false(qim__gw_presence_is_on(p, GW_PRES_ME, T, none, user(1)));
  qim__gw_presence_count(p, GW_PRES_ME, T, none, user(1), +1);
  bool on = false;
  assert_int_equal(take_kind(p, 100, GW_PRES_ME, &on, NULL), 1);
  assert_true(on);
  qim__gw_presence_count(p, GW_PRES_ME, T, none, user(1), -1);
  assert_true(qim__gw_presence_is_on(p, GW_PRES_ME, T, none, user(1))); /* its "off" is still due */
  assert_int_equal(take_kind(p, 100, GW_PRES_ME, &on, NULL), 1);
  assert_false(on);
  assert_false(qim__gw_presence_is_on(p, GW_PRES_ME, T, none, user(1)));
  qim__gw_presence_free(p);
}

static void test_first_and_last_session_make_on_and_off(void **state) {
  (void)state;
  gw_presence *p = qim__gw_presence_new();
  qim_conversation_id none = {{0, 0}};
  qim__gw_presence_count(p, GW_PRES_ME, T, none, user(1), +1);
  qim__gw_presence_count(p, GW_PRES_ME, T, none, user(1), +1); /* a second session: nothing new */
  bool on = false;
  assert_int_equal(take_kind(p, 100, GW_PRES_ME, &on, NULL), 1);
  assert_true(on);
  assert_true(qim__gw_presence_is_on(p, GW_PRES_ME, T, none, user(1)));
  qim__gw_presence_count(p, GW_PRES_ME, T, none, user(1), -1);
  assert_int_equal(take_kind(p, 100, GW_PRES_ME, NULL, NULL), 0); /* one session left */
  qim__gw_presence_count(p, GW_PRES_ME, T, none, user(1), -1);
  assert_int_equal(take_kind(p, 100, GW_PRES_ME, &on, NULL), 1);
  assert_false(on);
  assert_false(qim__gw_presence_is_on(p, GW_PRES_ME, T, none, user(1)));
  assert_int_equal(qim__gw_presence_entries(p), 0);
  /* A detach nobody counted changes nothing. */
  qim__gw_presence_count(p, GW_PRES_ME, T, none, user(2), -1);
  assert_int_equal(take_kind(p, 100, GW_PRES_ME, NULL, NULL), 0);
  assert_int_equal(qim__gw_presence_entries(p), 0);
  qim__gw_presence_free(p);
}

static void test_a_flap_within_one_interval_makes_nothing(void **state) {
  (void)state;
  gw_presence *p = qim__gw_presence_new();
  attach(p, 1, 1, +1);
  attach(p, 1, 1, -1);
  attach(p, 1, 1, +1);
  attach(p, 1, 1, -1);
  gw_pres_change *ch;
  uint64_t d = 0;
  assert_int_equal(qim__gw_presence_take(p, 100, &ch, &d), 0);
  assert_null(ch);
  assert_int_equal(qim__gw_presence_entries(p), 0);
  /* Online, then a reconnect (off + on) within the next interval: still nothing. */
  attach(p, 1, 1, +1);
  assert_int_equal(take_kind(p, 100, GW_PRES_MEMBER, NULL, NULL), 1);
  attach(p, 1, 1, -1);
  attach(p, 1, 1, +1);
  assert_int_equal(qim__gw_presence_take(p, 100, &ch, &d), 0);
  qim__gw_presence_free(p);
}

static void test_topic_activity_follows_all_sessions_and_names_an_actor(void **state) {
  (void)state;
  gw_presence *p = qim__gw_presence_new();
  attach(p, 3, 1, +1);
  attach(p, 3, 2, +1);
  gw_pres_change *ch;
  uint64_t d = 0;
  size_t n = qim__gw_presence_take(p, 100, &ch, &d);
  size_t topics = 0;
  for (size_t i = 0; i < n; i++)
    if (ch[i].kind == GW_PRES_TOPIC) {
      topics++;
      assert_true(ch[i].on);
      assert_true(qim_u128_eq(ch[i].conv.v, conv(3).v));
      assert_true(qim_u128_eq(ch[i].actor.v, user(2).v)); /* the last one that counted */
    }
  assert_int_equal(topics, 1);
  qim_free(ch);
  attach(p, 3, 1, -1);
  assert_int_equal(take_kind(p, 100, GW_PRES_TOPIC, NULL, NULL), 0); /* user 2 is still there */
  attach(p, 3, 2, -1);
  bool on = true;
  assert_int_equal(take_kind(p, 100, GW_PRES_TOPIC, &on, NULL), 1);
  assert_false(on);
  qim__gw_presence_free(p);
}

static void test_member_changes_of_a_big_topic_spread_over_takes(void **state) {
  (void)state;
  gw_presence *p = qim__gw_presence_new();
  /* 100 users attach one topic; fanout_max 500 allows 500 / 100 = 5 changes per take. */
  for (uint64_t u = 1; u <= 100; u++) attach(p, 9, u, +1);
  uint64_t deferred = 0, total_deferred = 0;
  size_t got = take_kind(p, 500, GW_PRES_MEMBER, NULL, &deferred);
  assert_int_equal(got, 5);
  assert_int_equal(deferred, 95);
  size_t takes = 1;
  while (got < 100) {
    size_t k = take_kind(p, 500, GW_PRES_MEMBER, NULL, &deferred);
    assert_true(k <= 5);
    assert_true(k > 0);
    got += k;
    total_deferred += deferred;
    takes++;
  }
  assert_int_equal(got, 100);
  assert_int_equal(takes, 20);
  assert_true(total_deferred > 0);
  /* Another topic is not held back by the first one's share. */
  for (uint64_t u = 1; u <= 100; u++) attach(p, 9, u, -1);
  attach(p, 10, 1, +1);
  size_t first = take_kind(p, 500, GW_PRES_MEMBER, NULL, &deferred);
  assert_true(first >= 2); /* topic 10's change and topic 9's first offs (nobody left: no bound) */
  qim__gw_presence_free(p);
}

static void test_a_deferred_change_still_coalesces(void **state) {
  (void)state;
  gw_presence *p = qim__gw_presence_new();
  for (uint64_t u = 1; u <= 10; u++) attach(p, 4, u, +1);
  uint64_t deferred = 0;
  /* fanout_max 10 with 10 sessions attached: one change per take. */
  assert_int_equal(take_kind(p, 10, GW_PRES_MEMBER, NULL, &deferred), 1);
  assert_int_equal(deferred, 9);
  /* The nine waiting users leave before their turn: their on/off pairs vanish. */
  gw_pres_change *ch;
  size_t n = qim__gw_presence_take(p, 10, &ch, &deferred); /* one more "on" goes out */
  qim_free(ch);
  assert_true(n >= 1);
  size_t sent_on = 2;
  for (uint64_t u = 1; u <= 10; u++) attach(p, 4, u, -1);
  /* Now only the two users clients were told about need an "off". */
  size_t offs = 0;
  for (int i = 0; i < 20; i++) offs += take_kind(p, 10, GW_PRES_MEMBER, NULL, NULL);
  assert_int_equal(offs, sent_on);
  assert_int_equal(qim__gw_presence_entries(p), 0);
  qim__gw_presence_free(p);
}

/* Reads frames until a {pres} on `me` from `src` with `what`; false on timeout. */
static bool got_pres_me(gwc *c, const char *src, const char *what) {
  for (;;) {
    json_t *j = gwc_wait(c, "pres", NULL, 15000); /* a loaded sanitizer run is slow */
    if (!j) return false;
    json_t *p = json_object_get(j, "pres");
    bool hit = strcmp(json_string_value(json_object_get(p, "topic")), "me") == 0 &&
               strcmp(json_string_value(json_object_get(p, "src")), src) == 0 &&
               strcmp(json_string_value(json_object_get(p, "what")), what) == 0;
    json_decref(j);
    if (hit) return true;
  }
}

static void test_p2p_contacts_see_each_other_on_and_off_on_me(void **state) {
  (void)state;
  gwsrv srv;
  const char *extra[] = {"--presence-interval", "20ms", NULL};
  assert_int_equal(gwsrv_start_with(&srv, extra), 0);
  gwc a, b;
  assert_int_equal(gwc_open(&a, srv.port), 0);
  assert_int_equal(gwc_open(&b, srv.port), 0);
  assert_int_equal(gwc_signup(&a, "presa1", "secret-pass"), 0);
  assert_int_equal(gwc_signup(&b, "presb1", "secret-pass"), 0);
  /* Their direct conversation, as the p2p topics will create it. */
  qim_user_id ua, ub;
  assert_int_equal(qim_user_id_parse(a.user, strlen(a.user), &ua), 0);
  assert_int_equal(qim_user_id_parse(b.user, strlen(b.user), &ub), 0);
  bool a_low = qim_u128_cmp(ua.v, ub.v) < 0;
  qim_store_conv_create_req cr = {.conv = {.tenant_id = T,
                                           .conversation_id = qim_conversation_id_direct(T, ua, ub),
                                           .kind = QIM_CONVERSATION_DIRECT,
                                           .direct_users = {a_low ? ua : ub, a_low ? ub : ua}}};
  assert_int_equal(QIM_STORE_SYNC(srv.node.store, conversations.create, &cr), 0);
  gwc_sendf(&a, "{\"sub\":{\"id\":\"3\",\"topic\":\"me\"}}");
  assert_int_equal(gwc_code(&a, "3", NULL), 200);
  gwc_sendf(&b, "{\"sub\":{\"id\":\"3\",\"topic\":\"me\"}}");
  assert_int_equal(gwc_code(&b, "3", NULL), 200);
  assert_true(got_pres_me(&a, b.user, "on")); /* a hears b come online */
  assert_true(got_pres_me(&b, a.user, "on")); /* b is told a is online already */
  gwc_close(&b);
  assert_true(got_pres_me(&a, b.user, "off")); /* b's last session went away */
  gwc_close(&a);
  gwsrv_stop(&srv);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_first_and_last_session_make_on_and_off),
      cmocka_unit_test(test_is_on_follows_what_was_announced_not_the_live_count),
      cmocka_unit_test(test_a_flap_within_one_interval_makes_nothing),
      cmocka_unit_test(test_topic_activity_follows_all_sessions_and_names_an_actor),
      cmocka_unit_test(test_member_changes_of_a_big_topic_spread_over_takes),
      cmocka_unit_test(test_a_deferred_change_still_coalesces),
      cmocka_unit_test(test_p2p_contacts_see_each_other_on_and_off_on_me),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
