/*
 * qim-seed — creates many accounts straight in a store, for tests and benchmarks that need
 * hundreds of users without paying a real argon2id hash per account (~75 ms each through
 * {acc}). Every account gets the same password, hashed ONCE with libsodium's minimum
 * argon2id cost: logins still verify it the normal way (the cost travels in the hash
 * string), they are just cheap. Never use this on a store real users log into.
 *
 *   qim-seed --data DIR --count N --prefix P --password PW [--tenant T] [--first I] [--group 1]
 *
 * DIR is qimd's data directory (its default sqlite store; start qimd with the same shard
 * settings, the defaults). Prints one "login uid" line per account on stdout. A login that
 * exists already is skipped (its line is not printed). With --group 1, also makes a group
 * owned by the first new account with every other one as a Member (one membership change,
 * as the store would apply an admin's bulk add; no Control message announces it) and
 * prints "group grp…" last.
 */
#include <errno.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "group/group_rules.h"
#include "qim/config.h"
#include "qim/ids.h"
#include "qim/mem.h"
#include "store/store.h"

typedef struct seed_opts {
  const char *data, *prefix, *password;
  unsigned long count, first, tenant, group;
} seed_opts;

static int usage(void) {
  fprintf(
      stderr,
      "usage: qim-seed --data DIR --count N --prefix P --password PW [--tenant T] [--first I]\n");
  return 2;
}

static int parse(int argc, char **argv, seed_opts *o) {
  *o = (seed_opts){.tenant = 1};
  for (int i = 1; i + 1 < argc; i += 2) {
    const char *k = argv[i], *v = argv[i + 1];
    if (strcmp(k, "--data") == 0)
      o->data = v;
    else if (strcmp(k, "--prefix") == 0)
      o->prefix = v;
    else if (strcmp(k, "--password") == 0)
      o->password = v;
    else if (strcmp(k, "--count") == 0)
      o->count = strtoul(v, NULL, 10);
    else if (strcmp(k, "--first") == 0)
      o->first = strtoul(v, NULL, 10);
    else if (strcmp(k, "--tenant") == 0)
      o->tenant = strtoul(v, NULL, 10);
    else if (strcmp(k, "--group") == 0)
      o->group = strtoul(v, NULL, 10);
    else
      return -EINVAL;
  }
  if (argc % 2 == 0 || !o->data || !o->prefix || !o->password || !o->count || !o->tenant)
    return -EINVAL;
  return 0;
}

/* The store qimd would open for this data directory (its defaults otherwise). */
static int open_store(const char *data, qim_store **st) {
  char *args[] = {"--data", (char *)data, NULL};
  char *env[] = {NULL};
  qim_config c;
  qim_config_error e;
  int rc = qim_config_load(&c, 2, args, env, &e);
  if (rc) {
    fprintf(stderr, "%s\n", e.message);
    return rc;
  }
  if (mkdir(data, 0700) != 0 && errno != EEXIST) return -errno; /* as qimd makes it */
  qim_store_options so = {
      .shards = {.shard_count = c.shard_count, .lanes_per_shard = c.lanes_per_shard}};
  return qim_store_open(c.store_url, &so, st);
}

static int create(qim_store *st, qim_tenant_id t, const char *login, const char *hash,
                  qim_user_id *u) {
  u->v = qim_u128_random();
  qim_store_cred_create_req cr = {
      .cred = {.tenant_id = t, .login = (char *)login, .user_id = *u, .secret_hash = (char *)hash}};
  int rc = QIM_STORE_SYNC(st, accounts.cred_create, &cr);
  if (rc) return rc;
  char pub[160];
  snprintf(pub, sizeof pub, "{\"fn\":\"%s\"}", login);
  qim_store_user_create_req ur = {.user = {.tenant_id = t, .user_id = *u, .public_json = pub}};
  return QIM_STORE_SYNC(st, accounts.user_create, &ur);
}

/* A group owned by users[0] with users[1..n) as Members, in two store calls. */
static int make_group(qim_store *st, qim_tenant_id t, const qim_user_id *users, size_t n,
                      char *name, size_t cap) {
  qim_group_id gid = {qim_u128_random()};
  qim_conversation_id conv = qim_group_conversation(gid);
  uint32_t member = qim_group_role_mode(QIM_GROUP_ROLE_MEMBER);
  qim_store_conv_create_req cr = {.conv = {.tenant_id = t,
                                           .conversation_id = conv,
                                           .kind = QIM_CONVERSATION_GROUP,
                                           .owner_id = users[0],
                                           .public_json = "{\"fn\":\"seeded group\"}",
                                           .default_mode_auth = member}};
  int rc = QIM_STORE_SYNC(st, conversations.create, &cr);
  if (rc || n < 2) return rc;
  qim_store_member_change *ch = qim_calloc(n - 1, sizeof *ch);
  for (size_t i = 1; i < n; i++)
    ch[i - 1] = (qim_store_member_change){.op = QIM_STORE_MEMBER_ADD,
                                          .user_id = users[i],
                                          .role = QIM_GROUP_ROLE_MEMBER,
                                          .mode_want = member,
                                          .mode_given = member};
  qim_store_members_change_req mr = {
      .tenant_id = t, .conversation_id = conv, .changes = ch, .change_count = n - 1};
  rc = QIM_STORE_SYNC(st, conversations.members_change, &mr);
  qim_free(ch);
  qim_group_id_format(gid, name, cap);
  return rc;
}

int main(int argc, char **argv) {
  seed_opts o;
  if (parse(argc, argv, &o) || sodium_init() < 0) return usage();
  char hash[crypto_pwhash_STRBYTES];
  if (crypto_pwhash_str(hash, o.password, strlen(o.password), crypto_pwhash_OPSLIMIT_MIN,
                        crypto_pwhash_MEMLIMIT_MIN))
    return 1;
  qim_store *st;
  int rc = open_store(o.data, &st);
  if (rc) {
    fprintf(stderr, "qim-seed: cannot open the store of %s (%d)\n", o.data, rc);
    return 1;
  }
  qim_tenant_id t = {{0, o.tenant}};
  unsigned long made = 0;
  qim_user_id *users = qim_calloc(o.count, sizeof *users);
  for (unsigned long i = o.first; i < o.first + o.count; i++) {
    char login[96], name[QIM_TOPIC_NAME_CAP];
    snprintf(login, sizeof login, "%s%06lu", o.prefix, i);
    qim_user_id u;
    rc = create(st, t, login, hash, &u);
    if (rc == -EEXIST) continue;
    if (rc) {
      fprintf(stderr, "qim-seed: %s: error %d\n", login, rc);
      break;
    }
    qim_user_id_format(u, name, sizeof name);
    printf("%s %s\n", login, name);
    users[made++] = u;
  }
  if (rc == 0 && o.group) {
    char gname[QIM_TOPIC_NAME_CAP];
    rc = make_group(st, t, users, made, gname, sizeof gname);
    if (rc == 0)
      printf("group %s\n", gname);
    else
      fprintf(stderr, "qim-seed: group: error %d\n", rc);
  }
  qim_free(users);
  qim_store_close(st);
  fprintf(stderr, "qim-seed: %lu accounts\n", made);
  return rc && rc != -EEXIST ? 1 : 0;
}
