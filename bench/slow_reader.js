// slow_reader.js — what one client that stops reading costs everyone else (issue 12).
// Starts its own qimd (rate limits lifted), makes a group of --readers members plus a
// publisher, and runs the same open-loop load twice on one server: a baseline, then with
// one more member whose socket is paused (it never reads, so its output queue fills until
// qimd cuts it off). Each {data} carries its send time; every reader records send→delivery
// latency. Prints p50/p99 of both runs and the ratio (target: p99 within 2x of the
// baseline). A figure, not a test: nothing is asserted.
//   node bench/slow_reader.js [--qimd PATH] [--readers N] [--rate MSGS_PER_S] [--seconds S] [--size BYTES]
'use strict';

const path = require('node:path');
const crypto = require('node:crypto');
const WebSocket = require('../tests/e2e/node_modules/ws');
const { API_KEY, Qimd, sleep } = require('../tests/e2e/lib/harness');

function args(argv) {
  const o = { qimd: process.env.QIMD || path.join(__dirname, '..', 'build', 'src', 'qimd'), readers: 8, rate: 50, seconds: 10, size: 16000 };
  for (let i = 0; i < argv.length; i += 2) {
    const k = argv[i].replace(/^--/, '');
    if (!(k in o)) throw new Error(`unknown argument ${argv[i]}`);
    o[k] = k === 'qimd' ? argv[i + 1] : Number(argv[i + 1]);
  }
  return o;
}

class Peer {
  constructor(port) {
    this.ws = new WebSocket(`ws://127.0.0.1:${port}/v0/channels?apikey=${API_KEY}`, { perMessageDeflate: false });
    this.next = 1;
    this.waiting = new Map();
    this.lat = null; // latencies (ms) while recording
    this.ws.on('message', (d) => {
      const m = JSON.parse(d);
      if (m.ctrl && this.waiting.has(m.ctrl.id)) {
        this.waiting.get(m.ctrl.id)(m.ctrl);
        this.waiting.delete(m.ctrl.id);
      } else if (m.data && this.lat && typeof m.data.content === 'string') {
        this.lat.push(Date.now() - Number(m.data.content.split(' ')[0]));
      }
    });
    this.ws.on('error', () => {});
    this.opened = new Promise((res) => this.ws.once('open', res));
  }
  req(kind, body) {
    const id = `q${this.next++}`;
    return new Promise((res) => {
      this.waiting.set(id, res);
      this.ws.send(JSON.stringify({ [kind]: { id, ...body } }));
    });
  }
  async user(name) {
    await this.opened;
    await this.req('hi', { ver: '0.25.3' });
    const secret = Buffer.from(`${name}:bench-pass-1`).toString('base64');
    const c = await this.req('acc', { user: 'new', scheme: 'basic', secret, login: true });
    if (c.code !== 200) throw new Error(`acc ${name}: ${c.code} ${c.text}`);
  }
}

const pct = (xs, p) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length ? s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))] : NaN;
};

async function run(o, pub, readers, topic, slow) {
  for (const r of readers) r.lat = [];
  const total = o.rate * o.seconds;
  const pad = 'x'.repeat(o.size);
  const t0 = Date.now();
  const acks = [];
  for (let n = 0; n < total; n++) {
    const due = t0 + (n * 1000) / o.rate;
    if (due > Date.now()) await sleep(due - Date.now());
    acks.push(pub.req('pub', { topic, noecho: true, content: `${Date.now()} ${pad}` }));
  }
  await Promise.all(acks);
  // Let the run drain (bounded) so the next one starts from an idle server.
  const end = Date.now() + 60000;
  while (readers.some((r) => r.lat.length < total) && Date.now() < end) await sleep(50);
  const all = readers.flatMap((r) => r.lat);
  const delivered = all.length;
  const cut = slow ? slow.ws.readyState !== WebSocket.OPEN || slow.cut : null;
  return { p50: pct(all, 50), p99: pct(all, 99), delivered, expected: total * readers.length, cut };
}

async function main() {
  const o = args(process.argv.slice(2));
  const q = new Qimd(o.qimd, ['--log-level', 'warn', '--send-rate', '1000000', '--send-burst', '1000000', '--login-rate', '1000000', '--login-burst', '1000000']);
  await q.start();
  try {
    const tag = crypto.randomBytes(3).toString('hex');
    const pub = new Peer(q.port);
    await pub.user(`pub${tag}`);
    const readers = [];
    for (let i = 0; i < o.readers; i++) {
      const r = new Peer(q.port);
      await r.user(`rd${i}${tag}`);
      readers.push(r);
    }
    const groups = [];
    for (let g = 0; g < 2; g++) {
      const c = await pub.req('sub', { topic: `new${g}` });
      groups.push(c.topic);
      for (const r of readers) await r.req('sub', { topic: c.topic });
    }
    const base = await run(o, pub, readers, groups[0], null);
    const slow = new Peer(q.port);
    await slow.user(`slow${tag}`);
    await slow.req('sub', { topic: groups[1] });
    slow.ws._socket.pause(); // never reads again
    const withSlow = await run(o, pub, readers, groups[1], slow);
    slow.cut = /gateway\.slow_consumer/.test(q.stderrText());
    const f = (r) => `p50 ${r.p50} ms, p99 ${r.p99} ms, ${r.delivered}/${r.expected} delivered`;
    console.log(`slow_reader: ${o.readers} readers, ${o.rate} msgs/s of ${o.size} B for ${o.seconds} s`);
    console.log(`  baseline:          ${f(base)}`);
    console.log(`  one slow reader:   ${f(withSlow)}; slow reader cut off by qimd: ${slow.cut ? 'yes' : 'no'}`);
    console.log(`  p99 ratio: ${(withSlow.p99 / Math.max(1, base.p99)).toFixed(2)}x (target <= 2x)`);
    console.log(`RESULT slow_reader p99_base_ms=${base.p99} p99_slow_ms=${withSlow.p99} ratio=${(withSlow.p99 / Math.max(1, base.p99)).toFixed(2)} target=2`);
    for (const p of [pub, slow, ...readers]) p.ws.terminate();
  } finally {
    await q.stop();
    q.removeDir();
  }
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
