#!/usr/bin/env python3
"""disk_contention.py — how this disk's fdatasync latency for a WAL-like appender changes
when another process writes random 4 KiB pages, the way a checkpoint copies B-tree pages
into the database file (bench/HISTORY.md, "Seventeenth session").

The appender writes 4 KiB pages at --append-mbps into a 64 MiB file it starts over, as a
WAL restarts, and calls fdatasync after each ~1 ms of pages (a group commit). For each rate
in --random-mbps a second process writes random, aligned blocks of --random-kib (4 KiB by
default: one page) into a 600 MiB file at that rate with an fsync every --random-sync-ms
(1000: a checkpoint's; 20: a write-back kept short). Prints the appender's fdatasync
percentiles per rate, and the rate the second process reached (Python may fall short of a
high one; every loop stops at --seconds either way).
Both files live in DIR (on the disk under test, never a tmpfs) and are removed afterwards.

Usage: bench/disk_contention.py DIR [--append-mbps 120] [--random-mbps 0,40,80]
                                    [--random-kib 4] [--random-sync-ms 1000] [--seconds 8]
"""
import argparse
import multiprocessing
import os
import random
import time

PAGE = 4096
WAL_BYTES = 64 << 20
DB_PAGES = 150_000  # ~600 MiB


def paced(rate_bps, t0, written):
    """Bytes still due at rate_bps since t0."""
    return (time.monotonic() - t0) * rate_bps - written


def random_writer(path, mbps, block, sync_s, seconds, stop, done):
    fd = os.open(path, os.O_RDWR)
    buf = os.urandom(block)
    t0 = last_sync = time.monotonic()
    written = 0
    while not stop.is_set() and time.monotonic() - t0 < seconds:
        # bounded by the clock too: a rate this process cannot reach must not spin forever
        while paced(mbps * 1e6, t0, written) > 0 and time.monotonic() - t0 < seconds:
            os.pwrite(fd, buf, random.randrange(DB_PAGES * PAGE // block) * block)
            written += block
        if time.monotonic() - last_sync >= sync_s:
            os.fsync(fd)
            last_sync = time.monotonic()
        time.sleep(0.002)
    os.close(fd)
    done.value = written / max(time.monotonic() - t0, 1e-9) / 1e6  # what was reached, not asked


def appender(path, mbps, seconds):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    buf = os.urandom(PAGE)
    lat = []
    t0 = time.monotonic()
    written = size = 0
    while time.monotonic() - t0 < seconds:
        while paced(mbps * 1e6, t0, written) > 0 and time.monotonic() - t0 < seconds:
            os.write(fd, buf)
            written += PAGE
            size += PAGE
            if size >= WAL_BYTES:
                os.lseek(fd, 0, os.SEEK_SET)
                size = 0
        s = time.monotonic()
        os.fdatasync(fd)
        lat.append((time.monotonic() - s) * 1000)
        time.sleep(0.001)
    os.close(fd)
    return sorted(lat), written / seconds / 1e6


def pct(lat, q):
    return lat[min(len(lat) - 1, int(q * len(lat)))]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dir")
    ap.add_argument("--append-mbps", type=float, default=120)
    ap.add_argument("--random-mbps", default="0,40,80")
    ap.add_argument("--random-kib", type=int, default=4)
    ap.add_argument("--seconds", type=float, default=8)
    ap.add_argument("--random-sync-ms", type=float, default=1000,
                    help="the random writer's fsync interval (a checkpoint's)")
    a = ap.parse_args()
    if not 0 < a.seconds <= 120 or a.append_mbps <= 0:
        ap.error("--seconds must be in (0, 120] and --append-mbps positive")
    if a.random_kib < 4 or a.random_kib > 1024 or a.random_kib & (a.random_kib - 1):
        ap.error("--random-kib must be a power of two from 4 to 1024")
    block = a.random_kib * 1024
    rates = [float(r) for r in a.random_mbps.split(",")]
    wal = os.path.join(a.dir, "disk_contention.wal")
    db = os.path.join(a.dir, "disk_contention.db")
    try:
        with open(db, "wb") as f:  # written, not sparse: a checkpoint overwrites real pages
            chunk = os.urandom(1 << 20)
            for _ in range(DB_PAGES * PAGE >> 20):
                f.write(chunk)
            os.fsync(f.fileno())
        for r in rates:
            stop = multiprocessing.Event()
            done = multiprocessing.Value("d", 0.0)
            w = None
            if r > 0:
                w = multiprocessing.Process(target=random_writer, args=(db, r, block, a.random_sync_ms / 1000, a.seconds + 1, stop, done))
                w.start()
                time.sleep(0.5)
            lat, got = appender(wal, a.append_mbps, a.seconds)
            stop.set()
            if w:
                w.join(timeout=30)
            print("RESULT scenario=disk_contention append_mbps=%.0f random_mbps=%.0f random_kib=%d"
                  " random_sync_ms=%.0f syncs=%d"
                  " sync_p50_ms=%.2f sync_p90_ms=%.2f sync_p99_ms=%.2f sync_max_ms=%.2f"
                  % (got, done.value, a.random_kib, a.random_sync_ms, len(lat), pct(lat, .5), pct(lat, .9), pct(lat, .99), lat[-1]))
    finally:
        for p in (wal, db):
            if os.path.exists(p):
                os.unlink(p)


if __name__ == "__main__":
    main()
