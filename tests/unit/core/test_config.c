/*
 * test_config.c — qimd configuration: defaults, precedence of flags > environment >
 * file > defaults, the file format, and one test per validation error (each must name
 * its key and its source, never fall back to a default).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "qim/config.h"
#include "testsupport.h"

#define NARGS(a) ((int)(sizeof(a) / sizeof((a)[0])))

static char *const no_env[] = {NULL};

/* Writes `text` to a fresh file in `dir` and returns its path (caller frees). */
static char *write_file(const char *dir, const char *name, const char *text) {
  char *path = NULL;
  assert_true(asprintf(&path, "%s/%s", dir, name) > 0);
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fputs(text, f);
  fclose(f);
  return path;
}

/* Loads with only flags; asserts success. */
static void load_ok(qim_config *c, int argc, char *const argv[], char *const envp[]) {
  qim_config_error err;
  int rc = qim_config_load(c, argc, argv, envp, &err);
  if (rc != 0) fail_msg("unexpected config error: %s", err.message);
}

/* Loads and expects failure with exactly `message` for `key`. */
static void load_fails(int argc, char *const argv[], char *const envp[], const char *key,
                       const char *message) {
  qim_config c;
  qim_config_error err;
  assert_int_equal(qim_config_load(&c, argc, argv, envp, &err), -EINVAL);
  assert_string_equal(err.key, key);
  assert_string_equal(err.message, message);
}

/* ---- defaults --------------------------------------------------------------- */

static void test_defaults_match_documented_values(void **state) {
  (void)state;
  qim_config c;
  qim_config_defaults(&c);
  assert_string_equal(c.listen_host, "127.0.0.1");
  assert_int_equal(c.listen_port, 6060);
  assert_string_equal(c.data_dir, "./var");
  assert_string_equal(c.store_url, "sqlite:./var/qim.db");
  assert_int_equal(c.store_backend, QIM_STORAGE_BACKEND_SQLITE);
  assert_string_equal(c.store_path, "./var/qim.db");
  assert_int_equal(c.node_id, 1);
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  assert_int_equal(c.io_threads, cores > 64 ? 64 : cores);
  assert_int_equal(c.max_message_size, 131072);
  assert_int_equal(c.inline_body_threshold, 4096);
  assert_int_equal(c.shard_count, 0); /* the store's own layout, or its default */
  assert_int_equal(c.lanes_per_shard, 0);
  assert_int_equal(c.dedupe_window_ms, 7ull * 86400000);
  assert_int_equal(c.msg_delete_age_ms, 600000);
  assert_int_equal(c.member_limit, 10000);
  assert_int_equal(c.mailbox_retain_count, 1000000);
  assert_int_equal(c.mailbox_retention_interval_ms, 60000);
  assert_int_equal(c.membership_versions_kept, 1000);
  assert_int_equal(c.api_key_count, 1);
  assert_string_equal(c.api_keys[0].key, QIM_CONFIG_DEMO_API_KEY);
  assert_int_equal(c.api_keys[0].tenant.v.hi, 0);
  assert_int_equal(c.api_keys[0].tenant.v.lo, 1);
  assert_int_equal(c.service_token_count, 0);
  assert_int_equal(c.token_lifetime_ms, 14ull * 86400000);
  assert_int_equal(c.login_min_length, 4);
  assert_int_equal(c.password_min_length, 6);
  assert_int_equal(c.send_rate, 50);
  assert_int_equal(c.send_burst, 200);
  assert_int_equal(c.login_rate, 20);
  assert_int_equal(c.login_burst, 100);
  assert_int_equal(c.log_level, QIM_LOG_INFO);
  assert_int_equal(c.clock_tolerance_ms, 1000);
  assert_string_equal(c.config_file, "");
}

static void test_load_without_sources_gives_defaults(void **state) {
  (void)state;
  qim_config c, d;
  load_ok(&c, 0, NULL, no_env);
  qim_config_defaults(&d);
  assert_memory_equal(&c, &d, sizeof c);
  load_ok(&c, 0, NULL, NULL); /* NULL environment means none */
  assert_memory_equal(&c, &d, sizeof c);
}

/* ---- precedence --------------------------------------------------------------- */

static void test_flag_beats_env_beats_file_beats_default(void **state) {
  (void)state;
  char *dir = qim_test_tmpdir("config");
  char *file = write_file(dir, "qim.conf", "listen = 10.0.0.1:1000\nnode_id = 7\n");
  char *conf = NULL;
  assert_true(asprintf(&conf, "QIM_CONFIG=%s", file) > 0);
  char *env_listen[] = {conf, "QIM_LISTEN=10.0.0.2:2000", NULL};
  char *env_plain[] = {conf, NULL};
  char *flags[] = {"--listen", "10.0.0.3:3000"};
  qim_config c;

  load_ok(&c, NARGS(flags), flags, env_listen);
  assert_string_equal(c.listen_host, "10.0.0.3");
  assert_int_equal(c.listen_port, 3000);
  assert_int_equal(c.node_id, 7); /* other keys still come from the file */
  assert_string_equal(c.config_file, file);

  load_ok(&c, 0, NULL, env_listen);
  assert_string_equal(c.listen_host, "10.0.0.2");
  assert_int_equal(c.listen_port, 2000);

  load_ok(&c, 0, NULL, env_plain);
  assert_string_equal(c.listen_host, "10.0.0.1");
  assert_int_equal(c.listen_port, 1000);

  free(conf), free(file), qim_test_rmtree(dir);
}

static void test_config_flag_beats_config_env(void **state) {
  (void)state;
  char *dir = qim_test_tmpdir("config");
  char *a = write_file(dir, "a.conf", "node_id = 11\n");
  char *b = write_file(dir, "b.conf", "node_id = 22\n");
  char *conf = NULL;
  assert_true(asprintf(&conf, "QIM_CONFIG=%s", a) > 0);
  char *env[] = {conf, NULL};
  char *flags[] = {"--config", b};
  qim_config c;
  load_ok(&c, NARGS(flags), flags, env);
  assert_int_equal(c.node_id, 22);
  assert_string_equal(c.config_file, b);
  free(conf), free(a), free(b), qim_test_rmtree(dir);
}

static void test_store_defaults_to_final_data_dir(void **state) {
  (void)state;
  char *env[] = {"QIM_DATA=/env/data", NULL};
  char *flags[] = {"--data=/flag/data"};
  qim_config c;
  load_ok(&c, NARGS(flags), flags, env);
  assert_string_equal(c.data_dir, "/flag/data");
  assert_string_equal(c.store_url, "sqlite:/flag/data/qim.db");
  assert_string_equal(c.store_path, "/flag/data/qim.db");
}

static void test_explicit_store_from_file_beats_derived_store(void **state) {
  (void)state;
  char *dir = qim_test_tmpdir("config");
  char *file = write_file(dir, "qim.conf", "store = redis://127.0.0.1:6390/2\n");
  char *flags[] = {"--config", file, "--data", "/elsewhere"};
  qim_config c;
  load_ok(&c, NARGS(flags), flags, no_env);
  assert_int_equal(c.store_backend, QIM_STORAGE_BACKEND_REDIS);
  assert_string_equal(c.store_host, "127.0.0.1");
  assert_int_equal(c.store_port, 6390);
  assert_int_equal(c.store_db, 2);
  assert_string_equal(c.store_url, "redis://127.0.0.1:6390/2");
  free(file), qim_test_rmtree(dir);
}

static void test_list_from_higher_source_replaces_lower_list(void **state) {
  (void)state;
  char *dir = qim_test_tmpdir("config");
  char *file = write_file(dir, "qim.conf", "api_key = fileone:1\napi_key = filetwo:2\n");
  char *conf = NULL;
  assert_true(asprintf(&conf, "QIM_CONFIG=%s", file) > 0);
  char *env_keys[] = {conf, "QIM_API_KEY=envone:3, envtwo:0x10", NULL};
  char *env_file[] = {conf, NULL};
  char *flags[] = {"--api-key", "flagone", "--api-key=flagtwo:9,flagthree:8"};
  qim_config c;

  load_ok(&c, 0, NULL, env_file);
  assert_int_equal(c.api_key_count, 2);
  assert_string_equal(c.api_keys[1].key, "filetwo");
  assert_int_equal(c.api_keys[1].tenant.v.lo, 2);

  load_ok(&c, 0, NULL, env_keys);
  assert_int_equal(c.api_key_count, 2);
  assert_string_equal(c.api_keys[0].key, "envone");
  assert_string_equal(c.api_keys[1].key, "envtwo");
  assert_int_equal(c.api_keys[1].tenant.v.lo, 16);

  load_ok(&c, NARGS(flags), flags, env_keys);
  assert_int_equal(c.api_key_count, 3);
  assert_string_equal(c.api_keys[0].key, "flagone");
  assert_int_equal(c.api_keys[0].tenant.v.lo, 1); /* no TENANT means tenant 1 */
  assert_string_equal(c.api_keys[2].key, "flagthree");
  assert_int_equal(c.api_keys[2].tenant.v.lo, 8);
  free(conf), free(file), qim_test_rmtree(dir);
}

/* ---- the file format ------------------------------------------------------------ */

static void test_file_allows_comments_blanks_and_spacing(void **state) {
  (void)state;
  char *dir = qim_test_tmpdir("config");
  char *file = write_file(dir, "qim.conf",
                          "# qim configuration\n\n   listen=0.0.0.0:7000   # all interfaces\n"
                          "\tdata =  /srv/qim#1  \nmax_message_size = 256k\ndedupe_window = 36h\n"
                          "log_level = debug\nservice_token = admin:0123456789abcdef0123\n"
                          "api_key = k1:0x0102030405060708090a0b0c0d0e0f10\nnode_id = 5");
  char *flags[] = {"--config", file};
  qim_config c;
  load_ok(&c, NARGS(flags), flags, no_env);
  assert_string_equal(c.listen_host, "0.0.0.0");
  assert_int_equal(c.listen_port, 7000);
  assert_string_equal(c.data_dir, "/srv/qim#1"); /* '#' inside a value is not a comment */
  assert_int_equal(c.max_message_size, 262144);
  assert_int_equal(c.dedupe_window_ms, 36ull * 3600000);
  assert_int_equal(c.log_level, QIM_LOG_DEBUG);
  assert_int_equal(c.service_token_count, 1);
  assert_int_equal(c.api_keys[0].tenant.v.hi, 0x0102030405060708ull);
  assert_int_equal(c.api_keys[0].tenant.v.lo, 0x090a0b0c0d0e0f10ull);
  assert_int_equal(c.node_id, 5);
  free(file), qim_test_rmtree(dir);
}

static void test_ipv6_listen_address_is_accepted_in_brackets(void **state) {
  (void)state;
  char *flags[] = {"--listen", "[::1]:6061"};
  qim_config c;
  load_ok(&c, NARGS(flags), flags, no_env);
  assert_string_equal(c.listen_host, "::1");
  assert_int_equal(c.listen_port, 6061);
}

/* Runs the file-format failure case `text` and compares the message (FILE = path). */
static void file_fails(const char *text, const char *key, const char *fmt_msg) {
  char *dir = qim_test_tmpdir("config");
  char *file = write_file(dir, "qim.conf", text);
  char *flags[] = {"--config", file};
  char *msg = NULL;
  assert_true(asprintf(&msg, fmt_msg, file) > 0);
  load_fails(NARGS(flags), flags, no_env, key, msg);
  free(msg), free(file), qim_test_rmtree(dir);
}

static void test_file_unknown_key_is_an_error(void **state) {
  (void)state;
  file_fails("# ok\nlisten = 127.0.0.1:1\nlisen = 1.2.3.4:5\n", "lisen",
             "config: %s:3: unknown key 'lisen'");
  file_fails("config = other.conf\n", "config", "config: %s:1: unknown key 'config'");
}

static void test_file_line_without_equals_is_an_error(void **state) {
  (void)state;
  file_fails("listen 127.0.0.1:1\n", "",
             "config: %s:1: expected 'key = value', got 'listen 127.0.0.1:1'");
}

static void test_file_scalar_set_twice_is_an_error(void **state) {
  (void)state;
  file_fails("node_id = 2\n\nnode_id = 3\n", "node_id",
             "config: node_id: set twice (lines 1 and 3) (from %s:3)");
}

static void test_file_bad_value_names_file_and_line(void **state) {
  (void)state;
  file_fails("\nlisten = x\n", "listen", "config: listen: expected HOST:PORT, got 'x' (from %s:2)");
  file_fails("listen =\n", "listen", "config: listen: expected HOST:PORT, got '' (from %s:1)");
}

static void test_file_overlong_line_is_an_error(void **state) {
  (void)state;
  char text[5000];
  memset(text, 'a', sizeof text - 2);
  text[sizeof text - 2] = '\n';
  text[sizeof text - 1] = '\0';
  file_fails(text, "", "config: %s:1: line longer than 4094 characters");
}

static void test_missing_file_is_an_error(void **state) {
  (void)state;
  char *flags[] = {"--config", "/nonexistent/qim.conf"};
  qim_config c;
  qim_config_error err;
  assert_int_equal(qim_config_load(&c, NARGS(flags), flags, no_env, &err), -ENOENT);
  assert_string_equal(err.key, "config");
  assert_string_equal(
      err.message,
      "config: config: cannot read '/nonexistent/qim.conf': No such file or directory");
}

static void test_empty_config_path_is_an_error(void **state) {
  (void)state;
  char *env[] = {"QIM_CONFIG=", NULL};
  load_fails(0, NULL, env, "config",
             "config: config: expected a file path, got '' (from QIM_CONFIG)");
  char *flags[] = {"--config", "a", "--config", "b"};
  load_fails(NARGS(flags), flags, no_env, "config", "config: config: given twice (from --config)");
}

/* ---- flags ------------------------------------------------------------------------ */

static void test_unknown_flag_is_an_error(void **state) {
  (void)state;
  char *a[] = {"--lissen=1.2.3.4:5"};
  load_fails(NARGS(a), a, no_env, "", "config: unknown flag '--lissen' (qimd --help lists them)");
  char *b[] = {"--node_id", "3"}; /* flags spell keys with '-' */
  load_fails(NARGS(b), b, no_env, "", "config: unknown flag '--node_id' (qimd --help lists them)");
}

static void test_positional_argument_is_an_error(void **state) {
  (void)state;
  char *a[] = {"127.0.0.1:6060"};
  load_fails(NARGS(a), a, no_env, "",
             "config: unexpected argument '127.0.0.1:6060' (settings are given as --name VALUE)");
}

static void test_flag_without_value_is_an_error(void **state) {
  (void)state;
  char *a[] = {"--node-id"};
  load_fails(NARGS(a), a, no_env, "node_id", "config: node_id: missing value after --node-id");
}

static void test_flag_given_twice_is_an_error(void **state) {
  (void)state;
  char *a[] = {"--node-id", "2", "--node-id=3"};
  load_fails(NARGS(a), a, no_env, "node_id", "config: node_id: given twice (from --node-id)");
}

static void test_bad_env_value_names_the_variable(void **state) {
  (void)state;
  char *env[] = {"QIM_LISTEN=x", NULL};
  load_fails(0, NULL, env, "listen",
             "config: listen: expected HOST:PORT, got 'x' (from QIM_LISTEN)");
}

static void test_unrelated_qim_env_is_ignored(void **state) {
  (void)state;
  char *env[] = {"QIM_ERRLOG=/tmp/x", "QIM_SRC=/src", "QIM_LISTENER=junk", NULL};
  qim_config c, d;
  load_ok(&c, 0, NULL, env);
  qim_config_defaults(&d);
  assert_memory_equal(&c, &d, sizeof c);
}

/* ---- every validation error --------------------------------------------------------- */

typedef struct bad_case {
  const char *flag, *value, *key, *message;
} bad_case;

static const bad_case bad_cases[] = {
    {"--listen", "x", "listen", "config: listen: expected HOST:PORT, got 'x' (from --listen)"},
    {"--listen", "127.0.0.1", "listen",
     "config: listen: expected HOST:PORT, got '127.0.0.1' (from --listen)"},
    {"--listen", "127.0.0.1:0", "listen",
     "config: listen: expected HOST:PORT, got '127.0.0.1:0' (from --listen)"},
    {"--listen", "127.0.0.1:65536", "listen",
     "config: listen: expected HOST:PORT, got '127.0.0.1:65536' (from --listen)"},
    {"--listen", "bad_host:80", "listen",
     "config: listen: expected HOST:PORT, got 'bad_host:80' (from --listen)"},
    {"--listen", "[::1:80", "listen",
     "config: listen: expected HOST:PORT, got '[::1:80' (from --listen)"},
    {"--listen", ":80", "listen", "config: listen: expected HOST:PORT, got ':80' (from --listen)"},
    {"--data", "", "data",
     "config: data: expected a path of 1 to 1023 bytes, got '' (from --data)"},
    {"--store", "postgres://x", "store",
     "config: store: expected sqlite:PATH or redis://HOST:PORT[/DB] (DB 0-15), got 'postgres://x' "
     "(from --store)"},
    {"--store", "sqlite:", "store",
     "config: store: expected sqlite:PATH or redis://HOST:PORT[/DB] (DB 0-15), got 'sqlite:' (from "
     "--store)"},
    {"--store", "redis://h:6379/16", "store",
     "config: store: expected sqlite:PATH or redis://HOST:PORT[/DB] (DB 0-15), got "
     "'redis://h:6379/16' (from "
     "--store)"},
    {"--node-id", "0", "node_id",
     "config: node_id: expected an integer from 1 to 16777215, got '0' (from --node-id)"},
    {"--node-id", "16777216", "node_id",
     "config: node_id: expected an integer from 1 to 16777215, got '16777216' (from --node-id)"},
    {"--node-id", "-1", "node_id",
     "config: node_id: expected an integer from 1 to 16777215, got '-1' (from --node-id)"},
    {"--node-id", "1x", "node_id",
     "config: node_id: expected an integer from 1 to 16777215, got '1x' (from --node-id)"},
    {"--node-id", "99999999999999999999", "node_id",
     "config: node_id: expected an integer from 1 to 16777215, got '99999999999999999999' (from "
     "--node-id)"},
    {"--io-threads", "0", "io_threads",
     "config: io_threads: expected an integer from 1 to 64, got '0' (from --io-threads)"},
    {"--max-message-size", "1023", "max_message_size",
     "config: max_message_size: expected a size in bytes (k or m suffix allowed) from 1024 to "
     "16777216, got "
     "'1023' (from --max-message-size)"},
    {"--max-message-size", "17m", "max_message_size",
     "config: max_message_size: expected a size in bytes (k or m suffix allowed) from 1024 to "
     "16777216, got "
     "'17m' (from --max-message-size)"},
    {"--inline-body-threshold", "4kb", "inline_body_threshold",
     "config: inline_body_threshold: expected a size in bytes (k or m suffix allowed) from 0 to "
     "16777216, got "
     "'4kb' (from --inline-body-threshold)"},
    {"--shard-count", "4097", "shard_count",
     "config: shard_count: expected an integer from 0 to 4096, got '4097' (from --shard-count)"},
    {"--lanes-per-shard", "65", "lanes_per_shard",
     "config: lanes_per_shard: expected an integer from 0 to 64, got '65' (from "
     "--lanes-per-shard)"},
    {"--dedupe-window", "7", "dedupe_window",
     "config: dedupe_window: expected a duration from 1m to 365d (a number with ms, s, m, h or d), "
     "got '7' "
     "(from --dedupe-window)"},
    {"--dedupe-window", "30s", "dedupe_window",
     "config: dedupe_window: expected a duration from 1m to 365d (a number with ms, s, m, h or d), "
     "got '30s' "
     "(from --dedupe-window)"},
    {"--msg-delete-age", "0s", "msg_delete_age",
     "config: msg_delete_age: expected a duration from 1s to 365d (a number with ms, s, m, h or "
     "d), got '0s' "
     "(from --msg-delete-age)"},
    {"--tenant-retention", "7", "tenant_retention",
     "config: tenant_retention: expected TENANT:DURATION (a non-zero tenant, a duration from 1s to "
     "36500d), got '7' (from --tenant-retention)"},
    {"--tenant-retention", "0:1h", "tenant_retention",
     "config: tenant_retention: expected TENANT:DURATION (a non-zero tenant, a duration from 1s to "
     "36500d), got '0:1h' (from --tenant-retention)"},
    {"--tenant-retention", "7:500ms", "tenant_retention",
     "config: tenant_retention: expected TENANT:DURATION (a non-zero tenant, a duration from 1s to "
     "36500d), got '7:500ms' (from --tenant-retention)"},
    {"--tenant-retention", "7:1h,7:2h", "tenant_retention",
     "config: tenant_retention: tenant '7' is listed twice (from --tenant-retention)"},
    {"--mailbox-retain-count", "0", "mailbox_retain_count",
     "config: mailbox_retain_count: expected an integer from 1 to 4000000000, got '0' (from "
     "--mailbox-retain-count)"},
    {"--mailbox-retention-interval", "500ms", "mailbox_retention_interval",
     "config: mailbox_retention_interval: expected a duration from 1s to 7d (a number with ms, s, "
     "m, "
     "h or d), got '500ms' (from --mailbox-retention-interval)"},
    {"--member-limit", "1", "member_limit",
     "config: member_limit: expected an integer from 2 to 1000000, got '1' (from --member-limit)"},
    {"--api-key", "bad key", "api_key",
     "config: api_key: expected KEY[:TENANT] (KEY of URL-safe characters, TENANT a non-zero "
     "number), got 'bad "
     "key' (from --api-key)"},
    {"--api-key", "k:0", "api_key",
     "config: api_key: expected KEY[:TENANT] (KEY of URL-safe characters, TENANT a non-zero "
     "number), got 'k:0' "
     "(from --api-key)"},
    {"--api-key", "k:0x", "api_key",
     "config: api_key: expected KEY[:TENANT] (KEY of URL-safe characters, TENANT a non-zero "
     "number), got 'k:0x' "
     "(from --api-key)"},
    {"--api-key", "k:1,k:2", "api_key",
     "config: api_key: key 'k' is listed twice (from --api-key)"},
    {"--api-key", "a,,b", "api_key",
     "config: api_key: expected KEY[:TENANT], got an empty entry in 'a,,b' (from --api-key)"},
    {"--service-token", "admin:short", "service_token",
     "config: service_token: token for 'admin' must be 16 to 255 URL-safe characters (value not "
     "shown) (from "
     "--service-token)"},
    {"--service-token", "0123456789abcdef0123", "service_token",
     "config: service_token: expected SERVICE:TOKEN with SERVICE of URL-safe characters (value not "
     "shown) (from "
     "--service-token)"},
    {"--service-token", "a:0123456789abcdef0123,a:0123456789abcdef0124", "service_token",
     "config: service_token: service 'a' or its token is listed twice (from --service-token)"},
    {"--token-lifetime", "59s", "token_lifetime",
     "config: token_lifetime: expected a duration from 1m to 365d (a number with ms, s, m, h or "
     "d), got '59s' "
     "(from --token-lifetime)"},
    {"--login-min-length", "0", "login_min_length",
     "config: login_min_length: expected an integer from 1 to 64, got '0' (from "
     "--login-min-length)"},
    {"--password-min-length", "129", "password_min_length",
     "config: password_min_length: expected an integer from 1 to 128, got '129' (from "
     "--password-min-length)"},
    {"--send-rate", "0", "send_rate",
     "config: send_rate: expected an integer from 1 to 1000000, got '0' (from --send-rate)"},
    {"--send-burst", "", "send_burst",
     "config: send_burst: expected an integer from 1 to 1000000, got '' (from --send-burst)"},
    {"--login-rate", "1e3", "login_rate",
     "config: login_rate: expected an integer from 1 to 1000000, got '1e3' (from --login-rate)"},
    {"--login-burst", "1000001", "login_burst",
     "config: login_burst: expected an integer from 1 to 1000000, got '1000001' (from "
     "--login-burst)"},
    {"--log-level", "verbose", "log_level",
     "config: log_level: expected one of debug, info, warn, error, got 'verbose' (from "
     "--log-level)"},
    {"--clock-tolerance", "61s", "clock_tolerance",
     "config: clock_tolerance: expected a duration from 0ms to 1m (a number with ms, s, m, h or "
     "d), got '61s' "
     "(from --clock-tolerance)"},
};

static void test_every_bad_value_is_an_error_naming_key_and_source(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof bad_cases / sizeof bad_cases[0]; i++) {
    char *argv[] = {(char *)bad_cases[i].flag, (char *)bad_cases[i].value};
    load_fails(2, argv, no_env, bad_cases[i].key, bad_cases[i].message);
  }
}

static void test_too_many_api_keys_is_an_error(void **state) {
  (void)state;
  char list[QIM_CONFIG_MAX_API_KEYS * 8 + 16] = "";
  for (int i = 0; i <= QIM_CONFIG_MAX_API_KEYS; i++)
    snprintf(list + strlen(list), sizeof list - strlen(list), "%sk%d", i ? "," : "", i);
  char *argv[] = {"--api-key", list};
  load_fails(2, argv, no_env, "api_key",
             "config: api_key: at most 32 keys are allowed (from --api-key)");
}

static void test_inline_threshold_above_message_size_is_an_error(void **state) {
  (void)state;
  char *env[] = {"QIM_INLINE_BODY_THRESHOLD=200000", NULL};
  load_fails(
      0, NULL, env, "inline_body_threshold",
      "config: inline_body_threshold: must not exceed max_message_size (131072), got 200000 (from "
      "QIM_INLINE_BODY_THRESHOLD)");
  char *flags[] = {"--max-message-size", "256k"};
  qim_config c;
  load_ok(&c, NARGS(flags), flags, env);
  assert_int_equal(c.inline_body_threshold, 200000);
}

static void test_too_long_data_dir_for_derived_store_is_an_error(void **state) {
  (void)state;
  char data[QIM_CONFIG_PATH_CAP - 4];
  memset(data, 'd', sizeof data - 1);
  data[sizeof data - 1] = '\0';
  char *argv[] = {"--data", data};
  load_fails(2, argv, no_env, "data",
             "config: data: too long to derive the store path <data>/qim.db (from --data)");
}

/* ---- lookups and printing ------------------------------------------------------------- */

static void test_api_key_selects_its_tenant(void **state) {
  (void)state;
  char *argv[] = {"--api-key", "alpha:5,beta"};
  qim_config c;
  qim_tenant_id t;
  load_ok(&c, 2, argv, no_env);
  assert_int_equal(qim_config_tenant_for_api_key(&c, "alpha", 5, &t), 0);
  assert_int_equal(t.v.lo, 5);
  assert_int_equal(qim_config_tenant_for_api_key(&c, "betaX", 4, &t), 0); /* length-bounded */
  assert_int_equal(t.v.lo, 1);
  assert_int_equal(qim_config_tenant_for_api_key(&c, "alph", 4, &t), -ENOENT);
  assert_int_equal(qim_config_tenant_for_api_key(&c, QIM_CONFIG_DEMO_API_KEY, 32, &t), -ENOENT);
}

static void test_service_token_names_its_service(void **state) {
  (void)state;
  char *argv[] = {"--service-token", "ops:0123456789abcdef,billing:fedcba9876543210"};
  qim_config c;
  const char *svc = NULL;
  load_ok(&c, 2, argv, no_env);
  assert_int_equal(qim_config_service_for_token(&c, "fedcba9876543210", 16, &svc), 0);
  assert_string_equal(svc, "billing");
  assert_int_equal(qim_config_service_for_token(&c, "fedcba987654321", 15, &svc), -ENOENT);
  assert_int_equal(qim_config_service_for_token(&c, "0123456789abcdeX", 16, &svc), -ENOENT);
}

static void test_written_config_reads_back_identically(void **state) {
  (void)state;
  char *dir = qim_test_tmpdir("config");
  char *argv[] = {"--listen",
                  "[::1]:7001",
                  "--data",
                  "/d",
                  "--store",
                  "redis://r:1/3",
                  "--api-key",
                  "x:0x100000000000000000000000000000ff,y:7",
                  "--msg-delete-age",
                  "90m",
                  "--tenant-retention",
                  "7:12h,0x100000000000000000000000000000ff:30d",
                  "--log-level",
                  "warn",
                  "--clock-tolerance",
                  "250ms",
                  "--io-threads",
                  "3"};
  qim_config c, d;
  load_ok(&c, NARGS(argv), argv, no_env);
  char *path = NULL;
  assert_true(asprintf(&path, "%s/dump.conf", dir) > 0);
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  qim_config_write(&c, f);
  fclose(f);
  char *again[] = {"--config", path};
  load_ok(&d, 2, again, no_env);
  memset(d.config_file, 0, sizeof d.config_file);
  assert_memory_equal(&c, &d, sizeof c);
  free(path), qim_test_rmtree(dir);
}

static void test_tenant_retention_gives_each_tenant_its_age(void **state) {
  (void)state;
  char *argv[] = {"--tenant-retention", "7:12h, 9:30d"};
  qim_config c;
  load_ok(&c, 2, argv, no_env);
  assert_int_equal(c.tenant_retention_count, 2);
  assert_int_equal(c.tenant_retentions[0].tenant.v.lo, 7);
  assert_int_equal(c.tenant_retentions[0].age_ms, 12ull * 3600 * 1000);
  assert_int_equal(c.tenant_retentions[1].tenant.v.lo, 9);
  assert_int_equal(c.tenant_retentions[1].age_ms, 30ull * 86400 * 1000);
  qim_config d;
  load_ok(&d, 0, NULL, no_env);
  assert_int_equal(d.tenant_retention_count, 0); /* none by default: TenantCustom is kept */
}

static void test_written_config_hides_service_tokens(void **state) {
  (void)state;
  char *argv[] = {"--service-token", "ops:0123456789abcdefSECRET"};
  qim_config c;
  load_ok(&c, 2, argv, no_env);
  char buf[8192] = "";
  FILE *f = fmemopen(buf, sizeof buf - 1, "w");
  qim_config_write(&c, f);
  fclose(f);
  assert_null(strstr(buf, "SECRET"));
  assert_non_null(strstr(buf, "# service_token = ops:(token not shown)\n"));
}

static void test_mailbox_retention_flags_set_count_and_interval(void **state) {
  (void)state;
  char *argv[] = {"--mailbox-retain-count", "4", "--mailbox-retention-interval", "1h"};
  qim_config c;
  load_ok(&c, 4, argv, no_env);
  assert_int_equal(c.mailbox_retain_count, 4);
  assert_int_equal(c.mailbox_retention_interval_ms, 3600000);
}

static void test_help_lists_every_documented_flag(void **state) {
  (void)state;
  char buf[16384] = "";
  FILE *f = fmemopen(buf, sizeof buf - 1, "w");
  qim_config_write_help(f);
  fclose(f);
  const char *want[] = {"--listen HOST:PORT", "--data DIR",           "--config FILE",
                        "--store URL",        "--node-id N",          "QIM_LISTEN",
                        "QIM_DATA",           "sqlite:<data>/qim.db", "redis://",
                        "--clock-tolerance"};
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
    if (!strstr(buf, want[i])) fail_msg("help lacks '%s'", want[i]);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_defaults_match_documented_values),
      cmocka_unit_test(test_load_without_sources_gives_defaults),
      cmocka_unit_test(test_flag_beats_env_beats_file_beats_default),
      cmocka_unit_test(test_config_flag_beats_config_env),
      cmocka_unit_test(test_store_defaults_to_final_data_dir),
      cmocka_unit_test(test_explicit_store_from_file_beats_derived_store),
      cmocka_unit_test(test_list_from_higher_source_replaces_lower_list),
      cmocka_unit_test(test_file_allows_comments_blanks_and_spacing),
      cmocka_unit_test(test_ipv6_listen_address_is_accepted_in_brackets),
      cmocka_unit_test(test_file_unknown_key_is_an_error),
      cmocka_unit_test(test_file_line_without_equals_is_an_error),
      cmocka_unit_test(test_file_scalar_set_twice_is_an_error),
      cmocka_unit_test(test_file_bad_value_names_file_and_line),
      cmocka_unit_test(test_file_overlong_line_is_an_error),
      cmocka_unit_test(test_missing_file_is_an_error),
      cmocka_unit_test(test_empty_config_path_is_an_error),
      cmocka_unit_test(test_unknown_flag_is_an_error),
      cmocka_unit_test(test_positional_argument_is_an_error),
      cmocka_unit_test(test_flag_without_value_is_an_error),
      cmocka_unit_test(test_flag_given_twice_is_an_error),
      cmocka_unit_test(test_bad_env_value_names_the_variable),
      cmocka_unit_test(test_unrelated_qim_env_is_ignored),
      cmocka_unit_test(test_every_bad_value_is_an_error_naming_key_and_source),
      cmocka_unit_test(test_too_many_api_keys_is_an_error),
      cmocka_unit_test(test_inline_threshold_above_message_size_is_an_error),
      cmocka_unit_test(test_too_long_data_dir_for_derived_store_is_an_error),
      cmocka_unit_test(test_api_key_selects_its_tenant),
      cmocka_unit_test(test_service_token_names_its_service),
      cmocka_unit_test(test_tenant_retention_gives_each_tenant_its_age),
      cmocka_unit_test(test_written_config_reads_back_identically),
      cmocka_unit_test(test_written_config_hides_service_tokens),
      cmocka_unit_test(test_mailbox_retention_flags_set_count_and_interval),
      cmocka_unit_test(test_help_lists_every_documented_flag),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
