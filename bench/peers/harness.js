#!/usr/bin/env node
// harness.js — the load generator of the peers benchmark (issue 11): one scenario and one
// timing code for every server; only the adapter (adapters.js: Tinode frames for qim, XMPP
// for ejabberd and Prosody) differs. bench/peers/run.sh starts the servers and calls it.
//
//   node harness.js SCENARIO --proto qim|xmpp --port P [options]
//   register  --users N                 create N accounts once (before anything is timed)
//   burst     --users N --messages M    N/2 pairs; every user sends M messages to its peer at
//                                       once; deliveries/s from the first send to the last delivery
//   rate      --users N --rate R --duration S   open-loop at R msgs/s in total; p50/p99 send → delivery
//   group     --size G --senders K --messages M  one room of G members, K of them send M each;
//                                       deliveries/s to the other members
// Options: --host (127.0.0.1) --domain --muc (XMPP) --accounts FILE (qim tokens, written by
// register) --apikey KEY (Tinode demo key, qimd default) --qim-direct p2p|group (one-to-one as p2p topics, the default, or 2-member groups) --server-pid PID (CPU and RSS from /proc) --timeout S.
// Prints a human line, then `RESULT key=value ...`. Every count and wait is bounded.
'use strict';

const fs = require('fs');
const { QimConn, XmppConn } = require('./adapters');

function parseArgs(argv) {
  const o = {
    scenario: argv[0], proto: 'qim', host: '127.0.0.1', port: 0, domain: 'bench.local', muc: '',
    users: 100, messages: 100, rate: 1000, duration: 10, warmup: 1, size: 50, senders: 5,
    apikey: 'AQEAAAABAAD_rAp4DJh05a1HAwFT3A6K', accounts: '', qimDirect: 'p2p', serverPid: 0, timeout: 120, password: 'benchpass1', concurrency: 8,
  };
  for (let i = 1; i < argv.length; i += 2) {
    const k = argv[i].replace(/^--/, '').replace(/-(.)/g, (_, c) => c.toUpperCase());
    if (!(k in o)) throw new Error(`unknown option ${argv[i]}`);
    o[k] = typeof o[k] === 'number' ? Number(argv[i + 1]) : argv[i + 1];
  }
  if (!o.muc) o.muc = `conference.${o.domain}`;
  if (o.users > 2000 || o.size > 1000 || o.messages > 100000 || o.duration > 120) throw new Error('counts out of bounds');
  return o;
}

const nowUs = () => Number(process.hrtime.bigint() / 1000n);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// ---- accounts ----------------------------------------------------------------------------
function accountsOf(o, n) {
  const saved = new Map();
  if (o.proto === 'qim' && o.accounts && fs.existsSync(o.accounts)) {
    for (const l of fs.readFileSync(o.accounts, 'utf8').split('\n')) {
      const [login, uid, token] = l.split(' ');
      if (token) saved.set(login, { uid, token });
    }
  }
  const out = [];
  for (let i = 0; i < n; i++) {
    const login = `bench${String(i).padStart(5, '0')}`;
    out.push({ login, password: o.password, ...(saved.get(login) || {}) });
  }
  return out;
}

function newConn(o, acc) { return o.proto === 'qim' ? new QimConn(o, acc) : new XmppConn(o, acc); }

// Runs fn(i) for i < n with at most `limit` at a time.
async function pool(n, limit, fn) {
  let next = 0;
  const worker = async () => { while (next < n) { const i = next++; await fn(i); } };
  await Promise.all(Array.from({ length: Math.min(limit, n) }, worker));
}

async function register(o) {
  const accs = accountsOf(o, o.users);
  const t0 = nowUs();
  await pool(accs.length, o.concurrency, async (i) => {
    const c = newConn(o, accs[i]);
    if (o.proto === 'qim') { await c.connect(); await c.register(); await c.close(); } else await c.register();
  });
  if (o.proto === 'qim') fs.writeFileSync(o.accounts, accs.map((a) => `${a.login} ${a.uid} ${a.token}`).join('\n') + '\n');
  return { accounts: accs.length, seconds: ((nowUs() - t0) / 1e6).toFixed(1) };
}

async function connectAll(o, accs) {
  const conns = accs.map((a) => newConn(o, a));
  await pool(conns.length, o.concurrency, async (i) => {
    await conns[i].connect();
    if (o.proto === 'qim') await conns[i].login();
  });
  return conns;
}

// ---- measurement -------------------------------------------------------------------------
// The body every message carries: sender index, number, due time (µs); padded to 100 bytes.
function body(sender, n, due) {
  const s = `s=${sender};n=${n};t=${due};`;
  return s + 'x'.repeat(Math.max(0, 100 - s.length));
}
const BODY_RE = /^s=(\d+);n=(\d+);t=(\d+);/;

function pct(sorted, p) {
  if (!sorted.length) return 0;
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)];
}

function procSample(pid) {
  if (!pid) return null;
  try {
    const st = fs.readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
    const rss = /VmRSS:\s+(\d+)/.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'));
    return { t: nowUs(), ticks: Number(st[11]) + Number(st[12]), rssKb: rss ? Number(rss[1]) : 0 };
  } catch { return null; }
}
function cpuPct(a, b) { return a && b ? ((b.ticks - a.ticks) / 100 / ((b.t - a.t) / 1e6)) * 100 : ''; }

// Deliveries of messages from others, with latency from the due time; duplicates counted.
class Tally {
  constructor() { this.seen = new Set(); this.lat = []; this.delivered = 0; this.dups = 0; this.last = 0; this.measureFrom = 0; }
  on(receiver, text) {
    const m = BODY_RE.exec(text);
    if (!m || Number(m[1]) === receiver) return; // own echo (MUC reflects to the sender)
    const key = `${receiver}:${m[1]}:${m[2]}`;
    if (this.seen.has(key)) { this.dups++; return; }
    this.seen.add(key);
    const now = nowUs(), due = Number(m[3]);
    this.delivered++;
    this.last = now;
    if (due >= this.measureFrom) this.lat.push((now - due) / 1000);
  }
}

async function waitFor(cond, timeoutS) {
  const until = Date.now() + timeoutS * 1000;
  while (!cond() && Date.now() < until) await sleep(5);
  return cond();
}

// Pairs (2k, 2k+1) of users; returns per user the target of its peer.
async function setupPairs(o, conns) {
  const targets = new Array(conns.length);
  await pool(conns.length / 2, o.concurrency, async (k) => {
    const a = conns[2 * k], b = conns[2 * k + 1];
    if (o.proto === 'qim' && o.qimDirect === 'group') {
      const t = await a.direct(b, true);
      targets[2 * k] = t; targets[2 * k + 1] = t;
    } else {
      targets[2 * k] = await a.direct(b);
      targets[2 * k + 1] = await b.direct(a);
    }
  });
  return targets;
}

// Connects n users (n even), pairs them, and starts counting deliveries.
async function pairsReady(o) {
  const n = o.users - (o.users % 2);
  const conns = await connectAll(o, accountsOf(o, n));
  const targets = await setupPairs(o, conns);
  const tally = new Tally();
  conns.forEach((c, i) => c.onMessage((t) => tally.on(i, t)));
  await sleep(500);
  return { n, conns, targets, tally };
}

// The burst of burst and group: senders 0..K-1 write `messages` each at once; waits for the
// expected deliveries (bounded), closes the connections. The figure is deliveries ÷ (last
// delivery − first send).
async function blast(o, conns, targets, K, expected, tally) {
  const s0 = procSample(o.serverPid);
  const t0 = nowUs();
  for (let m = 0; m < o.messages; m++) for (let i = 0; i < K; i++) conns[i].send(targets[i], body(i, m, nowUs()));
  const tSent = nowUs();
  await waitFor(() => tally.delivered >= expected, o.timeout);
  const s1 = procSample(o.serverPid);
  const secs = ((tally.last || nowUs()) - t0) / 1e6;
  await Promise.all(conns.map((c) => c.close()));
  tally.lat.sort((x, y) => x - y);
  return {
    messages: o.messages, expected, delivered: tally.delivered, lost: expected - tally.delivered, dups: tally.dups,
    send_s: ((tSent - t0) / 1e6).toFixed(3), seconds: secs.toFixed(3), rate: (tally.delivered / secs).toFixed(0),
    lat_p50_ms: pct(tally.lat, 50).toFixed(1), lat_p99_ms: pct(tally.lat, 99).toFixed(1),
    server_cpu_pct: s1 ? cpuPct(s0, s1).toFixed(0) : '', server_rss_kb: s1 ? s1.rssKb : '',
  };
}

async function burst(o) {
  const { n, conns, targets, tally } = await pairsReady(o);
  const { rate, ...r } = await blast(o, conns, targets, n, n * o.messages, tally);
  return { users: n, ...r, msgs_per_s: rate };
}

// Open loop: message n of sender q is due at t0 + (q/Q + n) * Q/R; a tick sends what is due.
async function openLoop(o, conns, targets, rate, seconds, tally) {
  const Q = conns.length, period = (Q / rate) * 1e6;
  const t0 = nowUs() + 50000;
  const total = Math.floor(rate * seconds);
  tally.measureFrom = t0 + o.warmup * 1e6;
  const next = new Array(Q).fill(0);
  let sent = 0;
  const lag = [];
  await new Promise((resolve) => {
    const tick = () => {
      const now = nowUs();
      for (let q = 0; q < Q; q++) {
        for (;;) {
          const due = t0 + (q / Q + next[q]) * period;
          if (sent >= total || due > now) break;
          conns[q].send(targets[q], body(q, next[q], Math.round(due)));
          next[q]++; sent++;
          if (due >= tally.measureFrom) lag.push((now - due) / 1000);
        }
      }
      if (sent >= total) resolve(); else setTimeout(tick, 1);
    };
    tick();
  });
  lag.sort((x, y) => x - y);
  return { sent, lagP99: pct(lag, 99) };
}

async function rateRun(o) {
  const { n, conns, targets, tally } = await pairsReady(o);
  const s0 = procSample(o.serverPid);
  const r = await openLoop(o, conns, targets, o.rate, o.duration + o.warmup, tally);
  const s1 = procSample(o.serverPid);
  await waitFor(() => tally.delivered >= r.sent, Math.min(o.timeout, 30));
  await Promise.all(conns.map((c) => c.close()));
  tally.lat.sort((x, y) => x - y);
  return {
    users: n, rate: o.rate, sent: r.sent, delivered: tally.delivered, lost: r.sent - tally.delivered, dups: tally.dups,
    lat_p50_ms: pct(tally.lat, 50).toFixed(1), lat_p99_ms: pct(tally.lat, 99).toFixed(1), lat_max_ms: pct(tally.lat, 100).toFixed(1),
    lag_p99_ms: r.lagP99.toFixed(1), server_cpu_pct: s1 ? cpuPct(s0, s1).toFixed(0) : '', server_rss_kb: s1 ? s1.rssKb : '',
  };
}

async function group(o) {
  const conns = await connectAll(o, accountsOf(o, o.size));
  const target = await conns[0].createRoom(`room${process.pid}x${Date.now() % 100000}`);
  await pool(conns.length - 1, o.concurrency, (i) => conns[i + 1].joinRoom(target));
  const tally = new Tally();
  conns.forEach((c, i) => c.onMessage((t) => tally.on(i, t)));
  await sleep(500);
  const K = Math.min(o.senders, o.size);
  const { rate, ...r } = await blast(o, conns, conns.map(() => target), K, K * o.messages * (o.size - 1), tally);
  return { size: o.size, senders: K, ...r, deliveries_per_s: rate };
}

async function main() {
  const o = parseArgs(process.argv.slice(2));
  const run = { register, burst, rate: rateRun, group }[o.scenario];
  if (!run) throw new Error(`unknown scenario ${o.scenario}`);
  const c0 = process.cpuUsage(), t0 = nowUs();
  // Hard bound on the whole run, whatever happens.
  setTimeout(() => { console.error('harness: overall timeout'); process.exit(3); }, (o.timeout + o.duration + 120) * 1000).unref();
  const r = await run(o);
  const c1 = process.cpuUsage(c0);
  r.client_cpu_pct = (((c1.user + c1.system) / (nowUs() - t0)) * 100).toFixed(0);
  const via = o.proto === 'qim' && o.scenario !== 'group' ? ` via=${o.qimDirect === 'p2p' ? 'p2p' : 'group2'}` : '';
  console.log(`RESULT scenario=${o.scenario} proto=${o.proto}${via} ` + Object.entries(r).map(([k, v]) => `${k}=${v}`).join(' ') + ' status=ok');
  process.exit(0);
}

main().catch((e) => { console.error(`harness: ${e.message || e.condition || e}`, e.stack || ""); console.log('RESULT status=failed'); process.exit(1); });
