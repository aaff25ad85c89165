/*
 * sqlite_pcache.c — SQLite's own page cache, without a walk the writer paid at commits.
 *
 * Why: at the end of every transaction SQLite truncates its page cache to the database's
 * size. The default cache (pcache1) keeps only an upper bound of the page numbers it
 * holds, and when that bound is far above the limit it walks its whole hash table. A
 * B-tree balance that renumbers its new pages into ascending order swaps two of them
 * through a temporary number, the lock-byte page's (1 GiB / page size + 1: 262,145 with
 * 4-KiB pages), which raises the bound to it. Every commit after such a split then walked
 * all of the writer's 32-MiB cache (one bucket per page, a cache miss each): 10-11 % of
 * the writer thread's samples in one-to-one load on a store under 1 GiB (bench/HISTORY.md,
 * "Thirteenth session").
 *
 * This cache is pcache1 with a truncate in front that knows when nothing can be cut. It
 * keeps its own bound of the numbers pages were created or moved at, with the lock-byte
 * page's number counted apart (pages moved there and not yet away): when the bound is
 * below the limit and no page sits at that number, no page is at or above the limit and
 * the truncate is not passed on. Otherwise (a rollback of a transaction that grew the
 * file, a page discarded while at the temporary number) pcache1 truncates as before, and
 * the bound drops to the limit. The counts are per cache, and a cache is used by one
 * connection at a time, as pcache1 itself assumes.
 */
#include <stdatomic.h>
#include <stdint.h>

#include "qim/mem.h"
#include "store/sqlite_int.h"

/* SQLite's lock-byte page holds the byte at 1 GiB (PENDING_BYTE): never a real page. */
#define LOCK_BYTE_OFFSET 0x40000000u

typedef struct wrapped {
  sqlite3_pcache *inner;
  unsigned bound;      /* every page created or moved, other than at `temp`, is at or below it */
  unsigned temp;       /* the lock-byte page's number for this page size */
  unsigned at_temp;    /* pages moved to `temp` and not away since */
} wrapped;

static sqlite3_pcache_methods2 inner;
static atomic_ullong truncates, passed_on;

static int w_init(void *arg) {
  (void)arg;
  return inner.xInit(inner.pArg);
}

static void w_shutdown(void *arg) {
  (void)arg;
  if (inner.xShutdown) inner.xShutdown(inner.pArg);
}

static sqlite3_pcache *w_create(int page_size, int extra, int purgeable) {
  wrapped *w = qim_calloc(1, sizeof *w);
  w->inner = inner.xCreate(page_size, extra, purgeable);
  if (!w->inner) {
    qim_free(w);
    return NULL;
  }
  w->temp = LOCK_BYTE_OFFSET / (unsigned)page_size + 1;
  return (sqlite3_pcache *)w;
}

#define W(p) ((wrapped *)(p))

static void w_cachesize(sqlite3_pcache *p, int n) { inner.xCachesize(W(p)->inner, n); }
static int w_pagecount(sqlite3_pcache *p) { return inner.xPagecount(W(p)->inner); }

static sqlite3_pcache_page *w_fetch(sqlite3_pcache *p, unsigned key, int create) {
  sqlite3_pcache_page *pg = inner.xFetch(W(p)->inner, key, create);
  if (pg && key > W(p)->bound) W(p)->bound = key;
  return pg;
}

static void w_unpin(sqlite3_pcache *p, sqlite3_pcache_page *pg, int discard) {
  inner.xUnpin(W(p)->inner, pg, discard);
}

static void w_rekey(sqlite3_pcache *p, sqlite3_pcache_page *pg, unsigned from, unsigned to) {
  wrapped *w = W(p);
  inner.xRekey(w->inner, pg, from, to);
  if (from == w->temp && w->at_temp) w->at_temp--;
  if (to == w->temp)
    w->at_temp++;
  else if (to > w->bound)
    w->bound = to;
}

static void w_truncate(sqlite3_pcache *p, unsigned limit) {
  wrapped *w = W(p);
  atomic_fetch_add_explicit(&truncates, 1, memory_order_relaxed);
  if (w->bound < limit && !w->at_temp) return; /* nothing at or above the limit */
  atomic_fetch_add_explicit(&passed_on, 1, memory_order_relaxed);
  inner.xTruncate(w->inner, limit);
  if (w->temp >= limit) w->at_temp = 0;
  if (w->bound >= limit) w->bound = limit ? limit - 1 : 0;
}

static void w_destroy(sqlite3_pcache *p) {
  inner.xDestroy(W(p)->inner);
  qim_free(p);
}

static void w_shrink(sqlite3_pcache *p) { inner.xShrink(W(p)->inner); }

int sq_pcache_install(void) {
  if (inner.xCreate) return SQLITE_OK; /* installed: wrapping ourselves would recurse */
  int rc = sqlite3_config(SQLITE_CONFIG_GETPCACHE2, &inner);
  if (rc != SQLITE_OK || !inner.xCreate) {
    inner = (sqlite3_pcache_methods2){0};
    return rc != SQLITE_OK ? rc : SQLITE_ERROR;
  }
  static const sqlite3_pcache_methods2 ours = {
      .iVersion = 1, .xInit = w_init, .xShutdown = w_shutdown, .xCreate = w_create,
      .xCachesize = w_cachesize, .xPagecount = w_pagecount, .xFetch = w_fetch,
      .xUnpin = w_unpin, .xRekey = w_rekey, .xTruncate = w_truncate, .xDestroy = w_destroy,
      .xShrink = w_shrink};
  return sqlite3_config(SQLITE_CONFIG_PCACHE2, &ours);
}

void sq_pcache_counts(uint64_t *all, uint64_t *walked) {
  *all = atomic_load_explicit(&truncates, memory_order_relaxed);
  *walked = atomic_load_explicit(&passed_on, memory_order_relaxed);
}
