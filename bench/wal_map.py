#!/usr/bin/env python3
"""wal_map.py — which B-trees a running qimd's WAL writes: frames (pages written) and distinct
pages per table or index, the measure of what a message costs the default store
(bench/README.md, "What bounds 2 and 3 now"; bench/HISTORY.md, twenty-ninth session).

qimd holds its database open alone (unix-excl) and keeps the WAL index in its heap, so the
files are read from copies taken while qimd is stopped (SIGSTOP, cp, SIGCONT): first a copy
of the WAL and of the database (the baseline), then more copies of the WAL, e.g. every half
second, then the database again. Each frame is counted once across the copies, by its WAL
generation (the header's salts) and index, and frames already in the baseline copy are not
counted; so a WAL that starts over between copies loses only the frames of a generation
that began and ended between two of them. Pages are named by SQLite's `dbstat` on a scratch
copy of the last database with the last WAL applied. With --messages-from, the message
counts are the `records` rows of the baseline and last database (each with its WAL), so
frames and distinct pages are also given per message.

Usage: bench/wal_map.py [--messages-from DB0 WAL0] DB WAL0 WAL1 ... WALn
       (DB: the last database copy; WAL0: the baseline; WALn: the copy taken with DB)
"""
import argparse
import collections
import os
import shutil
import sqlite3
import struct
import tempfile

WAL_HEADER = 32
FRAME_HEADER = 24


def wal_frames(path):
    """(salt1, salt2, index, page number, commit) of each valid frame of the current generation."""
    with open(path, 'rb') as f:
        data = f.read()
    if len(data) < WAL_HEADER:
        return []
    _magic, _version, page_size, _ckpt, salt1, salt2 = struct.unpack('>IIIIII', data[:24])
    out, off, i = [], WAL_HEADER, 0
    while off + FRAME_HEADER + page_size <= len(data):
        page, commit_size, s1, s2 = struct.unpack('>IIII', data[off:off + 16])
        if (s1, s2) != (salt1, salt2):  # left over from an earlier generation: the end
            break
        out.append((s1, s2, i, page, commit_size != 0))
        off += FRAME_HEADER + page_size
        i += 1
    return out


def with_wal(db, wal, work, name):
    """A scratch copy of db with wal beside it, for SQLite to apply when it opens."""
    copy = os.path.join(work, name)
    shutil.copy(db, copy)
    shutil.copy(wal, copy + '-wal')
    return copy


def records_count(db):
    con = sqlite3.connect(db)
    try:
        return con.execute('SELECT count(*) FROM records').fetchone()[0]
    finally:
        con.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--messages-from', nargs=2, metavar=('DB0', 'WAL0'))
    ap.add_argument('db')
    ap.add_argument('wals', nargs='+')
    a = ap.parse_args()

    seen, frames, commits = set(), collections.Counter(), 0
    for k, wal in enumerate(a.wals):
        for s1, s2, i, page, commit in wal_frames(wal):
            if (s1, s2, i) in seen:
                continue
            seen.add((s1, s2, i))
            if k == 0 and len(a.wals) > 1:  # the baseline
                continue
            frames[page] += 1
            commits += commit

    work = tempfile.mkdtemp(prefix='wal_map.')
    try:
        last = with_wal(a.db, a.wals[-1], work, 'last.db')
        con = sqlite3.connect(last)
        names = {page: name for name, page in con.execute('SELECT name, pageno FROM dbstat')}
        con.close()
        messages = 0
        if a.messages_from:
            first = with_wal(a.messages_from[0], a.messages_from[1], work, 'first.db')
            messages = records_count(last) - records_count(first)
    finally:
        shutil.rmtree(work)

    written, distinct = collections.Counter(), collections.Counter()
    for page, n in frames.items():
        name = names.get(page, '(page not in the last database)')
        written[name] += n
        distinct[name] += 1
    total = sum(frames.values())
    print(f'frames={total} commits={commits} distinct_pages={len(frames)} messages={messages}'
          + (f' frames_per_message={total / messages:.2f}'
             f' distinct_per_message={len(frames) / messages:.2f}' if messages > 0 else ''))
    print(f'{"frames":>8} {"share":>6} {"distinct":>8}  b-tree')
    for name, n in written.most_common():
        print(f'{n:8d} {100 * n / max(total, 1):5.1f}% {distinct[name]:8d}  {name}')


if __name__ == '__main__':
    main()
