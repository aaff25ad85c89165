/*
 * iplimit.h — live connection counts per peer IP address, shared by every I/O loop.
 *
 * The gateway counts a connection from accept to close, whatever state it is in, so
 * one address cannot hold more than its share of sockets (a flood of half-open
 * handshakes counts too). Addresses are 16 bytes: IPv4 as IPv4-mapped IPv6.
 * All functions are thread-safe: the table is split into stripes, each behind its
 * own mutex, so loops rarely contend. Memory is proportional to the number of
 * distinct addresses connected right now (an entry is freed when its count drops
 * to zero).
 */
#ifndef QIM_GATEWAY_IPLIMIT_H
#define QIM_GATEWAY_IPLIMIT_H

#include <stdint.h>

typedef struct qim_iplimit qim_iplimit;

/* Aborts on out of memory. */
qim_iplimit *qim_iplimit_new(void);
/* Frees the table; accepts NULL. No other thread may be using it. */
void qim_iplimit_free(qim_iplimit *t);

/* Counts one more connection from `addr`; returns the count including it. */
unsigned qim_iplimit_acquire(qim_iplimit *t, const uint8_t addr[16]);
/* Counts one connection less (each acquire is released exactly once). */
void qim_iplimit_release(qim_iplimit *t, const uint8_t addr[16]);
/* Current count for `addr` (0 when none). */
unsigned qim_iplimit_count(qim_iplimit *t, const uint8_t addr[16]);

#endif /* QIM_GATEWAY_IPLIMIT_H */
