// crash_load.js — crash consistency under load (issue 12). Clients publish with client
// message ids into one-to-one topics (`usr…`, each side naming the other) and groups,
// each keeping a window of unacknowledged {pub}s in flight, while qimd is killed with
// SIGKILL at random moments — each kill only once at least --min-inflight sends are
// unacknowledged — and restarted on the same data directory. Clients reconnect (token
// login) and resend every unacknowledged pub with the same cmid. At the end the driver
// drains every pending send, publishes a sentinel per topic that every member must receive
// live (so each member's mailbox lane has materialized everything before it), reads every
// topic's history with `get data` and the members' read/recv from `me`, stops qimd cleanly
// and runs the store checker (check_mailbox.c) on the facts it wrote:
//   user U / conv T U... / ack T SEQ CMID SENDER / hist T SEQ CMID / rr U T READ RECV PHASE
// where T is a group's `grp…` name, or `p2p-USR-USR` (the two users in sorted order) for a
// one-to-one conversation, whose wire name differs on each side.
// The checker verifies what needs the mailboxes; this file verifies the acks (one seq per
// cmid, stable across retries) and the history it read.
//
// node crash_load.js --qimd PATH --checker PATH [--kills N] [--clients N] [--window N] [--memory]
//                    [--min-inflight N] [--seed N] [--keep]
'use strict';

const assert = require('node:assert/strict');
const childProcess = require('node:child_process');
const crypto = require('node:crypto');
const fs = require('node:fs');
const path = require('node:path');
const WebSocket = require('../e2e/node_modules/ws');
const { API_KEY, Qimd, sleep, withTimeout } = require('../e2e/lib/harness');

function parse(argv) {
  const o = { kills: 5, clients: 12, window: 30, minInflight: 300, seed: Date.now() % 1e9, keep: false };
  for (let i = 0; i < argv.length; i++) {
    const v = () => argv[++i];
    const a = argv[i];
    if (a === '--qimd') o.qimd = v();
    else if (a === '--checker') o.checker = v();
    else if (a === '--kills') o.kills = Number(v());
    else if (a === '--clients') o.clients = Number(v());
    else if (a === '--window') o.window = Number(v());
    else if (a === '--min-inflight') o.minInflight = Number(v());
    else if (a === '--seed') o.seed = Number(v());
    else if (a === '--keep') o.keep = true;
    else if (a === '--memory') o.memory = true;
    else throw new Error(`unknown argument ${a}`);
  }
  o.qimd = o.qimd || process.env.QIMD;
  if (!o.qimd || !o.checker) throw new Error('--qimd and --checker are required');
  if (o.clients < 4 || o.clients % 2) throw new Error('--clients must be even and at least 4');
  return o;
}

// A small deterministic generator so a failing --seed can be replayed.
function rng(seed) {
  let x = seed >>> 0 || 1;
  return () => {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    return (x >>> 0) / 4294967296;
  };
}

const facts = []; // lines for the checker
const PASSWORD = 'crash-pass-1';

// One user's connection, reconnected after every kill. Sends are {cmid, topic}; `pending`
// holds the unsent and the unacknowledged (resent in their original order).
class Client {
  constructor(n, login, window) {
    this.n = n;
    this.login = login;
    this.window = window;
    this.topics = [];
    this.factName = new Map(); // topic as this client names it → its name in the facts
    this.pending = [];
    this.inflight = new Map(); // request id → send
    this.reqs = new Map(); // request id → resolve(ctrl) for setup requests
    this.nextId = 1;
    this.generate = true;
    this.rr = new Map(); // topic → highest read the client asked for
    this.acked = 0;
    this.live = new Map(); // topic → seqs received as {data}
    this.ws = null;
    this.ready = false;
    this.errors = [];
  }

  open(port) {
    this.ready = false;
    this.ws = new WebSocket(`ws://127.0.0.1:${port}/v0/channels?apikey=${API_KEY}`, { perMessageDeflate: false });
    const ws = this.ws;
    ws.on('message', (d) => this.onFrame(JSON.parse(d.toString('utf8'))));
    ws.on('error', () => {});
    this.closed = new Promise((resolve) => ws.on('close', resolve));
    ws.on('close', () => this.onClose());
    return withTimeout(new Promise((res, rej) => (ws.once('open', res), ws.once('error', rej))), 10000, `client ${this.n} open`);
  }

  onClose() {
    this.ready = false;
    // Unacknowledged sends go back to the front, in the order they were first sent.
    const back = [...this.inflight.values()];
    this.inflight.clear();
    this.pending.unshift(...back);
    for (const r of this.reqs.values()) r(null);
    this.reqs.clear();
  }

  request(kind, body) {
    const id = `r${this.nextId++}`;
    return new Promise((resolve) => {
      this.reqs.set(id, resolve);
      this.ws.send(JSON.stringify({ [kind]: { id, ...body } }));
    });
  }

  async must(kind, body, codes) {
    const ctrl = await withTimeout(this.request(kind, body), 15000, `client ${this.n}: ${kind}`);
    if (!ctrl || !codes.includes(ctrl.code)) throw new Error(`client ${this.n}: ${kind} ${JSON.stringify(body)} → ${JSON.stringify(ctrl)}`);
    return ctrl;
  }

  onFrame(m) {
    if (m.ctrl && m.ctrl.id) {
      const id = m.ctrl.id;
      if (this.reqs.has(id)) {
        const r = this.reqs.get(id);
        this.reqs.delete(id);
        return r(m.ctrl);
      }
      const s = this.inflight.get(id);
      if (s) {
        this.inflight.delete(id);
        this.onAck(s, m.ctrl);
        this.pump();
      }
      return;
    }
    if (m.meta && m.meta.id && this.reqs.has(m.meta.id)) {
      const r = this.reqs.get(m.meta.id);
      this.reqs.delete(m.meta.id);
      return r({ code: 200, meta: m.meta });
    }
    if (m.data) {
      if (this.pageSink && m.data.topic === this.pageSink.topic) this.pageSink.rows.push(m.data);
      else {
        if (!this.live.has(m.data.topic)) this.live.set(m.data.topic, new Set());
        this.live.get(m.data.topic).add(m.data.seq);
      }
    }
  }

  onAck(s, ctrl) {
    if (ctrl.code === 202 && ctrl.params && Number.isInteger(ctrl.params.seq)) {
      if (s.seq !== undefined && s.seq !== ctrl.params.seq)
        this.errors.push(`cmid ${s.cmid} acknowledged with seq ${s.seq} and again with ${ctrl.params.seq}`);
      s.seq = ctrl.params.seq;
      facts.push(`ack ${this.factName.get(s.topic)} ${s.seq} ${s.cmid} ${this.uid}`);
      this.acked++;
      // Now and then a read receipt for what was just acknowledged (forward-only).
      if (this.acked % 16 === 0 && s.seq > (this.rr.get(s.topic) || 0)) {
        this.rr.set(s.topic, s.seq);
        this.ws.send(JSON.stringify({ note: { topic: s.topic, what: 'read', seq: s.seq } }));
      }
      return;
    }
    if (ctrl.code === 503 || ctrl.code >= 500) {
      this.pending.unshift(s); // queue full or the server is failing: send it again later
      return;
    }
    this.errors.push(`pub ${s.cmid} to ${s.topic}: ${ctrl.code} ${ctrl.text}`);
  }

  newSend() {
    const cmid = crypto.randomBytes(16).toString('base64url');
    const topic = this.topics[this.nextSend++ % this.topics.length];
    return { cmid, topic };
  }

  pump() {
    if (!this.ready) return;
    while (this.inflight.size < this.window) {
      if (!this.pending.length) {
        if (!this.generate) return;
        this.pending.push(this.newSend());
      }
      const s = this.pending.shift();
      const id = `p${this.nextId++}`;
      this.inflight.set(id, s);
      this.ws.send(JSON.stringify({ pub: { id, topic: s.topic, noecho: true, cmid: s.cmid, content: `crash ${s.cmid}` } }));
    }
  }

  // Connect, hi, token login, read/recv from `me`, attach every topic, then publish.
  async connect(port, phase) {
    await this.open(port);
    await this.must('hi', { ver: '0.25.3', ua: 'qim-crash' }, [201]);
    await this.must('login', { scheme: 'token', secret: this.token }, [200]);
    await this.observe(phase);
    for (const t of this.topics) await this.must('sub', { topic: t }, [200]);
    this.ready = true;
    this.nextSend = this.nextSend || this.n;
    this.pump();
  }

  // Records the read/recv positions `me` lists (the checker wants them never to go back).
  async observe(phase) {
    await this.must('sub', { topic: 'me' }, [200]);
    const r = await this.must('get', { topic: 'me', what: 'sub' }, [200, 204]);
    for (const sub of (r.meta && r.meta.sub) || []) {
      if (this.topics.includes(sub.topic))
        facts.push(`rr ${this.uid} ${this.factName.get(sub.topic)} ${sub.read || 0} ${sub.recv || 0} ${phase}`);
    }
    await this.must('leave', { topic: 'me' }, [200]);
  }
}

async function setup(o, clients, port) {
  const tag = crypto.randomBytes(3).toString('hex');
  for (const c of clients) {
    await c.open(port);
    await c.must('hi', { ver: '0.25.3', ua: 'qim-crash' }, [201]);
    const secret = Buffer.from(`${c.login}${tag}:${PASSWORD}`).toString('base64');
    const ctrl = await c.must('acc', { user: 'new', scheme: 'basic', secret, login: true, desc: { public: { fn: c.login } } }, [200]);
    c.uid = ctrl.params.user;
    c.token = ctrl.params.token;
    facts.push(`user ${c.uid}`);
  }
  // One-to-one pairs (the first {sub} of a pair creates its conversation), and two groups:
  // the first half, and everyone. `topics` maps each member to its own name of the topic.
  const groups = [];
  for (let i = 0; i < clients.length; i += 2) {
    const members = [clients[i], clients[i + 1]];
    const topics = new Map(members.map((m, k) => [m, members[1 - k].uid]));
    const name = `p2p-${members.map((m) => m.uid).sort().join('-')}`;
    for (const m of members) await m.must('sub', { topic: topics.get(m) }, [200]);
    groups.push({ name, members, topics });
  }
  for (const members of [clients.slice(0, clients.length / 2), clients.slice()]) {
    const owner = members[0];
    const ctrl = await owner.must('sub', { topic: `new${owner.nextId}`, set: { desc: { public: { fn: 'crash' } } } }, [200]);
    for (const m of members.slice(1)) await m.must('sub', { topic: ctrl.topic }, [200]);
    groups.push({ name: ctrl.topic, members, topics: new Map(members.map((m) => [m, ctrl.topic])) });
  }
  for (const { name, members, topics } of groups) {
    for (const m of members) {
      m.topics.push(topics.get(m));
      m.factName.set(topics.get(m), name);
    }
    facts.push(`conv ${name} ${members.map((m) => m.uid).join(' ')}`);
  }
  for (const c of clients) {
    c.ws.terminate();
    await c.closed;
  }
  return groups;
}

const inflight = (clients) => clients.reduce((n, c) => n + c.inflight.size, 0);

async function waitFor(pred, ms, what) {
  const end = Date.now() + ms;
  while (!pred()) {
    if (Date.now() > end) throw new Error(`timed out after ${ms} ms: ${what}`);
    await sleep(5);
  }
}

async function connectAll(clients, port, phase) {
  await Promise.all(clients.map((c) => c.connect(port, phase)));
}

// One kill cycle: run until a random moment with at least min-inflight sends unacknowledged,
// then SIGKILL. Returns what was in flight.
async function killCycle(o, q, clients, rand, k) {
  await connectAll(clients, q.port, `k${k}`);
  const acked = () => clients.reduce((n, c) => n + c.acked, 0);
  const ackedBefore = acked();
  // Some progress first (retries of the last cycle included), then a random moment.
  await waitFor(() => acked() - ackedBefore >= o.window, 30000, 'progress after the restart');
  await sleep(Math.floor(rand() * 600));
  await waitFor(() => inflight(clients) >= o.minInflight, 20000, `${o.minInflight} sends in flight`);
  const n = inflight(clients);
  q.proc.kill('SIGKILL'); // synchronous: the count above is what qimd had when it died
  const exit = await q.exited;
  assert.equal(exit.signal, 'SIGKILL', `qimd died before the kill (${JSON.stringify(exit)})`);
  await Promise.all(clients.map((c) => c.closed));
  console.log(`# kill ${k + 1}: ${n} sends in flight, ${acked() - ackedBefore} acknowledged in this cycle`);
  return n;
}

// Reads a topic's whole history, newest first, page by page.
async function history(c, topic) {
  const rows = [];
  let before = 0;
  for (;;) {
    c.pageSink = { topic, rows: [] };
    const data = before ? { before, limit: 100 } : { limit: 100 };
    const ctrl = await c.must('get', { topic, what: 'data', data }, [200, 204, 208]);
    const page = c.pageSink.rows;
    c.pageSink = null;
    if (ctrl.code === 204 || !page.length) break;
    rows.push(...page);
    before = Math.min(...page.map((d) => d.seq));
    if (before <= 1) break;
  }
  return rows;
}

async function finalPhase(o, q, clients, groups) {
  for (const c of clients) c.generate = false;
  await connectAll(clients, q.port, 'final');
  await waitFor(() => clients.every((c) => !c.pending.length && !c.inflight.size), 60000, 'every send acknowledged');
  // Sentinels: every member must receive it live, so its mailbox lane is complete up to it.
  for (const { name, members, topics } of groups) {
    const cmid = crypto.randomBytes(16).toString('base64url');
    const ctrl = await members[0].must('pub', { topic: topics.get(members[0]), cmid, content: `crash ${cmid}` }, [202]);
    facts.push(`ack ${name} ${ctrl.params.seq} ${cmid} ${members[0].uid}`);
    const got = (m) => m.live.get(topics.get(m)) && m.live.get(topics.get(m)).has(ctrl.params.seq);
    await waitFor(() => members.every(got), 30000, `the sentinel of ${name} reaching every member`);
  }
  const seen = new Set();
  for (const { name, members, topics } of groups) {
    const reader = members[members.length - 1];
    const rows = await history(reader, topics.get(reader));
    for (const d of rows) {
      const cmid = typeof d.content === 'string' && d.content.startsWith('crash ') ? d.content.slice(6) : '-';
      facts.push(`hist ${name} ${d.seq} ${cmid}`);
      const key = `${name} ${d.seq}`;
      assert.ok(!seen.has(key), `history of ${name} lists seq ${d.seq} twice`);
      seen.add(key);
    }
  }
  for (const c of clients) await c.observe('end');
  for (const c of clients) c.ws.terminate();
  await Promise.all(clients.map((c) => c.closed));
}

async function main() {
  const o = parse(process.argv.slice(2));
  const rand = rng(o.seed);
  console.log(`# seed ${o.seed}: ${o.kills} kills, ${o.clients} clients, window ${o.window}`);
  // Rate limits protect the server from clients; they are not what this test is about.
  const lifted = ['--send-rate', '1000000', '--send-burst', '1000000', '--login-rate', '1000000', '--login-burst', '1000000',
    '--request-rate', '1000000', '--request-burst', '1000000'];
  // Two shards of two lanes (a new store gets one of one): the kills then land between
  // dispatches of one message to several shards and lanes, which the checker must see whole.
  const q = new Qimd(o.qimd, [...lifted, '--shard-count', '2', '--lanes-per-shard', '2']);
  // --memory: the store in memory mode (the database in a tmpfs directory, a journal on the
  // disk); every restart after a kill finds that directory emptied, as after a power loss.
  const memdir = o.memory ? fs.mkdtempSync('/dev/shm/qim-crash-') : null;
  // A snapshot every 512 KiB of journal: page sets and folds happen between the kills too.
  const storeUrl = `sqlite:${path.join(q.dir, 'data', 'qim.db')}` + (memdir ? `?memory=${memdir}&snapshot_kb=512` : '');
  if (memdir) q.extraArgs.push('--store', storeUrl);
  const emptyMemory = () => {
    for (const f of memdir ? fs.readdirSync(memdir) : []) fs.rmSync(path.join(memdir, f), { force: true });
  };
  const clients = Array.from({ length: o.clients }, (_, i) => new Client(i, `crash${i}`, o.window));
  let ok = false;
  try {
    await q.start();
    const groups = await setup(o, clients, q.port);
    const counts = [];
    // Each incarnation logs to its own file: the harness takes an `event=server.ready`
    // line in qimd.stderr as a sign that this start got that far.
    const restart = async (k) => {
      fs.renameSync(q.stderrPath, `${q.stderrPath}.${k}`);
      emptyMemory();
      await q.start();
    };
    for (let k = 0; k < o.kills; k++) {
      if (k > 0) await restart(k);
      counts.push(await killCycle(o, q, clients, rand, k));
    }
    await restart(o.kills);
    await finalPhase(o, q, clients, groups);
    const exit = await q.stop();
    assert.equal(exit.code, 0, `qimd's clean stop: ${JSON.stringify(exit)}`);
    const errors = clients.flatMap((c) => c.errors);
    assert.deepEqual(errors, [], 'the clients saw no wrong answer');
    const factsPath = path.join(q.dir, 'facts.txt');
    fs.writeFileSync(factsPath, facts.join('\n') + '\n');
    emptyMemory();
    const r = childProcess.spawnSync(o.checker, ['--store', storeUrl, '--facts', factsPath], { encoding: 'utf8' });
    process.stdout.write(r.stdout);
    process.stderr.write(r.stderr);
    assert.equal(r.status, 0, 'the store checker found no violation');
    const acks = facts.filter((f) => f.startsWith('ack ')).length;
    console.log(`ok - ${o.kills} SIGKILLs survived (in flight at each: ${counts.join(' ')}), ${acks} acknowledged messages checked`);
    ok = true;
  } catch (err) {
    console.log(`not ok - ${err.stack || err}`);
    console.log(`# qimd stderr (tail):\n${q.stderrText().split('\n').slice(-30).join('\n')}`);
  } finally {
    for (const c of clients) if (c.ws) c.ws.terminate();
    if (q.proc && !q.exit) await q.stop(2000);
    if (memdir) fs.rmSync(memdir, { recursive: true, force: true });
    if (ok && !o.keep) q.removeDir();
    else console.log(`# data kept in ${q.dir}`);
  }
  process.exit(ok ? 0 : 1);
}

main();
