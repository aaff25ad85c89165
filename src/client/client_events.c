/*
 * client_events.c — the bounded queue that carries events from the runtime to the host,
 * and the backpressure it drives.
 *
 * The queue never grows past its capacity and never drops an event. When an event finds
 * it full, the runtime keeps it in a loop-owned `held` list and pauses: it stops reading
 * the socket and starts no reconnect, so the only events still made are the few the
 * frame in hand produces. The host's poll wakes the loop when it makes room; the held
 * events move over in order and reading resumes. If the host leaves the queue full for
 * export_deadline_ms, that is EventExportFailed: the runtime drops its connection (the
 * server should not buffer for a host that is not reading), marks the queue so the next
 * poll returns the error once, and reconnects when the host drains.
 */
#include <string.h>
#include <time.h>

#include "client/client_int.h"
#include "qim/clock.h"
#include "qim/err.h"
#include "qim/log.h"
#include "qim/mem.h"
#include "qim/record.h"

void qim__client_equeue_init(qim__client_equeue *q, size_t cap, uv_async_t *wake) {
  memset(q, 0, sizeof *q);
  q->ring = qim_calloc(cap, sizeof *q->ring);
  q->cap = cap;
  q->wake = wake;
  pthread_mutex_init(&q->mu, NULL);
  qim_cond_init_monotonic(&q->cv);
}

void qim__client_equeue_destroy(qim__client_equeue *q) {
  if (!q->ring) return;
  for (size_t i = 0; i < q->count; i++) qim_client_event_release(&q->ring[(q->head + i) % q->cap]);
  qim_free(q->ring);
  q->ring = NULL;
  pthread_cond_destroy(&q->cv);
  pthread_mutex_destroy(&q->mu);
}

/* Appends under the lock; false when full. */
static bool push(qim__client_equeue *q, qim_client_event *ev, bool hold_if_full) {
  pthread_mutex_lock(&q->mu);
  bool ok = q->count < q->cap;
  if (ok) {
    q->ring[(q->head + q->count++) % q->cap] = *ev;
    if (ev->kind == QIM_CLIENT_EVENT_CONNECTION_CHANGED) q->state = ev->connection_state;
    pthread_cond_signal(&q->cv);
  } else if (hold_if_full) {
    q->want_wake = true;
  }
  pthread_mutex_unlock(&q->mu);
  return ok;
}

static void export_timer_cb(uv_timer_t *t) {
  qim_client *c = t->data;
  if (!c->paused) return;
  int rc = qim_err_raise(QIM_E_HOST_EVENT_EXPORT_FAILED);
  qim_log(QIM_LOG_WARN, NULL, "client.export_stalled", "held=%zu error=%s", c->held_n,
          qim_err_name(rc));
  pthread_mutex_lock(&c->events.mu);
  c->events.export_failed = true;
  pthread_cond_signal(&c->events.cv);
  pthread_mutex_unlock(&c->events.mu);
  qim__client_conn_drop(c, true);
}

void qim__client_emit(qim_client *c, qim_client_event *ev) {
  if (c->held_n == 0 && push(&c->events, ev, true)) return;
  if (c->held_n == c->held_cap) {
    c->held_cap = c->held_cap ? 2 * c->held_cap : 8;
    c->held = qim_realloc(c->held, c->held_cap * sizeof *c->held);
  }
  c->held[c->held_n++] = *ev;
  if (!c->paused) {
    c->paused = true;
    qim__client_conn_pause(c, true);
    uv_timer_start(&c->export_timer, export_timer_cb, c->cfg.export_deadline_ms, 0);
  }
}

void qim__client_emit_state(qim_client *c, qim_connection_state st) {
  if (c->state == st) return;
  c->state = st;
  qim_client_event ev = {.kind = QIM_CLIENT_EVENT_CONNECTION_CHANGED, .connection_state = st};
  qim__client_emit(c, &ev);
}

void qim__client_emit_failed(qim_client *c, int code) {
  qim_client_event ev = {.kind = QIM_CLIENT_EVENT_FAILED, .failed = code};
  qim__client_emit(c, &ev);
}

void qim__client_events_drained(qim_client *c) {
  size_t moved = 0;
  while (moved < c->held_n && push(&c->events, &c->held[moved], true)) moved++;
  if (moved) {
    memmove(c->held, c->held + moved, (c->held_n - moved) * sizeof *c->held);
    c->held_n -= moved;
  }
  if (c->held_n || !c->paused) return;
  c->paused = false;
  uv_timer_stop(&c->export_timer);
  qim__client_conn_pause(c, false);
}

void qim__client_events_free_held(qim_client *c) {
  for (size_t i = 0; i < c->held_n; i++) qim_client_event_release(&c->held[i]);
  qim_free(c->held);
  c->held = NULL;
  c->held_n = c->held_cap = 0;
}

/* Waits on the queue's condition until `deadline` (CLOCK_MONOTONIC ms; 0 = for ever). */
static void wait_until(qim__client_equeue *q, uint64_t deadline) {
  if (!deadline) {
    pthread_cond_wait(&q->cv, &q->mu);
    return;
  }
  struct timespec ts = {.tv_sec = (time_t)(deadline / 1000),
                        .tv_nsec = (long)(deadline % 1000) * 1000000L};
  pthread_cond_timedwait(&q->cv, &q->mu, &ts);
}

int qim_client_poll_event(qim_client *c, qim_client_event *ev, int timeout_ms) {
  if (!c || !ev) return -EINVAL;
  qim__client_equeue *q = &c->events;
  uint64_t deadline = timeout_ms > 0 ? qim__client_now_ms() + (uint64_t)timeout_ms : 0;
  pthread_mutex_lock(&q->mu);
  int rc = QIM_AGAIN;
  for (;;) {
    if (q->export_failed) {
      q->export_failed = false;
      rc = QIM_E_HOST_EVENT_EXPORT_FAILED; /* raised where the runtime decided it */
      break;
    }
    if (q->count) {
      *ev = q->ring[q->head];
      q->head = (q->head + 1) % q->cap;
      q->count--;
      rc = 0;
      break;
    }
    if (timeout_ms == 0 || (deadline && qim__client_now_ms() >= deadline)) break;
    wait_until(q, timeout_ms < 0 ? 0 : deadline);
  }
  bool wake = rc == 0 && q->want_wake;
  if (wake) q->want_wake = false;
  pthread_mutex_unlock(&q->mu);
  if (wake) uv_async_send(q->wake);
  return rc;
}

void qim_client_event_release(qim_client_event *ev) {
  if (!ev) return;
  if (ev->messages) {
    qim_mailbox_entry *m = (qim_mailbox_entry *)ev->messages;
    for (size_t i = 0; i < ev->message_count; i++) qim_mailbox_entry_free(&m[i]);
    qim_free(m);
  }
  if (ev->sessions) {
    qim_session_page *p = (qim_session_page *)ev->sessions;
    qim_free(p->sessions);
    qim_bytes_free(&p->next_cursor.bytes);
    qim_free(p);
  }
  if (ev->members) {
    qim_member_page *p = (qim_member_page *)ev->members;
    qim_free(p->members);
    qim_bytes_free(&p->next_cursor.bytes);
    qim_free(p);
  }
  qim_bytes_free(&ev->rebuild.expired_cursor.signed_token);
  memset(ev, 0, sizeof *ev);
}

qim_connection_state qim_client_state(qim_client *c) {
  pthread_mutex_lock(&c->events.mu);
  qim_connection_state st = c->events.state;
  pthread_mutex_unlock(&c->events.mu);
  return st;
}
