/*
 * qim-seed — creates many accounts straight in a store, for tests and benchmarks that need
 * hundreds of users without paying a real argon2id hash per account (~75 ms each through
 * {acc}). Every account gets the same password, hashed ONCE with libsodium's minimum
 * argon2id cost: logins still verify it the normal way (the cost travels in the hash
 * string), they are just cheap. Never use this on a store real users log into.
 *
 *   qim-seed --data DIR --count N --prefix P --password PW [--tenant T] [--first I] [--group 1]
 *            [--messages M]
 *
 * DIR is qimd's data directory (its default sqlite store; start qimd with the same shard
 * settings, the defaults). Prints one "login uid" line per account on stdout. A login that
 * exists already is skipped (its line is not printed). With --group 1, also makes a group
 * owned by the first new account with every other one as a Member (one membership change,
 * as the store would apply an admin's bulk add; no Control message announces it) and
 * prints "group grp…" last.
 *
 * With --messages M (needs --group 1 and a store holding none of these logins), the group
 * also gets M messages, seqs 1..M, sent round-robin by its members (history_rows.h: the
 * rows the commit path would have left, written in one transaction; about 10 s per
 * million), and each sender's read/recv receipts at its last message, as a {pub} leaves
 * them; prints "messages M" after the group line.
 */
#include <errno.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "group/group_rules.h"
#include "history_rows.h"
#include "qim/clock.h"
#include "qim/config.h"
#include "qim/ids.h"
#include "qim/mem.h"
#include "store/store.h"

typedef struct seed_opts {
  const char *data, *prefix, *password;
  unsigned long count, first, tenant, group, messages;
} seed_opts;

static int usage(void) {
  fprintf(stderr,
          "usage: qim-seed --data DIR --count N --prefix P --password PW [--tenant T] [--first I]\n"
          "                [--group 1 [--messages M]]\n");
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
    else if (strcmp(k, "--messages") == 0)
      o->messages = strtoul(v, NULL, 10);
    else
      return -EINVAL;
  }
  if (argc % 2 == 0 || !o->data || !o->prefix || !o->password || !o->count || !o->tenant)
    return -EINVAL;
  if (o->messages && (!o->group || o->messages >= 0x0FFFFFFF)) return -EINVAL;
  return 0;
}

/* The store qimd would open for this data directory (its defaults otherwise); its URL
 * into url[0..cap). */
static int open_store(const char *data, qim_store **st, char *url, size_t cap) {
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
  snprintf(url, cap, "%s", c.store_url);
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
                      qim_group_id *out, char *name, size_t cap) {
  qim_group_id gid = {qim_u128_random()};
  *out = gid;
  qim_group_id_format(gid, name, cap);
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
  return rc;
}

/* The last seq member i sent when seq s is sent by member s % n (0 when none). */
static uint64_t last_sent(uint64_t messages, size_t n, size_t i) {
  if (messages < i || (i == 0 && messages < n)) return 0;
  return messages - (messages - i) % n;
}

/* --messages: the history rows (the store closed meanwhile), then the senders' receipts. */
static int seed_messages(qim_store **st, const seed_opts *o, const char *url, qim_tenant_id t,
                         const qim_user_id *users, size_t n, qim_group_id gid) {
  if (strncmp(url, "sqlite:", 7) != 0) {
    fprintf(stderr, "qim-seed: --messages needs the sqlite store, not %s\n", url);
    return -EINVAL;
  }
  qim_authenticated_actor *senders = qim_calloc(n, sizeof *senders);
  for (size_t i = 0; i < n; i++) senders[i] = (qim_authenticated_actor){t, users[i], {{0, 1}}};
  qim_id_gen ids;
  int rc = qim_id_gen_init(&ids, qim_clock_system(), 1, 1000);
  qim_store_close(*st);
  *st = NULL;
  qim_seed_history h = {.db_path = url + 7,
                        .tenant_id = t,
                        .conversation_id = qim_group_conversation(gid),
                        .senders = senders,
                        .sender_count = n,
                        .from = 0,
                        .to = o->messages,
                        .ids = &ids};
  if (rc == 0) rc = qim_seed_history_append(&h);
  if (rc == 0) rc = open_store(o->data, st, (char[1024]){0}, 1024);
  for (size_t i = 0; rc == 0 && i < n; i++) {
    qim_store_member_receipt_req q = {.tenant_id = t,
                                      .conversation_id = h.conversation_id,
                                      .user_id = users[i],
                                      .read_seq = last_sent(o->messages, n, i),
                                      .recv_seq = last_sent(o->messages, n, i)};
    if (q.read_seq) rc = QIM_STORE_SYNC(*st, conversations.member_receipt, &q);
  }
  qim_id_gen_destroy(&ids);
  qim_free(senders);
  return rc;
}

int main(int argc, char **argv) {
  seed_opts o;
  if (parse(argc, argv, &o) || sodium_init() < 0) return usage();
  char hash[crypto_pwhash_STRBYTES], url[1024];
  if (crypto_pwhash_str(hash, o.password, strlen(o.password), crypto_pwhash_OPSLIMIT_MIN,
                        crypto_pwhash_MEMLIMIT_MIN))
    return 1;
  qim_store *st;
  int rc = open_store(o.data, &st, url, sizeof url);
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
    if (rc == -EEXIST && o.messages) {
      fprintf(stderr, "qim-seed: %s exists already: --messages seeds a fresh data directory only\n",
              login);
      break;
    }
    if (rc == -EEXIST) continue;
    if (rc) {
      fprintf(stderr, "qim-seed: %s: error %d\n", login, rc);
      break;
    }
    qim_user_id_format(u, name, sizeof name);
    printf("%s %s\n", login, name);
    users[made++] = u;
  }
  if (rc == 0 && o.group && made == 0) {
    fprintf(stderr, "qim-seed: no new account to own a group: none made\n");
    rc = -EEXIST;
  } else if (rc == 0 && o.group) {
    char gname[QIM_TOPIC_NAME_CAP];
    qim_group_id gid;
    rc = make_group(st, t, users, made, &gid, gname, sizeof gname);
    if (rc == 0)
      printf("group %s\n", gname);
    else
      fprintf(stderr, "qim-seed: group: error %d\n", rc);
    if (rc == 0 && o.messages) {
      fflush(stdout);
      rc = seed_messages(&st, &o, url, t, users, made, gid);
      if (rc == 0)
        printf("messages %lu\n", o.messages);
      else
        fprintf(stderr, "qim-seed: messages: error %d\n", rc);
    }
  }
  qim_free(users);
  if (st) qim_store_close(st);
  fprintf(stderr, "qim-seed: %lu accounts\n", made);
  return rc && (rc != -EEXIST || o.messages) ? 1 : 0;
}
