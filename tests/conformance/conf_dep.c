/*
 * conf_dep.c — isolated dependencies: every vector runs against a backend instance that
 * nothing else touches, so one vector's leftovers can never make another pass or fail.
 *
 *   "sqlite:" / "sqlite:DIR"   a fresh temporary directory (under DIR, else $TMPDIR or
 *                              /tmp) holding a fresh database file; removed on close;
 *   "sqlite-memory:" / "sqlite-memory:DIR"  the same in store-memory mode, its memory
 *                              directory inside that one, a snapshot every 64 KiB of journal;
 *   "redis:" / "redis:DIR"     a private redis-server in a fresh temporary directory,
 *                              stopped by its pid and removed on close;
 *   "fault:MODE+URL"           URL's dependency, its store wrapped by conf_fault.c.
 * Any failure to create or open one is StorageConformanceError::IsolatedDependencyUnavailable
 * (raised): the suite reports it, it never skips.
 */
#include <errno.h>
#include <ftw.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "conf.h"
#include "qim/err.h"

struct conf_dep {
  char *dir;           /* temporary directory to remove, or NULL */
  char *backend_url;   /* what qim_store_open gets */
  qim_store_options opt;
  int fault;           /* conf_fault_mode, or -1 for none */
  int redis_pid;       /* the private redis-server, or 0 */
  qim_store *store;
};

static int unavailable(char *why, size_t cap, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, cap, fmt, ap);
  va_end(ap);
  return qim_err_raise(QIM_E_CONFORMANCE_ISOLATED_DEPENDENCY_UNAVAILABLE);
}

static int rm_one(const char *p, const struct stat *st, int flag, struct FTW *ftw) {
  (void)st, (void)flag, (void)ftw;
  return remove(p);
}

/* Whatever the backend left (database, -wal, -shm, ...) goes with the directory. */
static void rmtree(const char *dir) { nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS); }

static int open_store(conf_dep *d, char *why, size_t cap) {
  qim_store *s = NULL;
  int rc = qim_store_open(d->backend_url, &d->opt, &s);
  if (rc) return unavailable(why, cap, "qim_store_open(\"%s\"): %s", d->backend_url, qim_err_name(rc));
  d->store = d->fault >= 0 ? conf_fault_wrap(s, (conf_fault_mode)d->fault) : s;
  return 0;
}

/* A fresh temporary directory under `spec` (else $TMPDIR, else /tmp). */
static int make_dir(conf_dep *d, const char *spec, char *why, size_t cap) {
  const char *base = *spec ? spec : getenv("TMPDIR");
  if (!base || !*base) base = "/tmp";
  if (asprintf(&d->dir, "%s/qim-conf-XXXXXX", base) < 0) abort();
  if (!mkdtemp(d->dir)) {
    int e = errno;
    free(d->dir);
    d->dir = NULL;
    return unavailable(why, cap, "mkdtemp in %s: %s", base, strerror(e));
  }
  return 0;
}

static int make_sqlite(conf_dep *d, const char *spec, char *why, size_t cap) {
  int rc = make_dir(d, spec, why, cap);
  if (!rc && asprintf(&d->backend_url, "sqlite:%s/store.db", d->dir) < 0) abort();
  return rc;
}

static int make_sqlite_memory(conf_dep *d, const char *spec, char *why, size_t cap) {
  int rc = make_dir(d, spec, why, cap);
  if (rc) return rc;
  char *mem;
  if (asprintf(&mem, "%s/mem", d->dir) < 0) abort();
  if (mkdir(mem, 0700) != 0) rc = unavailable(why, cap, "mkdir %s: %s", mem, strerror(errno));
  if (!rc && asprintf(&d->backend_url, "sqlite:%s/store.db?memory=%s&snapshot_kb=64", d->dir, mem) < 0)
    abort();
  free(mem);
  return rc;
}

static int make_redis(conf_dep *d, const char *spec, char *why, size_t cap) {
  int port, rc = make_dir(d, spec, why, cap);
  if (rc) return rc;
  if (conf_redis_start(d->dir, &d->redis_pid, &port, why, cap))
    return qim_err_raise(QIM_E_CONFORMANCE_ISOLATED_DEPENDENCY_UNAVAILABLE); /* `why` is set */
  if (asprintf(&d->backend_url, "redis://127.0.0.1:%d/0", port) < 0) abort();
  return 0;
}

/* Splits "fault:MODE+URL"; returns the inner URL or NULL. */
static const char *parse_fault(const char *url, int *mode) {
  const char *plus = strchr(url + 6, '+');
  if (!plus) return NULL;
  *mode = conf_fault_parse(url + 6, (size_t)(plus - url - 6));
  return *mode < 0 ? NULL : plus + 1;
}

int conf_dep_open(const char *url, const qim_store_options *opt, conf_dep **out, char *why, size_t cap) {
  conf_dep *d = calloc(1, sizeof *d);
  if (!d) abort();
  d->opt = *opt;
  d->fault = -1;
  *out = NULL;
  if (!strncmp(url, "fault:", 6)) {
    url = parse_fault(url, &d->fault);
    if (!url) {
      free(d);
      return unavailable(why, cap, "fault URL: expected fault:MODE+URL with a known MODE");
    }
  }
  int rc;
  if (!strncmp(url, "sqlite:", 7))
    rc = make_sqlite(d, url + 7, why, cap);
  else if (!strncmp(url, "sqlite-memory:", 14))
    rc = make_sqlite_memory(d, url + 14, why, cap);
  else if (!strncmp(url, "redis:", 6))
    rc = make_redis(d, url + 6, why, cap);
  else
    rc = unavailable(why, cap, "no isolated dependency known for \"%s\"", url);
  if (!rc) rc = open_store(d, why, cap);
  if (rc) {
    conf_dep_close(d);
    return rc;
  }
  *out = d;
  return 0;
}

qim_store *conf_dep_store(conf_dep *d) { return d->store; }
const char *conf_dep_backend_url(conf_dep *d) { return d->backend_url; }

int conf_dep_reopen(conf_dep *d, char *why, size_t cap) {
  qim_store_close(d->store);
  d->store = NULL;
  return open_store(d, why, cap);
}

void conf_dep_close(conf_dep *d) {
  if (!d) return;
  qim_store_close(d->store);
  conf_redis_stop(d->redis_pid);
  if (d->dir) rmtree(d->dir);
  free(d->dir);
  free(d->backend_url);
  free(d);
}
