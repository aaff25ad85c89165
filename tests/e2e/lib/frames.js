// frames.js — what every test client keeps of the server's frames: an ordered log with
// waiters (wait for a frame matching a predicate, or make sure none arrives), and the
// protocol invariants each frame must satisfy whatever the test is about (PROTOCOL.md
// §2, §6, §12.4): one payload key, timestamps of 20–24 characters in RFC 3339 UTC, numbers
// that are JSON numbers, ctrl.code and ctrl.ts always present, qim's user ids `usr` + 22.
'use strict';

const { scaled } = require('./harness');

const TS_KEYS = new Set(['ts', 'touched', 'updated', 'created', 'when', 'deleted', 'expires']);
const NUM_KEYS = new Set(['seq', 'read', 'recv', 'clear', 'count', 'unread', 'subcnt', 'code', 'low', 'hi']);
const UID_KEYS = new Set(['user', 'from', 'act', 'tgt']);
// Application JSON: anything goes inside these.
const OPAQUE_KEYS = new Set(['content', 'public', 'private', 'trusted', 'head', 'payload', 'aux']);
const TS_RE = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,3})?Z$/;
const UID_RE = /^usr[A-Za-z0-9_-]{22}$/;
const SERVER_KEYS = ['ctrl', 'data', 'meta', 'pres', 'info', 'sync']; // sync: qim extension (docs/protocol.md §4.6)

// Returns a list of problems with one parsed server frame (empty when it is fine).
function frameProblems(msg) {
  const out = [];
  if (typeof msg !== 'object' || msg === null || Array.isArray(msg)) return ['frame is not a JSON object'];
  const keys = Object.keys(msg).filter((k) => SERVER_KEYS.includes(k));
  if (keys.length !== 1) return [`frame has ${keys.length} payload keys (${Object.keys(msg).join(',')})`];
  const kind = keys[0];
  const body = msg[kind];
  if (typeof body !== 'object' || body === null) return [`${kind} is not an object`];
  const need = {
    ctrl: ['code', 'ts'],
    data: ['topic', 'seq', 'ts'],
    meta: ['topic'],
    pres: ['topic', 'what'],
    info: ['topic', 'what'],
    sync: ['entries', 'covered', 'watermark'],
  }[kind];
  for (const k of need) if (body[k] === undefined) out.push(`${kind} without ${k}`);
  if (body.id !== undefined && typeof body.id !== 'string') out.push(`${kind}.id is not a string`);
  if (kind === 'data' && !(Number.isInteger(body.seq) && body.seq > 0)) out.push(`data.seq ${JSON.stringify(body.seq)} is not a positive integer`);
  walk(body, kind, out);
  return out;
}

function walk(obj, where, out) {
  if (Array.isArray(obj)) {
    obj.forEach((v, i) => walk(v, `${where}[${i}]`, out));
    return;
  }
  if (typeof obj !== 'object' || obj === null) return;
  for (const [k, v] of Object.entries(obj)) {
    const at = `${where}.${k}`;
    if (OPAQUE_KEYS.has(k)) continue;
    if (TS_KEYS.has(k)) {
      if (typeof v !== 'string' || v.length < 20 || v.length > 24 || !TS_RE.test(v) || isNaN(Date.parse(v)))
        out.push(`${at} = ${JSON.stringify(v)} is not a 20–24 character RFC 3339 UTC timestamp`);
      continue;
    }
    // `del` is a number in ctrl.params (the delete id) and an object in meta.
    if (NUM_KEYS.has(k) || (k === 'del' && where.endsWith('.params'))) {
      if (!Number.isInteger(v) || v < 0) out.push(`${at} = ${JSON.stringify(v)} is not a non-negative JSON integer`);
      continue;
    }
    if (UID_KEYS.has(k) && typeof v === 'string') {
      if (!UID_RE.test(v)) out.push(`${at} = ${JSON.stringify(v)} is not a user id (usr + 22 characters)`);
      continue;
    }
    if ((k === 'src' || k === 'topic') && typeof v === 'string' && v.startsWith('usr') && !UID_RE.test(v)) {
      out.push(`${at} = ${JSON.stringify(v)} looks like a user id but is not usr + 22 characters`);
      continue;
    }
    if (k === 'acs' || k === 'dacs') {
      if (typeof v !== 'object' || v === null) out.push(`${at} is not an object`);
      else for (const side of ['want', 'given', 'mode']) if (v[side] !== undefined && typeof v[side] !== 'string') out.push(`${at}.${side} is not a string`);
      continue;
    }
    walk(v, at, out);
  }
}

// An ordered log of frames with waiters. Each entry is {i, t, raw, msg} where msg is the
// frame parsed without the SDK's reviver (plain JSON), or null for a non-JSON frame.
class FrameLog {
  constructor(label, onProblem) {
    this.label = label;
    this.entries = [];
    this.waiters = [];
    this.onProblem = onProblem;
    this.closed = null;
  }

  push(raw) {
    let msg = null;
    // "0" is the probe answer, the one frame that is not a JSON object.
    if (raw !== '0') {
      try {
        msg = JSON.parse(raw);
      } catch (_) {
        this.onProblem && this.onProblem(`${this.label}: frame is not JSON: ${raw.slice(0, 80)}`);
      }
    }
    if (msg !== null) {
      for (const p of frameProblems(msg)) this.onProblem && this.onProblem(`${this.label}: ${p} in ${raw.slice(0, 300)}`);
    }
    const e = { i: this.entries.length, t: Date.now(), raw, msg };
    this.entries.push(e);
    for (const w of this.waiters.slice()) {
      if (e.i >= w.since && w.pred(e.msg, e)) {
        this.waiters.splice(this.waiters.indexOf(w), 1);
        w.resolve(e);
      }
    }
  }

  // The position to pass as `since` to wait for frames that arrive after now.
  mark() {
    return this.entries.length;
  }

  since(mark) {
    return this.entries.slice(mark);
  }

  // All parsed frames from `mark` on that match `pred`.
  filter(pred, mark = 0) {
    return this.entries.slice(mark).filter((e) => e.msg && pred(e.msg, e));
  }

  // Resolves with the first entry at or after `since` matching pred(msg, entry); the
  // resolution comes after the SDK's own setTimeout(0) so its state is up to date.
  wait(pred, { since = 0, timeout = 5000, what = 'a frame' } = {}) {
    const found = this.entries.slice(since).find((e) => pred(e.msg, e));
    const ms = scaled(timeout);
    return new Promise((resolve, reject) => {
      const done = (e) => setTimeout(() => setTimeout(() => resolve(e), 0), 0);
      if (found) return done(found);
      const w = { since, pred: (m, e) => m !== undefined && pred(m, e), resolve: (e) => { clearTimeout(timer); done(e); } };
      const timer = setTimeout(() => {
        this.waiters.splice(this.waiters.indexOf(w), 1);
        const why = this.closed ? ` (connection closed: ${this.closed})` : '';
        reject(new Error(`${this.label}: no ${what} within ${ms} ms${why}`));
      }, ms);
      this.waiters.push(w);
    });
  }

  // Waits `ms` and fails if a frame matching pred arrived at or after `since`.
  async none(pred, { since = 0, ms = 500, what = 'frame' } = {}) {
    await new Promise((r) => setTimeout(r, scaled(ms)));
    const got = this.entries.slice(since).filter((e) => e.msg && pred(e.msg, e));
    if (got.length) throw new Error(`${this.label}: unexpected ${what}: ${got.map((e) => e.raw.slice(0, 200)).join(' | ')}`);
  }

  // The last `n` frames, for failure reports.
  tail(n = 25) {
    const from = Math.max(0, this.entries.length - n);
    const lines = this.entries.slice(from).map((e) => `  <- ${e.raw.length > 300 ? e.raw.slice(0, 300) + '…' : e.raw}`);
    return `frames received by ${this.label} (${this.entries.length} in all${from ? `, last ${n}` : ''}):\n${lines.join('\n')}`;
  }
}

module.exports = { FrameLog, frameProblems, TS_RE, UID_RE };
