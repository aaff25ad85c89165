// access_matrix.test.js — the access-control matrix of issue 12 over raw WebSocket frames:
// every operation (sub, pub, get data/sub/desc/del, set, del msg soft/hard/recall, note
// kp/read/recv, leave, {sync}) by every role (owner, admin, member, guest, banned,
// non-member, former member who left, former member evicted, a user of another tenant,
// an anonymous session, a session whose token was revoked by a password change, a session
// whose token expired) on one group. The table below is data: one row per (role, op) with the expected answer; the
// cases are generated from it and a summary of the rows covered is printed.
//
// While the matrix runs, the owner publishes, deletes and notes in the group; every client
// that may not see the group is checked to have received nothing about it: no {data},
// {pres}, {info} or {meta} naming it, no {sync} entry for it, no published text anywhere
// (only the {ctrl} answers to its own requests may name the topic).
//
// P2P: a third user cannot reach the one-to-one topic of two others: naming the peer gives
// its own conversation (empty of theirs) and the internal `p2p…` names are refused.
//
// The expired token: token_lifetime cannot go below a minute, so the test signs a copy of a
// real token with an expiry in the past using the server's own key (derived from
// <data>/secret.key as src/server/node.c and src/gateway/auth.c do); the same copy with a
// future expiry must log in, so the refusal is for the expiry alone. It needs the qimd the
// harness started (not --server).
//   node tests/e2e/access_matrix.test.js [--only TEXT] [--verbose]
'use strict';

const assert = require('node:assert/strict');
const crypto = require('node:crypto');
const fs = require('node:fs');
const path = require('node:path');
const { API_KEY, Suite } = require('./lib/harness');
const { PASSWORD, rawOpen } = require('./lib/raw');

// A second tenant: the same server, another API key (docs/gateway-transport.md).
const OTHER_KEY = 'matrix-other-tenant-key';

const suite = new Suite('access_matrix', { qimdArgs: ['--api-key', `${API_KEY}:1`, '--api-key', `${OTHER_KEY}:2`] });
const test = (name, fn, opts) => suite.test(name, fn, opts);

// Texts every published message carries; none may reach a client outside the group.
const SECRET = `matrix-secret-${crypto.randomBytes(4).toString('hex')}`;

// Expected answers: a ctrl code, 'meta' (a {meta} answer), 'sync' (a {sync} page),
// 'silent' (a note: no answer at all, and the owner sees no {info} from it), 'info' (a note
// the owner's session sees as {info} from that user).
const ROLES = ['owner', 'admin', 'member', 'guest', 'banned', 'nonmember', 'left', 'evicted', 'tenant', 'anon', 'revoked',
  'expired'];
const MEMBERS = ['owner', 'admin', 'member', 'guest'];
// Roles that may not see the group: their frames are checked for leaks.
const OUTSIDERS = ['banned', 'nonmember', 'left', 'evicted', 'tenant', 'anon', 'revoked', 'expired'];

// The ops in the order each role runs them. Members attach first ('sub'); outsiders try
// every op detached, then 'sub' last (a non-member or former member then joins by the
// group's default access JRWPS, as Tinode's defacs.auth allows; the leak check ends there).
// Receipts come before pub: a user's own message counts as read and received by it.
const OPS = ['get desc', 'get sub', 'get data', 'get del', 'note kp', 'note recv', 'note read', 'pub', 'set public',
  'set private', 'del soft', 'del hard', 'del recall', 'sync', 'leave'];

// prettier-ignore
const TABLE = [
  // role,      op,            expected
  ['owner',     'sub',         200],
  ['owner',     'get desc',    'meta'],
  ['owner',     'get sub',     'meta'],
  ['owner',     'get data',    208],
  ['owner',     'get del',     'meta'],
  ['owner',     'pub',         202],
  ['owner',     'set public',  200],
  ['owner',     'set private', 200],
  ['owner',     'note kp',     'info'],
  // The owner published every message it has seen: they count as read and received by
  // it (as in Tinode), so these receipts are stale and notify nobody.
  ['owner',     'note read',   'silent'],
  ['owner',     'note recv',   'silent'],
  ['owner',     'del soft',    200],
  ['owner',     'del hard',    200],
  ['owner',     'del recall',  200],
  ['owner',     'sync',        'sync'],
  ['owner',     'leave',       200],

  ['admin',     'sub',         200],
  ['admin',     'get desc',    'meta'],
  ['admin',     'get sub',     'meta'],
  ['admin',     'get data',    208],
  ['admin',     'get del',     'meta'],
  ['admin',     'pub',         202],
  ['admin',     'set public',  200],
  ['admin',     'set private', 200],
  ['admin',     'note kp',     'info'],
  ['admin',     'note read',   'info'],
  ['admin',     'note recv',   'info'],
  ['admin',     'del soft',    200],
  ['admin',     'del hard',    200],
  ['admin',     'del recall',  200],
  ['admin',     'sync',        'sync'],
  ['admin',     'leave',       200],

  ['member',    'sub',         200],
  ['member',    'get desc',    'meta'],
  ['member',    'get sub',     'meta'],
  ['member',    'get data',    208],
  ['member',    'get del',     'meta'],
  ['member',    'pub',         202],
  ['member',    'set public',  403],
  ['member',    'set private', 200],
  ['member',    'note kp',     'info'],
  ['member',    'note read',   'info'],
  ['member',    'note recv',   'info'],
  ['member',    'del soft',    200],
  ['member',    'del hard',    200], // no D: hidden for the member only (docs/history.md)
  ['member',    'del recall',  200],
  ['member',    'sync',        'sync'],
  ['member',    'leave',       200],

  ['guest',     'sub',         200],
  ['guest',     'get desc',    'meta'],
  ['guest',     'get sub',     'meta'],
  ['guest',     'get data',    208],
  ['guest',     'get del',     'meta'],
  ['guest',     'pub',         403],
  ['guest',     'set public',  403],
  ['guest',     'set private', 200],
  ['guest',     'note kp',     'silent'], // no W: typing is not announced
  ['guest',     'note read',   'info'],
  ['guest',     'note recv',   'info'],
  ['guest',     'del soft',    200],
  ['guest',     'del hard',    200], // hidden for the guest only
  ['guest',     'del recall',  200], // the guest has no message of its own: hidden for it only
  ['guest',     'sync',        'sync'],
  ['guest',     'leave',       200],
];

// Outsiders: the same answers whatever the reason they are outside, except sub, the
// login-less ones (401) and the other tenant (the group does not exist there: 404).
for (const role of ['banned', 'nonmember', 'left', 'evicted']) {
  TABLE.push(
    [role, 'get desc', 403], [role, 'get sub', 403], [role, 'get data', 403], [role, 'get del', 403],
    [role, 'pub', 409], [role, 'set public', 409], [role, 'set private', 409],
    // A note on a topic the session has not attached: 409 without an id (Tinode's), except
    // recv, which Tinode accepts detached; it must notify nobody (docs/gateway.md "Notes").
    [role, 'note kp', 409], [role, 'note read', 409], [role, 'note recv', 'silent'],
    [role, 'del soft', 409], [role, 'del hard', 409], [role, 'del recall', 409],
    [role, 'sync', 'sync'], [role, 'leave', 304],
    [role, 'sub', role === 'banned' ? 403 : 200],
  );
}
TABLE.push(
  // get data/del check the attachment first (403 "not attached", as for a non-member),
  // desc/sub look the group up (404): neither tells tenant 2 anything about tenant 1.
  ['tenant', 'get desc', 404], ['tenant', 'get sub', 404], ['tenant', 'get data', 403], ['tenant', 'get del', 403],
  ['tenant', 'pub', 409], ['tenant', 'set public', 409], ['tenant', 'set private', 409],
  ['tenant', 'note kp', 409], ['tenant', 'note read', 409], ['tenant', 'note recv', 'silent'],
  ['tenant', 'del soft', 409], ['tenant', 'del hard', 409], ['tenant', 'del recall', 409],
  ['tenant', 'sync', 'sync'], ['tenant', 'leave', 304], ['tenant', 'sub', 404],
);
for (const role of ['anon', 'revoked', 'expired']) {
  for (const op of [...OPS, 'sub']) TABLE.push([role, op, op.startsWith('note') ? 'silent' : 401]);
}

// ---------------------------------------------------------------------------------------

// A session with a qim device id (so {sync} answers), logged in or not.
async function session(ctx, label, { apikey, token, create } = {}) {
  const c = await rawOpen(ctx, label, apikey ? { apikey } : {});
  const hi = await c.request('hi', { ver: '0.25.3', ua: 'qim-e2e matrix', device: `${label}-${crypto.randomUUID()}` });
  assert.equal(hi.code, 201);
  if (create) {
    await c.account(label.replace(/[^a-z]/gi, '').slice(0, 6));
  } else if (token) {
    const ctrl = await c.request('login', { scheme: 'token', secret: token });
    c.loginCode = ctrl.code;
    if (ctrl.code === 200) c.uid = ctrl.params.user;
  }
  return c;
}

async function ok(c, kind, body, code = 200) {
  const ctrl = await c.request(kind, body, { ctrlOnly: true });
  assert.equal(ctrl.code, code, `${c.label}: {${kind}} ${JSON.stringify(body)} answers ${code} (got ${ctrl.code} ${ctrl.text})`);
  return ctrl;
}

// Sends one request and classifies its answer: the ctrl code, or 'meta' / 'sync'.
async function answer(c, kind, body) {
  const id = c.id();
  const m = c.mark();
  c.send({ [kind]: { id, ...body } });
  const e = await c.log.wait((msg) => ['ctrl', 'meta', 'sync'].some((k) => msg[k] && msg[k].id === id), {
    since: m,
    what: `the answer to {${kind}} ${id}`,
  });
  if (e.msg.ctrl) return { got: e.msg.ctrl.code, frame: e.msg.ctrl };
  return { got: e.msg.meta ? 'meta' : 'sync', frame: e.msg.meta || e.msg.sync };
}

// A copy of `token` (standard base64, 81 bytes: version, tenant, user, epoch, expires_ms,
// HMAC-SHA256) expiring at `expiresMs`, signed with the key qimd derives from its secret.
function resign(ctx, token, expiresMs) {
  assert.ok(!ctx.server.external, 'the expired-token row signs with the key of the qimd the harness started');
  const secret = fs.readFileSync(path.join(ctx.server.dir, 'data', 'secret.key'));
  const domain = Buffer.from('qim.token.v1\0');
  const key = crypto.createHmac('sha256', secret).update(domain).digest();
  const raw = Buffer.from(token, 'base64');
  assert.equal(raw.length, 81, 'a qim token is 81 bytes');
  raw.writeBigUInt64BE(BigInt(expiresMs), 41);
  crypto.createHmac('sha256', key).update(domain).update(raw.subarray(0, 49)).digest().copy(raw, 49);
  return raw.toString('base64');
}

// Runs one op of the table for client c on group grp; returns what it observed.
async function runOp(env, c, op) {
  const { grp } = env;
  const lastSeq = () => env.seqs[env.seqs.length - 1];
  switch (op) {
    case 'sub':
      return answer(c, 'sub', { topic: grp });
    case 'get desc':
    case 'get sub':
    case 'get del':
      return answer(c, 'get', { topic: grp, what: op.slice(4) });
    case 'get data':
      return answer(c, 'get', { topic: grp, what: 'data' });
    case 'pub': {
      const r = await answer(c, 'pub', { topic: grp, content: `${SECRET} from ${c.label}` });
      if (r.got === 202) c.ownSeq = r.frame.params.seq;
      return r;
    }
    case 'set public':
      return answer(c, 'set', { topic: grp, desc: { public: { fn: `renamed by ${c.label}` } } });
    case 'set private':
      return answer(c, 'set', { topic: grp, desc: { private: { note: `${c.label} private` } } });
    case 'note kp':
    case 'note read':
    case 'note recv': {
      const what = op.slice(5);
      const m = env.watch.mark();
      const mc = c.mark();
      // A receipt names a seq the session has seen (the session drops one beyond that).
      const seen = Math.max(env.seqs[0], ...c.log.filter((x) => x.data && x.data.topic === grp).map((e) => e.msg.data.seq));
      c.send({ note: what === 'kp' ? { topic: grp, what } : { topic: grp, what, seq: seen } });
      const fromC = (msg) => msg.info && msg.info.topic === grp && msg.info.what === what && c.uid && msg.info.from === c.uid;
      try {
        await env.watch.log.wait(fromC, { since: m, timeout: 400, what: `{info ${what}} from ${c.label}` });
        return { got: 'info' };
      } catch (_) {
        // No {info}: then nothing at all may have answered the note either.
        const ctrls = c.log.filter((msg) => msg.ctrl && msg.ctrl.topic === grp && !msg.ctrl.id, mc);
        return { got: ctrls.length ? ctrls[0].msg.ctrl.code : 'silent' };
      }
    }
    case 'del soft':
    case 'del hard':
    case 'del recall': {
      // soft and hard on an owner's message; recall on the role's own message when it has one.
      const seq = op === 'del recall' && c.ownSeq ? c.ownSeq : op === 'del soft' ? env.seqs[0] : lastSeq();
      return answer(c, 'del', { topic: grp, what: 'msg', hard: op !== 'del soft', delseq: [{ low: seq }] });
    }
    case 'sync':
      return answer(c, 'sync', c.cursor ? { cursor: c.cursor } : {});
    case 'leave':
      return answer(c, 'leave', { topic: grp });
    default:
      throw new Error(`no op ${op}`);
  }
}

// Everything an outsider received since `mark` that names the group or carries a
// published text, apart from the {ctrl} answers to its own requests.
function leaks(c, grp, mark, end) {
  const out = [];
  for (const e of c.log.since(mark).slice(0, end - mark)) {
    if (e.raw.includes(SECRET)) out.push(e.raw);
    else if (!e.msg) continue;
    // Answers to its own requests, and the id-less refusals of its notes (409), may name
    // the topic it named; nothing else about the group.
    else if (e.msg.ctrl && (e.msg.ctrl.id || e.msg.ctrl.code >= 400) && !JSON.stringify(e.msg.ctrl.params || {}).includes(grp)) continue;
    else if (e.msg.sync) {
      if ((e.msg.sync.entries || []).some((x) => JSON.stringify(x).includes(grp))) out.push(e.raw);
    } else if (e.raw.includes(grp)) out.push(e.raw);
  }
  return out;
}

// Drains a device's mailbox to its end and keeps the cursor: a former member's own past
// in the group is behind it, so anything about the group after it is a leak.
async function syncToEnd(c) {
  let cursor;
  for (let i = 0; i < 50; i++) {
    const r = await answer(c, 'sync', cursor ? { cursor, limit: 100 } : { limit: 100 });
    assert.equal(r.got, 'sync', `${c.label}: {sync} answers a page`);
    cursor = r.frame.cursor;
    if (!r.frame.more) break;
  }
  c.cursor = cursor;
}

test('access matrix: every op by every role on a group answers by the access modes, and nothing leaks', async (ctx) => {
  // Accounts (argon2id: one at a time is fine for a dozen).
  const owner = await session(ctx, 'owner', { create: true });
  const grp = await owner.createGroup('matrix group');
  const watch = await session(ctx, 'watch', { token: owner.token });
  await ok(watch, 'sub', { topic: grp });
  const env = { grp, watch, seqs: [] };
  const pubOwner = async (n) => {
    for (let i = 0; i < n; i++) env.seqs.push((await ok(owner, 'pub', { topic: grp, content: `${SECRET} owner ${i}` }, 202)).params.seq);
  };

  const c = { owner: await session(ctx, 'owner-s', { token: owner.token }) };
  c.owner.uid = owner.uid;
  const modes = { admin: 'JRWPAS', member: 'JRWPS', guest: 'JR', banned: 'JRWPS', left: 'JRWPS', evicted: 'JRWPS' };
  for (const role of ['admin', 'member', 'guest', 'banned', 'nonmember', 'left', 'evicted']) c[role] = await session(ctx, role, { create: true });
  for (const [role, mode] of Object.entries(modes)) await ok(owner, 'set', { topic: grp, sub: { user: c[role].uid, mode } });
  await pubOwner(3);
  // The future outsiders were members for a while and saw the group.
  for (const role of ['banned', 'left', 'evicted']) {
    await ok(c[role], 'sub', { topic: grp });
    await c[role].getData(grp);
  }
  await ok(c.left, 'leave', { topic: grp, unsub: true });
  await ok(owner, 'del', { topic: grp, what: 'sub', user: c.evicted.uid });
  await ok(owner, 'set', { topic: grp, sub: { user: c.banned.uid, mode: 'N' } });
  for (const role of ['banned', 'evicted']) await c[role].wait('ctrl', (x) => x.code === 205 && x.topic === grp);
  // Another tenant: its own account, its own (empty) group namespace.
  c.tenant = await session(ctx, 'tenant', { apikey: OTHER_KEY, create: true });
  c.anon = await session(ctx, 'anon');
  // Revoked: a token from before a password change on another session.
  const rev = await session(ctx, 'revsrc', { create: true });
  await ok(rev, 'acc', { user: rev.uid, scheme: 'basic', secret: Buffer.from(`${rev.login}:${PASSWORD}-new`).toString('base64') });
  c.revoked = await session(ctx, 'revoked', { token: rev.token });
  assert.equal(c.revoked.loginCode, 401, 'a token made before a password change is refused');
  const exp = await session(ctx, 'expsrc', { create: true });
  const fresh = await session(ctx, 'expctl', { token: resign(ctx, exp.token, Date.now() + 3600e3) });
  assert.equal(fresh.loginCode, 200, 'the re-signed token with a future expiry logs in (the signing is right)');
  c.expired = await session(ctx, 'expired', { token: resign(ctx, exp.token, Date.now() - 1000) });
  assert.equal(c.expired.loginCode, 401, 'an expired token is refused');
  for (const role of ['banned', 'nonmember', 'left', 'evicted', 'tenant', 'member', 'guest', 'admin', 'owner']) await syncToEnd(c[role]);
  // Logged-in outsiders also listen on `me`, where a member would get {pres what:"msg"}.
  for (const role of ['banned', 'nonmember', 'left', 'evicted', 'tenant']) await ok(c[role], 'sub', { topic: 'me' });

  // A hard delete everybody's {get del} shows.
  await ok(owner, 'del', { topic: grp, what: 'msg', hard: true, delseq: [{ low: env.seqs[1] }] });
  env.seqs.splice(1, 1);

  const rows = new Map(TABLE.map(([role, op, want]) => [`${role}|${op}`, want]));
  const results = [];
  const leakEnd = {};
  const runRole = async (role) => {
    const order = MEMBERS.includes(role) ? ['sub', ...OPS] : [...OPS, 'sub'];
    for (const op of order) {
      if (op === 'sub' && OUTSIDERS.includes(role)) leakEnd[role] = c[role].mark();
      const want = rows.get(`${role}|${op}`);
      assert.ok(want !== undefined, `the table has a row for ${role} × ${op}`);
      const r = await runOp(env, c[role], op);
      results.push({ role, op, want, got: r.got, text: r.frame && r.frame.text });
    }
  };
  // The owner's own rows first: its notes are told apart from the background's by the
  // user in {info}, so they run before the background starts.
  await runRole('owner');

  // The owner keeps acting in the group while the rest of the matrix runs.
  const marks = Object.fromEntries(OUTSIDERS.map((r) => [r, c[r].mark()]));
  let stop = false;
  const background = (async () => {
    for (let i = 0; !stop; i++) {
      const seq = (await ok(owner, 'pub', { topic: grp, content: `${SECRET} background ${i}` }, 202)).params.seq;
      env.seqs.push(seq);
      owner.send({ note: { topic: grp, what: 'read', seq } });
      owner.send({ note: { topic: grp, what: 'kp' } });
      if (i % 3 === 2) await ok(owner, 'del', { topic: grp, what: 'msg', hard: true, delseq: [{ low: seq - 1 }] });
      await new Promise((r) => setTimeout(r, 50));
    }
  })();

  // Notes are judged by what the watching session sees, so roles run one after another.
  for (const role of ROLES.filter((r) => r !== 'owner')) await runRole(role);
  stop = true;
  await background;

  const wrong = results.filter((r) => r.want !== r.got);
  const leaked = OUTSIDERS.flatMap((r) => leaks(c[r], grp, marks[r], leakEnd[r]).map((raw) => `${r}: ${raw.slice(0, 240)}`));
  // Summary: one line per role with the ops covered.
  console.log(`# ${results.length} rows of ${ROLES.length} roles × ${OPS.length + 1} ops:`);
  for (const role of ROLES) {
    const mine = results.filter((r) => r.role === role);
    console.log(`#   ${role.padEnd(9)} ${mine.map((r) => `${r.op}=${r.got}`).join(' ')}`);
  }
  assert.equal(results.length, TABLE.length, 'every row of the table ran');
  assert.deepEqual(wrong.map((r) => `${r.role} × ${r.op}: want ${r.want}, got ${r.got} ${r.text || ''}`), [], 'every answer follows the access modes');
  assert.deepEqual(leaked, [], 'nothing about the group reaches an outsider');
}, { timeout: 60000 });

test('p2p: a third user cannot reach the one-to-one topic of two others', async (ctx) => {
  const a = await session(ctx, 'pa', { create: true });
  const b = await session(ctx, 'pb', { create: true });
  const t = await session(ctx, 'third', { create: true });
  await ok(a, 'sub', { topic: b.uid });
  await ok(b, 'sub', { topic: a.uid });
  await ok(a, 'pub', { topic: b.uid, content: `${SECRET} p2p` }, 202);
  await syncToEnd(t);
  const m = t.mark();
  // Naming either of them gives the third user's own conversation with that user.
  for (const peer of [a, b]) {
    await ok(t, 'sub', { topic: peer.uid });
    const h = await t.getData(peer.uid);
    assert.equal(h.data.length, 0, 'the third user reads nothing of the pair');
    assert.equal((await answer(t, 'get', { topic: peer.uid, what: 'sub' })).got, 'meta');
  }
  // The internal name of a conversation is never a topic name (docs/protocol.md §6).
  const fake = `p2p${crypto.randomBytes(32).toString('base64url').slice(0, 40)}`;
  // sub: 501 (a kind of name qim does not offer); get and pub: 404, no such topic.
  const fakes = [
    (await answer(t, 'sub', { topic: fake })).got,
    (await answer(t, 'get', { topic: fake, what: 'data' })).got,
    (await answer(t, 'pub', { topic: fake, content: 'x' })).got,
  ];
  assert.deepEqual(fakes, [501, 404, 404], 'a p2p… name: sub, get data, pub');
  await ok(a, 'pub', { topic: b.uid, content: `${SECRET} p2p later` }, 202);
  await b.wait('data', (d) => d.content.includes('p2p later'));
  assert.equal((await answer(t, 'sync', { cursor: t.cursor })).got, 'sync');
  const seen = t.log.since(m).filter((e) => e.raw.includes(SECRET));
  assert.deepEqual(seen.map((e) => e.raw), [], 'nothing of the pair reaches the third user');
});

suite.run();
