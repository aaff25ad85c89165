// presence.test.js — online/offline presence, typing notices and the per-session and
// per-address limits, against the real qimd with the real Tinode SDK and raw WebSockets:
//   - member presence in a shared group ({pres topic:grp src:usr what:on|off}) and the
//     group's activity on `me` ({pres topic:me src:grp what:on|off}), checked on the wire
//     and in the SDK's own state (subscriber(...).online, getContact(...).online);
//   - typing: {note kp} → {info what:kp} to the other member, a second kp within
//     typing_interval is not relayed (counted), and a notice to more sessions than
//     presence_fanout_max reaches that many (the rest counted);
//   - limits: requests per second per session ({ctrl 429 "too many requests"}, the
//     connection stays), connections per address (HTTP 429 before the upgrade);
//   - a 1,000-member group (accounts and membership made by tools/seed, qim-seed, with a
//     cheap password hash): every member attaches, leaves and attaches again; one observer counts the
//     member on/off frames it gets — each member ends "on" with no redundant frame, and the
//     server reports changes held back by the per-topic fan-out bound.
// The limit and large-group tests start their own qimd with tight settings (skipped with
// --server).
//   node tests/e2e/presence.test.js [--server 127.0.0.1:6060] [--only TEXT] [--verbose]
'use strict';

const assert = require('node:assert/strict');
const childProcess = require('node:child_process');
const fs = require('node:fs');
const path = require('node:path');
const WebSocket = require('ws');
const { API_KEY, Qimd, SERVICE, SERVICE_TOKEN, Suite, settle, sleep, waitUntil } = require('./lib/harness');
const { PASSWORD, groupOf, join, newUser, subscribeMe } = require('./lib/sdk');
const { httpRequest, rawOpen, refusedUpgrade } = require('./lib/raw');

const suite = new Suite('presence', {
  qimdArgs: ['--service-token', `${SERVICE}:${SERVICE_TOKEN}`, '--presence-interval', '50ms'],
});
const test = (name, fn, opts) => suite.test(name, fn, opts);

const isOnOff = (p) => p.what === 'on' || p.what === 'off';

async function stats(ctx) {
  const tok = ctx.opts.serviceToken || process.env.QIM_E2E_SERVICE_TOKEN || SERVICE_TOKEN;
  const res = await httpRequest(ctx, { path: '/v0/admin/stats', headers: { 'X-Qim-Service-Token': tok } });
  assert.equal(res.status, 200, `admin stats answers 200, got ${res.status} ${res.body}`);
  return JSON.parse(res.body);
}

function binary(env, built) {
  const p = process.env[env] || path.resolve(__dirname, '../../build', built);
  if (!fs.existsSync(p)) throw new Error(`${built} not found: set ${env} (ctest does) or build ./build first`);
  return p;
}

// A qimd of this test's own with `args`; `before(q)` runs before it starts (seeding its
// data directory). Returns a context whose clients talk to it; stopped after the test.
async function ownServer(ctx, args, before) {
  const q = new Qimd(binary('QIMD', 'src/qimd'), ['--service-token', `${SERVICE}:${SERVICE_TOKEN}`, ...args]);
  if (before) await before(q);
  await q.start();
  ctx.cleanup(async () => {
    await q.stop();
    if (process.env.QIM_E2E_KEEP !== '1') q.removeDir();
  });
  ctx.dump(() => `own qimd ${args.join(' ')}; stderr (last 30 lines):\n${q.stderrText().split('\n').slice(-30).join('\n')}`);
  return Object.assign(Object.create(Object.getPrototypeOf(ctx)), ctx, { server: q });
}

function skipWithExternalServer(ctx) {
  if (!ctx.server.external) return false;
  console.log('# skipped: needs a qimd of its own (not possible with --server)');
  return true;
}

// ---------------------------------------------------------------------------------------
// Presence between two users

test('group: a member attaching / leaving shows as pres on / off to the other, in the SDK too', async (ctx) => {
  const { name, users } = await groupOf(ctx, ['alice', 'bob'], 'Presence group');
  const [a, b] = users;
  // bob joined while alice was attached: alice heard him come online.
  await a.wait('pres', (p) => p.topic === name && p.src === b.uid && p.what === 'on', { what: "pres on for bob's join" });
  let m = a.mark();
  await b.topic(name).leave(false);
  await a.wait('pres', (p) => p.topic === name && p.src === b.uid && p.what === 'off', { since: m, what: 'pres off for bob leaving' });
  await settle();
  assert.equal(a.topic(name).subscriber(b.uid).online, false, "alice's SDK shows bob offline in the group");
  m = a.mark();
  await join(b, name);
  await a.wait('pres', (p) => p.topic === name && p.src === b.uid && p.what === 'on', { since: m, what: 'pres on for bob again' });
  await settle();
  assert.equal(a.topic(name).subscriber(b.uid).online, true, "alice's SDK shows bob online in the group");
  // bob is not told about himself; alice hears each change once.
  assert.equal(b.bodies('pres', (p) => p.src === b.uid && isOnOff(p)).length, 0, 'nobody hears their own on/off');
  const seen = a.bodies('pres', (p) => p.topic === name && p.src === b.uid && isOnOff(p)).map((p) => p.what);
  assert.deepEqual(seen, ['on', 'off', 'on'], 'alice heard on, off, on — once each');
  // Presence is ephemeral: it never comes back as history.
  assert.equal(a.bodies('data', (d) => d.topic === name).length, 0, 'no {data} was stored for presence');
});

test('me: a member not attached sees the shared group go on and off; a session reconnecting within an interval makes no frame', async (ctx) => {
  const { name, users } = await groupOf(ctx, ['alice', 'bob'], 'Me presence');
  const [a, b] = users;
  await b.topic(name).leave(false);
  // bob comes online on `me` while alice keeps the group active: the reply says so.
  const mb = b.mark();
  await subscribeMe(b);
  await b.wait('pres', (p) => p.topic === 'me' && p.src === name && p.what === 'on', { since: mb, what: 'pres me on for the active group' });
  let m = b.mark();
  await a.topic(name).leave(false);
  await b.wait('pres', (p) => p.topic === 'me' && p.src === name && p.what === 'off', { since: m, what: 'pres me off: the group went idle' });
  await settle();
  assert.equal(b.me().getContact(name).online, false, "bob's contact list shows the group offline");
  m = b.mark();
  await join(a, name);
  await b.wait('pres', (p) => p.topic === 'me' && p.src === name && p.what === 'on', { since: m, what: 'pres me on: the group is active again' });
  await settle();
  assert.equal(b.me().getContact(name).online, true, "bob's contact list shows the group online");
  // alice leaves and attaches again at once: within one 50 ms interval that is a flap and
  // bob hears nothing (the server keeps coalescing; a slow machine may split it in two).
  const before = await stats(ctx);
  m = b.mark();
  const left = a.tn.leave(name, false);
  const back = a.tn.subscribe(name);
  assert.equal((await left).code, 200, 'alice left');
  assert.equal((await back).code, 200, 'alice attached again');
  await sleep(300);
  const heard = b.bodies('pres', (p) => p.topic === 'me' && p.src === name && isOnOff(p), m).map((p) => p.what);
  assert.ok(heard.length === 0 || (heard.length === 2 && heard[1] === 'on'), `a flap is silent or off+on, got ${heard}`);
  const after = await stats(ctx);
  assert.ok(after.presence_sent >= before.presence_sent, 'the counter of presence frames is there');
});

// ---------------------------------------------------------------------------------------
// Typing

test('typing: kp reaches the other member as info kp; a second kp within typing_interval is not relayed', async (ctx) => {
  const { name, users } = await groupOf(ctx, ['alice', 'bob'], 'Typing group');
  const [a, b] = users;
  let m = b.mark();
  const ma = a.mark();
  a.topic(name).noteKeyPress();
  const info = await b.wait('info', (i) => i.topic === name && i.what === 'kp', { since: m, what: '{info kp} from alice' });
  assert.equal(info.from, a.uid, 'info.from is the typing user');
  assert.equal(info.seq, undefined, 'a kp carries no seq');
  const before = await stats(ctx);
  // The SDK throttles kp itself (3 s); the low-level call does not: the server must.
  m = b.mark();
  a.tn.noteKeyPress(name);
  await b.none('info', (i) => i.what === 'kp', { since: m, ms: 400 });
  const after = await stats(ctx);
  assert.ok(after.typing_limited > before.typing_limited, 'the dropped kp is counted as typing_limited');
  assert.equal(a.bodies('info', (i) => i.what === 'kp', ma).length, 0, 'the typing user gets no echo');
});

// ---------------------------------------------------------------------------------------
// Limits (own servers)

test('requests per second per session: beyond the burst {ctrl 429 "too many requests"}, the connection stays', async (ctx) => {
  if (skipWithExternalServer(ctx)) return;
  const s = await ownServer(ctx, ['--request-rate', '2', '--request-burst', '5']);
  const c = await rawOpen(s, 'flood');
  await c.hi();
  const m = c.mark();
  const ids = [];
  for (let i = 0; i < 10; i++) {
    const id = `g${i}`;
    ids.push(id);
    c.send({ get: { id, topic: 'me', what: 'desc' } });
  }
  const answers = [];
  for (const id of ids) answers.push(await c.wait('ctrl', (x) => x.id === id, { since: m, what: `the answer to ${id}` }));
  const limited = answers.filter((x) => x.code === 429);
  assert.ok(limited.length >= 4, `most of 10 requests beyond a burst of 5 get 429 (got ${answers.map((x) => x.code)})`);
  for (const x of limited) {
    assert.equal(x.text, 'too many requests');
    assert.equal(x.topic, 'me', 'the 429 names the request topic');
  }
  assert.ok(answers.some((x) => x.code === 401), 'requests within the burst are handled (401: not logged in)');
  // The bucket refills: the same connection is served again.
  await sleep(1200);
  const later = await c.request('get', { topic: 'me', what: 'desc' });
  assert.equal(later.code, 401, `after a pause the session is served again, got ${later.code}`);
  assert.equal(c.closeInfo, null, 'the connection stayed open');
  assert.ok((await stats(s)).rate_limited >= limited.length, 'the refusals are counted as rate_limited');
});

test('connections per address: beyond conns_per_ip the upgrade gets HTTP 429; a freed slot is usable again', async (ctx) => {
  if (skipWithExternalServer(ctx)) return;
  const s = await ownServer(ctx, ['--conns-per-ip', '3']);
  // The harness's readiness probe is a connection from this address too: until the server
  // has seen it close, it holds a slot, so the first three may wait for it.
  const openWhenFree = (label) => waitUntil(async () => {
    try {
      return await rawOpen(s, label);
    } catch (_) {
      return null;
    }
  }, 5000, `connection ${label} within the limit`);
  const open = [];
  for (let i = 0; i < 3; i++) open.push(await openWhenFree(`c${i}`));
  const res = await refusedUpgrade(s, `/v0/channels?apikey=${API_KEY}`);
  assert.equal(res.status, 429, `the 4th connection from one address is refused with 429, got ${res.status}`);
  assert.match(res.body, /429/);
  for (const c of open) await c.hi(); // the first three still work
  open[0].close();
  await open[0].closed;
  const again = await openWhenFree('again');
  await again.hi();
});

test('a notice to more sessions than presence_fanout_max reaches that many; the rest are counted', async (ctx) => {
  if (skipWithExternalServer(ctx)) return;
  const s = await ownServer(ctx, ['--presence-fanout-max', '1', '--io-threads', '1']);
  const { name, users } = await groupOf(s, ['alice', 'bob', 'carol'], 'Capped group');
  const [a, b, c] = users;
  const before = await stats(s);
  const mb = b.mark();
  const mc = c.mark();
  a.tn.noteKeyPress(name);
  await waitUntil(() => b.bodies('info', (i) => i.what === 'kp', mb).length + c.bodies('info', (i) => i.what === 'kp', mc).length, 3000, 'one info kp');
  await sleep(300);
  const got = b.bodies('info', (i) => i.what === 'kp', mb).length + c.bodies('info', (i) => i.what === 'kp', mc).length;
  assert.equal(got, 1, 'with presence_fanout_max 1 exactly one of the two others gets the kp');
  const after = await stats(s);
  assert.ok(after.fanout_capped > before.fanout_capped, 'the skipped delivery is counted as fanout_capped');
});

// ---------------------------------------------------------------------------------------
// A 1,000-member group

const MEMBERS = 1000;

// A bare member connection (no frame log: a thousand of them): request/answer by id.
class Member {
  constructor(hostPort) {
    this.ws = new WebSocket(`ws://${hostPort}/v0/channels?apikey=${API_KEY}`, { perMessageDeflate: false });
    this.waiting = new Map();
    this.n = 0;
    this.ws.on('message', (data) => {
      const msg = JSON.parse(data.toString('utf8'));
      const body = msg.ctrl;
      if (body && body.id && this.waiting.has(body.id)) {
        this.waiting.get(body.id)(body);
        this.waiting.delete(body.id);
      }
    });
  }
  open() {
    return new Promise((resolve, reject) => {
      this.ws.once('open', resolve);
      this.ws.once('error', reject);
    });
  }
  request(kind, body) {
    const id = `m${++this.n}`;
    return new Promise((resolve) => {
      this.waiting.set(id, resolve);
      this.ws.send(JSON.stringify({ [kind]: { id, ...body } }));
    });
  }
  close() {
    this.ws.terminate();
  }
}

async function inBatches(items, width, fn) {
  for (let i = 0; i < items.length; i += width) await Promise.all(items.slice(i, i + width).map(fn));
}

test(`a ${MEMBERS}-member group: each member's flapping ends as one "on" at the observer, the fan-out bound holds changes back`, async (ctx) => {
  if (skipWithExternalServer(ctx)) return;
  let accounts = [];
  let name = null;
  const s = await ownServer(
    ctx,
    ['--presence-interval', '100ms', '--presence-fanout-max', '5000', '--conns-per-ip', '0', '--login-rate', '1000000',
      '--login-burst', '1000000'],
    (q) => {
      const out = childProcess.execFileSync(binary('QIM_SEED', 'tools/qim-seed'), [
        '--data', path.join(q.dir, 'data'), '--count', String(MEMBERS), '--prefix', 'pm', '--password', PASSWORD,
        '--group', '1',
      ]);
      const lines = out.toString('utf8').trim().split('\n').map((l) => l.split(' '));
      accounts = lines.filter((l) => l[0] !== 'group');
      name = (lines.find((l) => l[0] === 'group') || [])[1];
    },
  );
  assert.equal(accounts.length, MEMBERS, 'qim-seed made the accounts');
  assert.ok(name && name.startsWith('grp'), 'qim-seed made the group');
  const secret = (login) => Buffer.from(`${login}:${PASSWORD}`).toString('base64');
  const obs = await rawOpen(s, 'observer');
  await obs.hi();
  const li = await obs.request('login', { scheme: 'basic', secret: secret(accounts[0][0]) });
  assert.equal(li.code, 200, `the seeded owner logs in (got ${li.code} ${li.text})`);
  await obs.join(name);
  const members = accounts.slice(1).map(([login, uid]) => ({ login, uid }));
  const conns = [];
  ctx.cleanup(() => conns.forEach((c) => c.close()));
  const t0 = Date.now();
  await inBatches(members, 50, async (u) => {
    const c = new Member(s.server.hostPort);
    conns.push(c);
    await c.open();
    assert.equal((await c.request('hi', { ver: '0.25.3' })).code, 201);
    const l = await c.request('login', { scheme: 'basic', secret: secret(u.login) });
    assert.equal(l.code, 200, `${u.login} logs in (got ${l.code} ${l.text})`);
    // attach, leave (detach), attach again: on, off, on within a few milliseconds.
    for (const [kind, body] of [['sub', { topic: name }], ['leave', { topic: name }], ['sub', { topic: name }]]) {
      const r = await c.request(kind, body);
      assert.equal(r.code, 200, `${u.login}: ${kind} answers 200 (got ${r.code} ${r.text})`);
    }
  });
  const joinedMs = Date.now() - t0;
  // The observer ends up with every member online.
  const last = new Map();
  let frames = 0;
  const tally = () => {
    last.clear();
    frames = 0;
    for (const p of obs.log.filter((msg) => msg.pres && msg.pres.topic === name && isOnOff(msg.pres)).map((e) => e.msg.pres)) {
      frames++;
      last.set(p.src, p.what);
    }
    return [...last.values()].filter((w) => w === 'on').length;
  };
  await waitUntil(() => tally() === MEMBERS - 1, 60000, `the observer to see all ${MEMBERS - 1} members online`);
  const st = await stats(s);
  console.log(
    `# ${MEMBERS - 1} members attached+left+attached in ${joinedMs} ms; observer got ${frames} on/off frames ` +
      `for ${3 * (MEMBERS - 1)} transitions; presence_sent=${st.presence_sent} presence_deferred=${st.presence_deferred}`,
  );
  // Coalesced: no member produced a redundant frame (two "on" in a row) ...
  const perMember = new Map();
  for (const p of obs.log.filter((msg) => msg.pres && msg.pres.topic === name && isOnOff(msg.pres)).map((e) => e.msg.pres)) {
    const prev = perMember.get(p.src);
    assert.notEqual(prev, p.what, `member ${p.src}: two "${p.what}" in a row`);
    perMember.set(p.src, p.what);
  }
  // ... and far fewer frames than transitions: flaps inside an interval or while a change
  // waits its turn vanish.
  assert.ok(frames < 2 * (MEMBERS - 1), `coalescing: ${frames} frames for ${3 * (MEMBERS - 1)} transitions`);
  // Bounded: with ~1000 sessions attached and presence_fanout_max 5000, a take passes at
  // most 5 member changes of the topic; the join storm had to wait its turn.
  assert.ok(st.presence_deferred > 0, 'member changes were held back by the fan-out bound (presence_deferred)');
  assert.equal(obs.closeInfo, null, 'the observer was never closed as a slow consumer');
}, { timeout: 110000 });

suite.run();
