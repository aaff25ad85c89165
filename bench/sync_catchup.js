// sync_catchup.js — issue 10 item 6: how long a qim device that missed M messages across C
// conversations takes to catch up with {sync} (target: 10,000 across 100 in ≤ 200 ms).
//
// Beside it, measured in the same run on the same server and data: the Tinode way of
// catching up, `get data` per conversation (the same 10,000 messages, 16 requests in flight),
// so the ratio compares between runs on a noisy shared machine.
//
//   node bench/sync_catchup.js [--qimd PATH] [--messages 10000] [--conversations 100]
//                              [--limit 1000] [--passes 5]
//
// It starts its own qimd (rate limits lifted, log level warn) on a free loopback port,
// creates the accounts and groups, lets the reader go offline, publishes, then:
//   1. a warm-up pass: the reader reconnects with its device id and syncs from the cursor
//      it had until it has every message (this also waits for materialization to finish);
//   2. `passes` timed passes of the same catch-up from the same cursor (reconnect excluded:
//      from the first {sync} sent to the last page received);
//   3. `passes` timed history catch-ups over the same connection, the topics attached
//      beforehand (the attach is not timed).
// Prints a summary and one line `RESULT scenario=sync_catchup …`.
'use strict';

const path = require('node:path');
const crypto = require('node:crypto');
const E2E = path.join(__dirname, '..', 'tests', 'e2e');
const WebSocket = require(path.join(E2E, 'node_modules', 'ws'));
const { API_KEY, Qimd } = require(path.join(E2E, 'lib', 'harness'));

function args() {
  const o = { qimd: process.env.QIMD || path.join(__dirname, '..', 'build', 'src', 'qimd'), messages: 10000, conversations: 100, limit: 1000, passes: 5 };
  const a = process.argv.slice(2);
  for (let i = 0; i < a.length; i += 2) {
    const k = a[i].replace(/^--/, '');
    if (!(k in o)) throw new Error(`unknown option ${a[i]}`);
    o[k] = k === 'qimd' ? a[i + 1] : Number(a[i + 1]);
  }
  return o;
}

// A minimal client: requests matched by id, with a deadline.
class Client {
  constructor(url) {
    this.ws = new WebSocket(url, { perMessageDeflate: false, maxPayload: 64 << 20 });
    this.waiting = new Map();
    this.n = 0;
    this.ws.on('message', (d) => {
      const m = JSON.parse(d.toString('utf8'));
      const body = m.ctrl || m.sync || m.meta;
      const w = body && body.id !== undefined && this.waiting.get(body.id);
      if (w) w.onFrame(m);
    });
  }

  open() {
    return new Promise((res, rej) => {
      this.ws.once('open', res);
      this.ws.once('error', rej);
    });
  }

  // Resolves with the {ctrl}/{sync} answering the request; {data}/{meta} frames before it are collected.
  request(kind, body, collect) {
    const id = `r${++this.n}`;
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`no answer to ${kind} ${id}`)), 120000);
      this.waiting.set(id, {
        onFrame: (m) => {
          if (m.meta && collect) return;
          clearTimeout(timer);
          this.waiting.delete(id);
          resolve(m);
        },
      });
      this.ws.send(JSON.stringify({ [kind]: { id, ...body } }));
    });
  }

  close() {
    this.ws.terminate();
  }
}

async function connect(url, device, secret, scheme = 'token') {
  const c = new Client(url);
  await c.open();
  const hi = await c.request('hi', { ver: '0.25.3', ua: 'qim-bench sync', ...(device ? { device } : {}) });
  if (hi.ctrl.code !== 201) throw new Error(`hi: ${hi.ctrl.code}`);
  const login = scheme === 'new'
    ? await c.request('acc', { user: 'new', scheme: 'basic', secret, login: true })
    : await c.request('login', { scheme, secret });
  if (login.ctrl.code !== 200) throw new Error(`login: ${login.ctrl.code} ${login.ctrl.text}`);
  c.params = login.ctrl.params;
  return c;
}

// Runs fns with at most `width` in flight.
async function windowed(items, width, fn) {
  let next = 0;
  await Promise.all(Array.from({ length: width }, async () => {
    while (next < items.length) await fn(items[next++]);
  }));
}

// One catch-up with {sync} from `cursor`: pages until no more; returns {ms, messages, entries, pages}.
async function syncPass(c, cursor, limit, expect) {
  const t0 = process.hrtime.bigint();
  let messages = 0;
  let entries = 0;
  let pages = 0;
  for (;;) {
    const r = await c.request('sync', { cursor, limit });
    if (!r.sync) throw new Error(`sync: ${JSON.stringify(r.ctrl)}`);
    pages++;
    entries += r.sync.entries.length;
    for (const e of r.sync.entries) if (e.type === 'message') messages++;
    cursor = r.sync.cursor;
    if (!r.sync.more && (expect === undefined || messages >= expect)) break;
    if (!r.sync.more && r.sync.entries.length === 0) await new Promise((res) => setTimeout(res, 20));
  }
  return { ms: Number(process.hrtime.bigint() - t0) / 1e6, messages, entries, pages };
}

// The Tinode way: get data per conversation (limit = messages per conversation).
async function historyPass(c, groups, per) {
  const t0 = process.hrtime.bigint();
  let got = 0;
  await windowed(groups, 16, async (g) => {
    let count = 0;
    const r = await new Promise((resolve, reject) => {
      const id = `h${++c.n}`;
      const timer = setTimeout(() => reject(new Error('no answer to get data')), 120000);
      const onMsg = (d) => {
        const m = JSON.parse(d.toString('utf8'));
        if (m.data && m.data.topic === g) count++;
        if (m.ctrl && m.ctrl.id === id) {
          clearTimeout(timer);
          c.ws.off('message', onMsg);
          resolve(m.ctrl);
        }
      };
      c.ws.on('message', onMsg);
      c.ws.send(JSON.stringify({ get: { id, topic: g, what: 'data', data: { limit: per } } }));
    });
    if (r.code >= 300) throw new Error(`get data ${g}: ${r.code}`);
    got += count;
  });
  return { ms: Number(process.hrtime.bigint() - t0) / 1e6, messages: got };
}

const median = (v) => [...v].sort((a, b) => a - b)[Math.floor(v.length / 2)];

async function main() {
  const o = args();
  const per = Math.ceil(o.messages / o.conversations);
  const q = new Qimd(o.qimd, ['--log-level', 'warn', '--login-rate', '1000000', '--login-burst', '1000000',
    '--send-rate', '1000000', '--send-burst', '1000000', '--request-rate', '1000000', '--request-burst', '1000000']);
  await q.start();
  const url = `ws://${q.hostPort}/v0/channels?apikey=${API_KEY}`;
  const cred = (n) => Buffer.from(`${n}:bench-pass-1`).toString('base64');
  const tag = crypto.randomBytes(3).toString('hex');
  try {
    const device = `bench-reader-${tag}`;
    const reader = await connect(url, device, cred(`rd${tag}`), 'new');
    const cursor = reader.params.cursor;
    const writers = [];
    for (let i = 0; i < 10; i++) writers.push(await connect(url, null, cred(`wr${tag}${i}`), 'new'));
    const groups = [];
    for (let i = 0; i < o.conversations; i++) {
      const w = writers[i % writers.length];
      const r = await w.request('sub', { topic: `new${i}`, set: { desc: { public: { fn: `bench ${i}` } } } });
      const g = r.ctrl.topic;
      const j = await reader.request('sub', { topic: g });
      if (j.ctrl.code !== 200) throw new Error(`join: ${j.ctrl.code}`);
      groups.push({ g, w });
    }
    reader.close(); // offline from here
    const tPub = Date.now();
    const jobs = [];
    for (let k = 0; k < per; k++) for (const { g, w } of groups) jobs.push({ g, w, k });
    await windowed(jobs, 32, async ({ g, w, k }) => {
      const r = await w.request('pub', { topic: g, content: `message ${k + 1} of ${g}` });
      if (r.ctrl.code !== 202) throw new Error(`pub: ${r.ctrl.code} ${r.ctrl.text}`);
    });
    const pubMs = Date.now() - tPub;
    const total = per * groups.length;
    const back = await connect(url, device, reader.params.token);
    const warm = await syncPass(back, cursor, o.limit, total); // also waits for materialization
    const syncs = [];
    for (let i = 0; i < o.passes; i++) syncs.push(await syncPass(back, cursor, o.limit));
    for (const s of syncs) if (s.messages !== total) throw new Error(`a pass saw ${s.messages} of ${total} messages`);
    for (const { g } of groups) await back.request('sub', { topic: g }); // get data needs an attached topic (not timed)
    back.ws.setMaxListeners(64);
    const hist = [];
    for (let i = 0; i < o.passes; i++) hist.push(await historyPass(back, groups.map((x) => x.g), per));
    for (const h of hist) if (h.messages !== total) throw new Error(`history saw ${h.messages} of ${total}`);
    const sMed = median(syncs.map((s) => s.ms));
    const sBest = Math.min(...syncs.map((s) => s.ms));
    const hMed = median(hist.map((h) => h.ms));
    console.log(`sync catch-up: ${total} messages in ${groups.length} conversations (${syncs[0].entries} mailbox entries, ${syncs[0].pages} pages of <= ${o.limit})`);
    console.log(`  published in ${pubMs} ms; warm-up pass (incl. waiting for materialization) ${warm.ms.toFixed(1)} ms`);
    console.log(`  {sync}:         median ${sMed.toFixed(1)} ms, best ${sBest.toFixed(1)} ms over ${o.passes} passes (${Math.round(total / (sMed / 1000))} messages/s)`);
    console.log(`  get data x ${groups.length}: median ${hMed.toFixed(1)} ms (16 in flight)`);
    console.log(`  ratio sync/history ${(sMed / hMed).toFixed(2)}; target <= 200 ms: ${sMed <= 200 ? 'met' : 'NOT met'}`);
    console.log(`RESULT scenario=sync_catchup messages=${total} conversations=${groups.length} entries=${syncs[0].entries} pages=${syncs[0].pages} limit=${o.limit} sync_ms=${sMed.toFixed(1)} sync_best_ms=${sBest.toFixed(1)} history_ms=${hMed.toFixed(1)} ratio=${(sMed / hMed).toFixed(3)} target_ms=200 met=${sMed <= 200}`);
    back.close();
    for (const w of writers) w.close();
  } finally {
    await q.stop();
  }
}

main().catch((e) => {
  console.error(`sync_catchup: ${e.stack || e}`);
  process.exit(1);
});
