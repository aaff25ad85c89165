/*
 * store.c — the backend-independent part of the storage interface (store.h): opening a
 * backend by URL, counters, the blocking wrapper behind QIM_STORE_SYNC and the free
 * functions of the store's own records.
 *
 * The blocking wrapper gives each thread one private blocking completion queue, made on
 * first use and freed when the thread exits; a synchronous call points the request at
 * it and waits there until the request's own completion has run. Only one synchronous
 * call is in flight per thread, so nothing else is ever posted to that queue.
 */
#include "store/store.h"

#include <errno.h>
#include <pthread.h>
#include <string.h>

#include "qim/mem.h"
#include "qim/record.h"

int qim__sqlite_open(const char *location, const qim_store_options *opt, qim_store **out);

int qim_store_open(const char *url, const qim_store_options *opt, qim_store **out) {
  static const char sqlite_scheme[] = "sqlite:";
  if (!url || !opt || !out) return -EINVAL;
  if (strncmp(url, sqlite_scheme, sizeof sqlite_scheme - 1) == 0)
    return qim__sqlite_open(url + sizeof sqlite_scheme - 1, opt, out);
  return -EINVAL;
}

void qim_store_get_stats(qim_store *s, qim_store_stats *out) {
  memset(out, 0, sizeof *out);
  if (s && s->vt->stats) s->vt->stats(s, out);
}

/* ---- the blocking wrapper --------------------------------------------------------------- */

static pthread_key_t sync_key;
static pthread_once_t sync_once = PTHREAD_ONCE_INIT;
static _Thread_local qim_cq *sync_cq;

static void sync_cq_destroy(void *cq) {
  qim_cq_free(cq);
}
static void sync_key_make(void) {
  pthread_key_create(&sync_key, sync_cq_destroy);
}

static qim_cq *thread_cq(void) {
  if (sync_cq) return sync_cq;
  pthread_once(&sync_once, sync_key_make);
  if (qim_cq_new_blocking(&sync_cq) != 0) return NULL;
  pthread_setspecific(sync_key, sync_cq); /* freed by the key's destructor at thread exit */
  return sync_cq;
}

/* A non-NULL marker: the request completed. */
static char sync_done_marker;

static void sync_done(qim_store_req *r) {
  r->sync_ = &sync_done_marker;
}

int qim__store_sync_prepare(qim_store_req *r) {
  r->cq = thread_cq(); /* NULL makes the submission fail with -EINVAL */
  r->done = sync_done;
  r->sync_ = NULL;
  return r->cq ? 0 : -ENOMEM;
}

int qim__store_sync_finish(int submit_rc, qim_store_req *r) {
  if (submit_rc != 0) return submit_rc;
  while (r->sync_ != &sync_done_marker) qim_cq_wait(r->cq, -1);
  return r->status;
}

/* ---- free functions ------------------------------------------------------------------------ */

void qim_store_user_free(qim_store_user *u) {
  if (!u) return;
  qim_free(u->public_json);
  qim_free(u->private_json);
  u->public_json = u->private_json = NULL;
}

void qim_store_credential_free(qim_store_credential *c) {
  if (!c) return;
  qim_free(c->login);
  qim_free(c->secret_hash);
  c->login = c->secret_hash = NULL;
}

void qim_store_conversation_free(qim_store_conversation *c) {
  if (!c) return;
  qim_free(c->public_json);
  c->public_json = NULL;
}

void qim_store_member_free(qim_store_member *m) {
  if (!m) return;
  qim_free(m->private_json);
  m->private_json = NULL;
}

void qim_store_log_record_free(qim_store_log_record *r) {
  if (!r) return;
  qim_bytes_free(&r->payload);
}

void qim_store_log_read_free(qim_store_log_read_req *r) {
  for (size_t i = 0; i < r->out_count; i++) qim_store_log_record_free(&r->out_records[i]);
  qim_free(r->out_records);
  r->out_records = NULL;
  r->out_count = 0;
}
