/*
 * test_history_retention.c — the retention classes (table-driven over class × age), what
 * an expiry leaves behind (tombstones, the retention floor, a dellog row for everyone, a
 * Control), batching, and the periodic sweeper task with an injected clock.
 */
#include <unistd.h>

#include "history_fixture.h"
#include "testsupport.h"

#define HOUR (3600ull * 1000)
#define DAY (24 * HOUR)

static int setup(void **state) {
  hx *x = calloc(1, sizeof *x);
  static qim_history_tenant_age ages[1];
  ages[0] = (qim_history_tenant_age){HX_TENANT, HOUR};
  qim_history_config cfg;
  hx_config(&cfg);
  cfg.tenant_ages = ages;
  cfg.tenant_age_count = 1;
  cfg.sweep_interval_ms = 20;
  hx_open(x, "hretention", &cfg);
  *state = x;
  return 0;
}

static int teardown(void **state) {
  hx_close(*state);
  free(*state);
  return 0;
}

typedef struct retention_case {
  const char *name;
  qim_retention_class cls;
  bool tenant_has_age;
  uint64_t advance;
  bool expired;
} retention_case;

static const retention_case CASES[] = {
    {"Default is kept for a year", QIM_RETENTION_CLASS_DEFAULT, true, 400 * DAY, false},
    {"ComplianceHold is kept for a year", QIM_RETENTION_CLASS_COMPLIANCE_HOLD, true, 400 * DAY,
     false},
    {"Ephemeral24h is kept just under a day", QIM_RETENTION_CLASS_EPHEMERAL_24H, true, DAY - 1,
     false},
    {"Ephemeral24h is gone after a day", QIM_RETENTION_CLASS_EPHEMERAL_24H, true, DAY + 1, true},
    {"TenantCustom is kept within the tenant's age", QIM_RETENTION_CLASS_TENANT_CUSTOM, true,
     HOUR - 1, false},
    {"TenantCustom is gone after the tenant's age", QIM_RETENTION_CLASS_TENANT_CUSTOM, true,
     HOUR + 1, true},
    {"TenantCustom without an age for the tenant is kept", QIM_RETENTION_CLASS_TENANT_CUSTOM, false,
     400 * DAY, false},
};

static void test_every_retention_class(void **state) {
  hx *x = *state;
  static const qim_history_tenant_age other_tenant = {{{0, 999}}, HOUR};
  for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) {
    const retention_case *c = &CASES[i];
    uint64_t g = 10 + i;
    hx_group_create(x, g, 1, 2, 1);
    qim_conversation_seq seq = hx_send_class(x, g, 1, "retained?", c->cls);
    qim_history_config cfg = x->cfg;
    if (!c->tenant_has_age) cfg.tenant_ages = &other_tenant;
    qim_history *h;
    assert_int_equal(qim_history_open(x->store, x->commit, &x->clock.clock, &cfg, &h), 0);
    qim_manual_clock_advance(&x->clock, c->advance);
    qim_history_sweep_result res;
    assert_int_equal(qim_history_sweep(h, &res), 0);
    qim_history_close(h);
    qim_message_record rec = hx_record(x, g, seq);
    bool gone = rec.state == QIM_MESSAGE_STATE_DELETED && rec.content.payload_or_ciphertext.n == 0;
    qim_message_record_free(&rec);
    if (gone != c->expired) fail_msg("case '%s': expired %d (want %d)", c->name, gone, c->expired);
  }
}

static void test_an_expiry_leaves_tombstones_a_floor_a_dellog_row_and_a_control(void **state) {
  hx *x = *state;
  hx_group_create(x, 1, 1, 2, 1);
  for (int i = 0; i < 3; i++) hx_send_class(x, 1, 1, "brief", QIM_RETENTION_CLASS_EPHEMERAL_24H);
  qim_manual_clock_advance(&x->clock, 2 * HOUR);
  hx_pub(x, 1, 1, "kept"); /* 4 */
  qim_manual_clock_advance(&x->clock, DAY - HOUR);
  qim_history_sweep_result res;
  assert_int_equal(qim_history_sweep(x->history, &res), 0);
  assert_int_equal(res.expired, 3);
  assert_int_equal(res.conversations, 1);
  assert_int_equal(res.controls_failed, 0);
  qim_store_conversation c = hx_conversation(x, 1);
  assert_int_equal(c.retention_floor, 3);
  char got[64];
  qim_history_get q = {0};
  assert_int_equal(hx_get(x, 1, 2, &q, got, sizeof got, NULL), 0);
  assert_string_equal(got, "4");
  qim_history_del_query dq = {.actor = hx_actor(2), .conversation_id = hx_conv(1)};
  qim_history_del_page p;
  assert_int_equal(qim_history_get_del(x->history, &dq, &p), 0);
  assert_int_equal(p.range_count, 1);
  assert_int_equal(p.ranges[0].low, 1);
  assert_int_equal(p.ranges[0].hi, 4);
  assert_int_equal(p.clear, c.delid);
  qim_history_del_page_free(&p);
  json_t *j = hx_last_control(x, NULL);
  assert_string_equal(hx_str(j, "op"), "expire");
  assert_int_equal(hx_int(j, "through"), 3);
  assert_int_equal(hx_int(j, "delid"), (json_int_t)c.delid);
  assert_string_equal(hx_str(j, "class"), "ephemeral24h");
  json_decref(j);
  qim_store_conversation_free(&c);
  /* a second pass finds nothing more */
  assert_int_equal(qim_history_sweep(x->history, &res), 0);
  assert_int_equal(res.expired, 0);
}

static void test_a_sweep_works_through_more_than_one_batch(void **state) {
  hx *x = *state;
  qim_history_config cfg = x->cfg;
  cfg.sweep_batch = 2;
  qim_history *h;
  assert_int_equal(qim_history_open(x->store, x->commit, &x->clock.clock, &cfg, &h), 0);
  hx_group_create(x, 1, 1, 2, 1);
  for (int i = 0; i < 5; i++) hx_send_class(x, 1, 1, "brief", QIM_RETENTION_CLASS_TENANT_CUSTOM);
  qim_manual_clock_advance(&x->clock, 2 * HOUR);
  qim_history_sweep_result res;
  assert_int_equal(qim_history_sweep(h, &res), 0);
  assert_int_equal(res.expired, 5);
  qim_store_conversation c = hx_conversation(x, 1);
  assert_int_equal(c.retention_floor, 5);
  qim_store_conversation_free(&c);
  qim_history_close(h);
}

static void test_tenant_ages_and_tenants_come_from_qimd_configuration(void **state) {
  hx *x = *state;
  char *argv[] = {"--tenant-retention", "7:2h", "--api-key", "k:9", "--msg-delete-age", "90s"};
  qim_config qc;
  qim_config_error err;
  assert_int_equal(qim_config_load(&qc, 6, argv, NULL, &err), 0);
  qim_history_config cfg;
  qim_history_config_default(&cfg);
  qim_tenant_id tenants[4];
  qim_history_config_from(&cfg, &qc, tenants, 4);
  assert_int_equal(cfg.msg_delete_age_ms, 90000);
  assert_int_equal(cfg.tenant_count, 2); /* 9 from the key, 7 from the retention */
  assert_int_equal(cfg.tenants[0].v.lo, 9);
  assert_int_equal(cfg.tenants[1].v.lo, 7);
  assert_int_equal(cfg.tenant_age_count, 1);
  qim_history *h;
  assert_int_equal(qim_history_open(x->store, x->commit, &x->clock.clock, &cfg, &h), 0);
  hx_group_create(x, 1, 1, 2, 1); /* HX_TENANT is tenant 7 */
  qim_conversation_seq seq = hx_send_class(x, 1, 1, "custom", QIM_RETENTION_CLASS_TENANT_CUSTOM);
  qim_manual_clock_advance(&x->clock, HOUR);
  qim_history_sweep_result res;
  assert_int_equal(qim_history_sweep(h, &res), 0);
  assert_int_equal(res.expired, 0);
  qim_manual_clock_advance(&x->clock, HOUR + 1);
  assert_int_equal(qim_history_sweep(h, &res), 0);
  assert_int_equal(res.expired, 1);
  assert_int_equal(hx_state(x, 1, seq), QIM_MESSAGE_STATE_DELETED);
  qim_history_close(h);
}

static void test_the_sweeper_task_runs_by_itself_until_stopped(void **state) {
  hx *x = *state;
  hx_group_create(x, 1, 1, 2, 1);
  qim_conversation_seq seq = hx_send_class(x, 1, 1, "brief", QIM_RETENTION_CLASS_EPHEMERAL_24H);
  assert_int_equal(qim_history_sweeper_start(x->history), 0);
  assert_int_equal(qim_history_sweeper_start(x->history), -EALREADY);
  qim_manual_clock_advance(&x->clock, DAY + 1);
  bool gone = false;
  WAIT_FOR((gone = hx_state(x, 1, seq) == QIM_MESSAGE_STATE_DELETED), 2000);
  qim_history_sweeper_stop(x->history);
  assert_true(gone);
  qim_history_sweeper_stop(x->history); /* stopping twice is harmless */
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_every_retention_class, setup, teardown),
      cmocka_unit_test_setup_teardown(
          test_an_expiry_leaves_tombstones_a_floor_a_dellog_row_and_a_control, setup, teardown),
      cmocka_unit_test_setup_teardown(test_a_sweep_works_through_more_than_one_batch, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_tenant_ages_and_tenants_come_from_qimd_configuration,
                                      setup, teardown),
      cmocka_unit_test_setup_teardown(test_the_sweeper_task_runs_by_itself_until_stopped, setup,
                                      teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
