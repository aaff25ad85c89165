/*
 * history.c — the history object's lifecycle and configuration, and the one check every
 * operation starts with: how the calling user stands in the conversation (its member
 * row, effective mode and visible window).
 */
#include <errno.h>
#include <string.h>

#include "history/history_int.h"
#include "qim/cq.h"
#include "qim/err.h"
#include "qim/ids.h"
#include "qim/log.h"
#include "qim/mem.h"
#include "qim/record.h"

#define DAY_MS (24ull * 3600 * 1000)

void qim_history_config_default(qim_history_config *cfg) {
  *cfg = (qim_history_config){
      .msg_delete_age_ms = 600 * 1000,
      .max_message_size = 128 * 1024,
      .max_mentions = 64,
      .get_default_limit = 32,
      .get_max_limit = 256,
      .max_ranges = 256,
      .del_max_messages = 1024,
      .page_default_items = 50,
      .page_max_items = 1000,
      .page_max_bytes = 4u << 20,
      .del_max_ranges_out = 1024,
      .ephemeral_age_ms = DAY_MS,
      .sweep_interval_ms = 60 * 1000,
      .sweep_batch = 1000,
      .control_attempts = 3,
  };
}

static size_t tenant_add(qim_tenant_id *buf, size_t n, size_t cap, qim_tenant_id t) {
  for (size_t j = 0; j < n; j++)
    if (qim_u128_eq(buf[j].v, t.v)) return n;
  if (n < cap) buf[n++] = t;
  return n;
}

void qim_history_config_from(qim_history_config *cfg, const qim_config *c,
                             qim_tenant_id *tenant_buf, size_t tenant_cap) {
  cfg->msg_delete_age_ms = c->msg_delete_age_ms;
  cfg->max_message_size = c->max_message_size;
  size_t n = 0;
  for (uint32_t i = 0; i < c->api_key_count; i++)
    n = tenant_add(tenant_buf, n, tenant_cap, c->api_keys[i].tenant);
  for (uint32_t i = 0; i < c->tenant_retention_count; i++)
    n = tenant_add(tenant_buf, n, tenant_cap, c->tenant_retentions[i].tenant);
  cfg->tenants = tenant_buf;
  cfg->tenant_count = n;
  cfg->tenant_ages = c->tenant_retentions;
  cfg->tenant_age_count = c->tenant_retention_count;
}

static bool config_valid(const qim_history_config *c) {
  return c->max_message_size && c->get_default_limit && c->get_max_limit && c->max_ranges &&
         c->del_max_messages && c->page_default_items && c->page_max_items && c->page_max_bytes &&
         c->del_max_ranges_out && c->sweep_batch && c->control_attempts && c->ephemeral_age_ms &&
         (c->tenant_count == 0 || c->tenants) && (c->tenant_age_count == 0 || c->tenant_ages);
}

int qim_history_open(qim_store *store, qim_commit *commit, const qim_clock *clock,
                     const qim_history_config *cfg, qim_history **out) {
  qim_history_config def;
  if (!cfg) {
    qim_history_config_default(&def);
    cfg = &def;
  }
  if (!store || !commit || !clock || !out || !config_valid(cfg)) return -EINVAL;
  qim_history *h = qim_calloc(1, sizeof *h);
  h->store = store;
  h->commit = commit;
  h->clock = clock;
  h->cfg = *cfg;
  if (cfg->tenant_count)
    h->tenants = qim_memdup(cfg->tenants, cfg->tenant_count * sizeof *h->tenants);
  if (cfg->tenant_age_count)
    h->ages = qim_memdup(cfg->tenant_ages, cfg->tenant_age_count * sizeof *h->ages);
  h->cfg.tenants = h->tenants;
  h->cfg.tenant_ages = h->ages;
  pthread_mutex_init(&h->sweep_mu, NULL);
  qim_periodic_init(&h->task);
  *out = h;
  return 0;
}

void qim_history_close(qim_history *h) {
  if (!h) return;
  qim_periodic_destroy(&h->task);
  pthread_mutex_destroy(&h->sweep_mu);
  qim_free(h->marks);
  qim_free(h->tenants);
  qim_free(h->ages);
  qim_free(h);
}

/* ---- shared helpers ------------------------------------------------------------------- */

int qim__history_store_error(int rc) {
  if (rc >= 0) return rc;
  if (rc == -EAGAIN) return QIM_AGAIN;
  if (qim_err_is_domain(rc)) return rc; /* raised where it was made */
  return qim_err_raise(QIM_E_MESSAGE_STORE_UNAVAILABLE);
}

void qim__records_free(qim_message_record *r, size_t n) {
  for (size_t i = 0; i < n; i++) qim_message_record_free(&r[i]);
  qim_free(r);
}

void qim__view_free(qim__view *v) {
  qim_store_conversation_free(&v->conv);
  qim_store_member_free(&v->member);
  memset(v, 0, sizeof *v);
}

typedef struct view_wait {
  int done;
} view_wait;

static void view_done(qim_store_req *r) {
  ((view_wait *)r->data)->done++;
}

/* Submits one request to `cq`; a refused submission completes it at once with that status. */
static void view_submit(qim_store_req *r, int rc, view_wait *w) {
  if (rc) {
    r->status = rc;
    w->done++;
  }
}

/* A conversation or member row that does not exist reads as "not for you": the caller
 * learns nothing about conversations it is not in. Both rows are read at once (two
 * reader threads) together with `also` when given, so a check costs one store round
 * trip, not two or three. */
static int view_load(qim_history *h, const qim_authenticated_actor *actor, qim_conversation_id conv,
                     qim_store_record_query_req *also, qim__view *v) {
  qim_cq *cq;
  int rc = qim_cq_new_blocking(&cq);
  if (rc) return rc;
  view_wait w = {0};
  qim_store_conv_get_req cg = {.req = {.cq = cq, .done = view_done, .data = &w},
                               .tenant_id = actor->tenant_id,
                               .conversation_id = conv};
  qim_store_member_get_req mg = {.req = {.cq = cq, .done = view_done, .data = &w},
                                 .tenant_id = actor->tenant_id,
                                 .conversation_id = conv,
                                 .user_id = actor->user_id};
  view_submit(&cg.req, h->store->vt->conversations.get(h->store, &cg), &w);
  view_submit(&mg.req, h->store->vt->conversations.member_get(h->store, &mg), &w);
  if (also) {
    also->req = (qim_store_req){.cq = cq, .done = view_done, .data = &w};
    view_submit(&also->req, h->store->vt->history.query(h->store, also), &w);
  }
  while (w.done < (also ? 3 : 2)) qim_cq_wait(cq, 1000);
  qim_cq_free(cq);
  if (cg.req.status == 0) v->conv = cg.out;
  if (mg.req.status == 0) v->member = mg.out;
  rc = cg.req.status ? cg.req.status : mg.req.status;
  if (rc == -ENOENT) return qim_err_raise(QIM_E_MESSAGE_STORE_HISTORY_ACCESS_DENIED);
  return qim__history_store_error(rc);
}

int qim__history_view_and(qim_history *h, const qim_authenticated_actor *actor,
                          qim_conversation_id conv, int need, qim_store_record_query_req *also,
                          qim__view *v) {
  memset(v, 0, sizeof *v);
  int rc = view_load(h, actor, conv, also, v);
  if (rc) {
    qim__view_free(v);
    return rc;
  }
  const qim_store_member *m = &v->member;
  v->mode = m->mode_want & m->mode_given;
  v->current = !m->has_left_at && !m->banned;
  v->low = m->joined_at;
  v->high = m->has_left_at && m->left_at < v->conv.latest_seq ? m->left_at : v->conv.latest_seq;
  bool ok = !v->conv.deleted && !m->banned && (v->mode & QIM_MODE_R) &&
            (v->current || need != QIM__NEED_CURRENT);
  if (!ok) {
    qim__view_free(v);
    return qim_err_raise(QIM_E_MESSAGE_STORE_HISTORY_ACCESS_DENIED);
  }
  return 0;
}

int qim__history_view(qim_history *h, const qim_authenticated_actor *actor,
                      qim_conversation_id conv, int need, qim__view *v) {
  return qim__history_view_and(h, actor, conv, need, NULL, v);
}

uint32_t qim_history_unread(const qim_store_conversation *c, const qim_store_member *m) {
  qim_conversation_seq top =
      m->has_left_at && m->left_at < c->latest_seq ? m->left_at : c->latest_seq;
  uint64_t n = top > m->read_seq ? top - m->read_seq : 0;
  return n > UINT32_MAX ? UINT32_MAX : (uint32_t)n;
}
