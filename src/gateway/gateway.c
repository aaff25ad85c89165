/*
 * gateway.c — the gateway's lifecycle: the transport (qim_net) with our handler, one
 * gw_loop per I/O loop (its completion queue, session indexes, push sink), start and a
 * graceful stop.
 *
 * Stopping in order: the push sinks go first (no mailbox worker posts afterwards), then
 * qim_net_stop closes every connection; a loop's completion queue is freed only when the
 * last operation that will complete on it (a commit, a store call, a worker job) is done,
 * so nothing ever posts to freed memory.
 */
#include <errno.h>
#include <string.h>

#include "gateway/gateway_int.h"
#include "qim/log.h"
#include "qim/mem.h"

void qim_gateway_options_default(qim_gateway_options *o) {
  memset(o, 0, sizeof *o);
  o->idle_timeout_ms = 55000;
  o->ping_interval_ms = 49500;
  o->queue_max = 32;
  o->attach_max = 1024;
  o->me_list_max = 1024;
  o->member_list_max = 256;
}

int qim_gateway_new(const qim_gateway_deps *deps, const qim_gateway_options *opt, qim_gateway **out) {
  *out = NULL;
  if (!deps || !deps->cfg || !deps->store || !deps->commit || !deps->groups || !deps->history ||
      !deps->mailbox || !deps->clock || qim_shard_config_validate(&deps->shards))
    return -EINVAL;
  qim_gateway *g = qim_calloc(1, sizeof *g);
  g->d = *deps;
  if (opt)
    g->o = *opt;
  else
    qim_gateway_options_default(&g->o);
  if (!g->o.queue_max || !g->o.attach_max || !g->o.me_list_max || !g->o.member_list_max) {
    qim_free(g);
    return -EINVAL;
  }
  g->pres = qim__gw_presence_new();
  *out = g;
  return 0;
}

/* ---- loops ------------------------------------------------------------------------------------ */

static void loop_start(qim_net *net, unsigned i, uv_loop_t *uv, void *ud) {
  (void)net;
  qim_gateway *g = ud;
  gw_loop *l = &g->loops[i];
  l->uv = uv;
  if (qim_cq_new_loop(uv, &l->cq) != 0) abort(); /* a handle per loop: only fails on OOM */
  qim__gw_index_init(&l->by_user);
  qim__gw_index_init(&l->by_conv);
  pthread_mutex_lock(&l->post_mu);
  l->accepting = true;
  pthread_mutex_unlock(&l->post_mu);
  qim__gw_presence_loop_start(l);
  int rc = qim_mailbox_push_register(g->d.mailbox, l->cs, qim__gw_push_sink, l);
  if (rc) QIM_LOGE(NULL, "gateway.push_register_failed", "loop=%u cs=%u err=%d", i, l->cs, rc);
}

static void free_cq_if_idle(gw_loop *l) {
  if (!l->stopping || l->pending || !l->cq) return;
  qim_cq_free(l->cq);
  l->cq = NULL;
}

static void loop_stop(qim_net *net, unsigned i, uv_loop_t *uv, void *ud) {
  (void)net;
  (void)uv;
  qim_gateway *g = ud;
  gw_loop *l = &g->loops[i];
  pthread_mutex_lock(&l->post_mu);
  l->accepting = false;
  pthread_mutex_unlock(&l->post_mu);
  l->stopping = true;
  qim__gw_presence_loop_stop(l);
  qim__gw_push_drop(l);
  free_cq_if_idle(l);
}

void qim__gw_loop_hold(gw_loop *l) { l->pending++; }

void qim__gw_loop_release(gw_loop *l) {
  l->pending--;
  free_cq_if_idle(l);
}

bool qim__gw_loop_post(gw_loop *l, qim_cq_item *it, unsigned limit) {
  pthread_mutex_lock(&l->post_mu);
  bool ok = l->accepting && (limit == 0 || l->posted < limit);
  if (ok) {
    l->posted++;
    qim_cq_post(l->cq, it);
  }
  pthread_mutex_unlock(&l->post_mu);
  return ok;
}

void qim__gw_loop_posted_done(gw_loop *l) {
  pthread_mutex_lock(&l->post_mu);
  l->posted--;
  pthread_mutex_unlock(&l->post_mu);
}

/* ---- start and stop ------------------------------------------------------------------------------ */

static int check_apikey(void *ud, const char *key, qim_tenant_id *tenant) {
  qim_gateway *g = ud;
  if (!key) return -ENOENT;
  return qim_config_tenant_for_api_key(g->d.cfg, key, strlen(key), tenant);
}

static void net_config(const qim_gateway *g, qim_net_config *nc) {
  const qim_config *c = g->d.cfg;
  qim_net_config_default(nc);
  nc->host = c->listen_host;
  nc->port = g->o.ephemeral_port ? 0 : g->o.port_override ? g->o.port_override : c->listen_port;
  nc->threads = c->io_threads;
  nc->idle_timeout = g->o.idle_timeout_ms;
  nc->ping_interval = g->o.ping_interval_ms;
  nc->handshake_timeout = (uint32_t)c->handshake_timeout_ms;
  nc->max_conns_per_ip = c->conns_per_ip;
  /* Room for the envelope and JSON escaping above max_message_size: an oversized {pub}
   * gets {ctrl 413}; only a frame beyond this closes with 1009 (DESIGN.md §6). */
  nc->max_message = (size_t)c->max_message_size * 4 + 65536;
}

int qim_gateway_start(qim_gateway *g) {
  if (g->started) return -EALREADY;
  qim_net_config nc;
  net_config(g, &nc);
  qim__gw_dummy_hash(g);
  g->nloops = nc.threads ? nc.threads : 1;
  g->loops = qim_calloc(g->nloops, sizeof *g->loops);
  for (unsigned i = 0; i < g->nloops; i++) {
    gw_loop *l = &g->loops[i];
    l->gw = g;
    l->index = i;
    l->cs = (g->d.cfg->node_id << 8) | i; /* unique per running node and loop */
    pthread_mutex_init(&l->post_mu, NULL);
    l->rate = qim_calloc(GW_RATE_SLOTS, sizeof *l->rate);
  }
  qim_net_handler h = {.ud = g,
                       .check_apikey = check_apikey,
                       .on_open = qim__gw_on_open,
                       .on_message = qim__gw_on_message,
                       .on_close = qim__gw_on_close,
                       .on_loop_start = loop_start,
                       .on_loop_stop = loop_stop};
  int rc = qim_net_new(&nc, &h, &g->net);
  if (rc == 0) rc = qim__gw_admin_routes(g);
  if (rc == 0) rc = qim_net_start(g->net);
  if (rc) {
    qim_net_free(g->net);
    g->net = NULL;
    for (unsigned i = 0; i < g->nloops; i++) {
      pthread_mutex_destroy(&g->loops[i].post_mu);
      qim_free(g->loops[i].rate);
      qim_free(g->loops[i].kinds);
    }
    qim_free(g->loops);
    g->loops = NULL;
    return rc;
  }
  g->started = true;
  return 0;
}

uint16_t qim_gateway_port(const qim_gateway *g) { return g->net ? qim_net_port(g->net) : 0; }

void qim_gateway_stop(qim_gateway *g) {
  if (!g || !g->started || g->stopped) return;
  g->stopped = true;
  for (unsigned i = 0; i < g->nloops; i++) qim_mailbox_push_unregister(g->d.mailbox, g->loops[i].cs);
  qim_net_stop(g->net);
  for (unsigned i = 0; i < g->nloops; i++) {
    gw_loop *l = &g->loops[i];
    qim__gw_index_free(&l->by_user);
    qim__gw_index_free(&l->by_conv);
  }
}

void qim_gateway_free(qim_gateway *g) {
  if (!g) return;
  qim_gateway_stop(g);
  qim_net_free(g->net);
  if (g->loops)
    for (unsigned i = 0; i < g->nloops; i++) {
      pthread_mutex_destroy(&g->loops[i].post_mu);
      qim_free(g->loops[i].rate);
      qim_free(g->loops[i].kinds);
    }
  qim_free(g->loops);
  qim__gw_presence_free(g->pres);
  qim_free(g);
}

void qim_gateway_stats_get(qim_gateway *g, qim_gateway_stats *out) {
  out->sessions = atomic_load(&g->st_sessions);
  out->authenticated = atomic_load(&g->st_auth);
  out->requests = atomic_load(&g->st_requests);
  out->errors = atomic_load(&g->st_errors);
  out->pushed_data = atomic_load(&g->st_data);
  out->pushed_pres = atomic_load(&g->st_pres);
  out->push_batches = atomic_load(&g->st_batches);
  out->events_dropped = atomic_load(&g->st_dropped);
  out->presence_sent = atomic_load(&g->st_pres_onoff);
  out->presence_deferred = atomic_load(&g->st_pres_deferred);
  out->fanout_capped = atomic_load(&g->st_capped);
  out->rate_limited = atomic_load(&g->st_rate_limited);
  out->typing_limited = atomic_load(&g->st_kp_limited);
}
