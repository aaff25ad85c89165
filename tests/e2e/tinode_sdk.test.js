// tinode_sdk.test.js — the real Tinode JavaScript SDK (npm tinode-sdk 0.25.3) against the
// real qimd: the scenario of PROTOCOL.md §11 driven by several concurrent clients, each
// step checked through the SDK's own state (what a Tinode app would show) and through the
// frames on the wire. Every test builds its own users and group, so one failure does not
// cascade. Members join a group before anything is published in it: qim shows a member
// only the messages after their join (DESIGN.md §3, history windows).
//   node tests/e2e/tinode_sdk.test.js [--server 127.0.0.1:6060] [--only TEXT] [--verbose]
'use strict';

const assert = require('node:assert/strict');
const { Suite, expectCode, settle, waitUntil } = require('./lib/harness');
const { UID_RE } = require('./lib/frames');
const {
  AccessMode,
  Drafty,
  PASSWORD,
  Tinode,
  connect,
  createGroup,
  groupOf,
  history,
  join,
  newUser,
  publish,
  received,
  subscribeMe,
  tokenSession,
} = require('./lib/sdk');
const { rawOpen } = require('./lib/raw');

const suite = new Suite('tinode_sdk');
const test = (name, fn, opts) => suite.test(name, fn, opts);

// ---------------------------------------------------------------------------------------
// Accounts and logins

test('hi: onConnect fires on ctrl 201 and the server params reach the SDK', async (ctx) => {
  const c = await connect(ctx, 'alice');
  const ctrl = c.bodies('ctrl', (x) => x.code === 201)[0];
  assert.ok(ctrl, 'the hi was answered with ctrl 201');
  assert.equal(ctrl.text, 'created');
  assert.equal(c.tn.getServerParam('ver'), '0.25');
  const max = c.tn.getServerParam('maxMessageSize');
  assert.ok(Number.isInteger(max) && max > 0, `maxMessageSize is a positive number, got ${max}`);
  if (!ctx.server.external) assert.equal(max, 131072, 'the default max_message_size is 128 KB');
});

test('createAccountBasic with login:true logs in; qim user ids are usr + 22 characters', async (ctx) => {
  const c = await connect(ctx, 'alice');
  const login = ctx.unique('alice');
  const m = c.mark();
  const ctrl = await c.tn.createAccountBasic(login, PASSWORD, { public: { fn: 'Alice' } });
  assert.equal(ctrl.code, 200);
  const raw = c.bodies('ctrl', (x) => x.id === ctrl.id, m)[0];
  assert.match(raw.params.user, UID_RE);
  assert.equal(raw.params.user.length, 25, 'usr + 22 characters of base64url (16 bytes)');
  assert.equal(raw.params.authlvl, 'auth');
  assert.equal(typeof raw.params.token, 'string');
  assert.ok(Date.parse(raw.params.expires) > Date.now(), 'the token expires in the future');
  assert.equal(c.tn.isAuthenticated(), true);
  assert.equal(c.tn.getCurrentUserID(), raw.params.user);
  assert.ok(c.tn.isMe(raw.params.user), 'the SDK recognizes its own 16-byte user id');
  assert.ok(Tinode.isP2PTopicName(raw.params.user), 'the SDK classifies the id as a user (P2P) name');
  const tok = c.tn.getAuthToken();
  assert.ok(tok && tok.expires instanceof Date, 'getAuthToken() works (expires parsed as a Date)');
});

test('loginBasic and loginToken on new connections give the same user', async (ctx) => {
  const a = await newUser(ctx, 'alice');
  const b = await connect(ctx, 'alice-basic');
  const ctrl = await b.tn.loginBasic(a.login, PASSWORD);
  assert.equal(ctrl.code, 200);
  assert.equal(ctrl.params.user, a.uid);
  assert.ok(b.tn.isAuthenticated());
  assert.ok(b.tn.getAuthToken(), 'basic login returns a token too');
  const t = await connect(ctx, 'alice-token');
  const ctrl2 = await t.tn.loginToken(a.token);
  assert.equal(ctrl2.code, 200);
  assert.equal(ctrl2.params.user, a.uid);
  assert.equal(t.tn.getCurrentUserID(), a.uid);
  assert.ok(t.tn.isAuthenticated());
});

test('errors: bad password 401, unknown login 401, bad token 401, login twice 409', async (ctx) => {
  const a = await newUser(ctx, 'alice');
  const c = await connect(ctx, 'mallory');
  await expectCode(c.tn.loginBasic(a.login, 'wrong-password'), 401, 'wrong password');
  await expectCode(c.tn.loginBasic(ctx.unique('nobody'), PASSWORD), 401, 'unknown login');
  // A real token with one character of its end (where the signature is) changed.
  const i = a.token.length - 5;
  const forged = a.token.slice(0, i) + (a.token[i] === 'A' ? 'B' : 'A') + a.token.slice(i + 1);
  await expectCode(c.tn.loginToken(forged), 401, 'forged token');
  assert.equal(c.tn.isAuthenticated(), false);
  // The connection stays usable after failed logins.
  const ok = await c.tn.loginBasic(a.login, PASSWORD);
  assert.equal(ok.code, 200);
  await expectCode(c.tn.loginBasic(a.login, PASSWORD), 409, 'login on an authenticated session');
});

test('errors: taken login 409, short login or password 422', async (ctx) => {
  const a = await newUser(ctx, 'alice');
  const c = await connect(ctx, 'bob');
  await expectCode(c.tn.createAccountBasic(a.login, PASSWORD), 409, 'a login that is taken');
  await expectCode(c.tn.createAccountBasic('ab', PASSWORD), 422, 'a login shorter than 4');
  await expectCode(c.tn.createAccountBasic(ctx.unique('bob'), 'abc'), 422, 'a password shorter than 6');
  assert.equal(c.tn.isAuthenticated(), false);
});

test('errors: requests before login get 401', async (ctx) => {
  const c = await connect(ctx, 'anon');
  await expectCode(c.me().subscribe(), 401, 'sub me before login');
  await expectCode(c.tn.getMeta('me', { what: 'desc' }), 401, 'get before login');
  await expectCode(c.tn.publish('grpAAAAAAAAAAAAAAAAAAAAAA', 'hello', true), 401, 'pub before login');
});

test('errors: requests before hi get 409 (raw frames; the SDK always says hi first)', async (ctx) => {
  const r = await rawOpen(ctx, 'raw');
  const login = await r.request('login', { scheme: 'basic', secret: Buffer.from('user:password').toString('base64') });
  assert.equal(login.code, 409);
  const sub = await r.request('sub', { topic: 'me' });
  assert.equal(sub.code, 409);
  await r.hi();
});

test('errors: malformed JSON gets ctrl 400 without id and the connection stays usable', async (ctx) => {
  const a = await newUser(ctx, 'alice');
  const r = await rawOpen(ctx, 'raw');
  await r.hi();
  const m = r.mark();
  r.send('{"pub":{"id":"1","topic":');
  const ctrl = await r.wait('ctrl', null, { since: m, what: 'the answer to malformed JSON' });
  assert.equal(ctrl.code, 400);
  assert.equal(ctrl.id, undefined, 'no id: the frame could not be parsed');
  await r.loginToken(a.token);
});

// ---------------------------------------------------------------------------------------
// me, groups, joining

test('me: a new user subscribes me with desc + sub and gets an empty listing', async (ctx) => {
  const a = await newUser(ctx, 'alice');
  const subs = await subscribeMe(a);
  assert.deepEqual(subs, [], 'no subscriptions yet');
  const desc = a.bodies('meta', (x) => x.topic === 'me' && x.desc)[0].desc;
  assert.equal(desc.public && desc.public.fn, `alice ${a.login}`, 'me desc carries the public set at creation');
  assert.ok(a.me().isSubscribed());
});

test('group creation: ctrl topic is grp…, tmpname echoed, owner JRWPASDO, desc public', async (ctx) => {
  const a = await newUser(ctx, 'alice');
  await subscribeMe(a);
  const name = await createGroup(a, 'Creation group');
  const t = a.topic(name);
  assert.equal(t.getAccessMode().getMode(), 'JRWPASDO');
  assert.ok(t.getAccessMode().isOwner());
  await waitUntil(() => t.public && t.public.fn === 'Creation group', 2000, 'the group public in the SDK');
  // The owner is the one subscriber, with the owner's mode.
  const me = t.subscriber(a.uid);
  assert.ok(me, 'the owner is listed in meta sub');
  assert.equal(me.acs.getMode(), 'JRWPASDO');
  // A fresh me listing now has the group.
  const a2 = await tokenSession(ctx, a);
  const subs = await subscribeMe(a2);
  const entry = subs.find((s) => s.topic === name);
  assert.ok(entry, 'the me listing contains the new group');
  assert.equal(entry.acs.mode, 'JRWPASDO');
  assert.equal(entry.public && entry.public.fn, 'Creation group');
});

test('joining: second and third members get JRWPS; the owner gets pres acs; everyone sees three members', async (ctx) => {
  const a = await newUser(ctx, 'alice');
  const b = await newUser(ctx, 'bob');
  const c = await newUser(ctx, 'carol');
  const name = await createGroup(a, 'Join group');
  for (const u of [b, c]) {
    const m = a.mark();
    const { acs, dataCtrl } = await join(u, name);
    assert.deepEqual(acs, { want: 'JRWPS', given: 'JRWPS', mode: 'JRWPS' }, `${u.label} joins with the group default JRWPS`);
    assert.equal(dataCtrl.code, 204, 'no messages yet: the data part is ctrl 204');
    assert.equal(dataCtrl.topic, name);
    const pres = await a.wait('pres', (p) => p.topic === name && p.what === 'acs' && p.src === u.uid, { since: m, what: `pres acs for ${u.label}` });
    assert.ok(pres.dacs && typeof pres.dacs.given === 'string', 'pres acs carries dacs');
    assert.equal(new AccessMode().updateAll(pres.dacs).getMode(), 'JRWPS', 'dacs applied to nothing gives JRWPS');
  }
  await waitUntil(() => a.topic(name).subscriber(b.uid) && a.topic(name).subscriber(c.uid), 3000, 'the owner knows both members');
  // Carol's own meta sub (she joined last) lists all three, with 16-byte user ids.
  const users = Object.keys(c.topic(name)._users).sort();
  assert.deepEqual(users, [a.uid, b.uid, c.uid].sort(), 'carol sees three subscribers');
  for (const u of users) assert.match(u, UID_RE);
  assert.equal(c.topic(name).subscriber(a.uid).acs.getMode(), 'JRWPASDO');
  // Joining again on the same session is a no-op.
  const again = await c.tn.subscribe(name);
  assert.equal(again.code, 304, 'already subscribed');
});

test('sub to a group that does not exist gets 404', async (ctx) => {
  const a = await newUser(ctx, 'alice');
  await expectCode(a.tn.subscribe('grpAAAAAAAAAAAAAAAAAAAAAA'), 404, 'sub to an unknown group');
});

// ---------------------------------------------------------------------------------------
// Publish and receive

test('publish: 202 with seq; the others get {data} from the sender; noecho skips the sender', async (ctx) => {
  const { name, users } = await groupOf(ctx, ['alice', 'bob', 'carol'], 'Pub group');
  const [a, b, c] = users;
  const mb = b.mark();
  const mc = c.mark();
  const ma = a.mark();
  const seq = await publish(a, name, 'hello from alice');
  assert.equal(seq, 1, 'the first message of a topic is seq 1');
  for (const [u, m] of [[b, mb], [c, mc]]) {
    const d = await received(u, name, seq, m);
    assert.equal(d.from, a.uid, 'data.from is the sender');
    assert.equal(d.content, 'hello from alice');
    assert.deepEqual(u.shown(name), [1]);
    assert.equal(u.shownContent(name, 1), 'hello from alice');
  }
  await a.none('data', (d) => d.topic === name, { since: ma, ms: 300 });
  assert.deepEqual(a.shown(name), [1], 'the sender shows its own message from the draft + ack');
  // publish() without noecho: the sender's session gets the {data} too, after the ack.
  const mb2 = b.mark();
  const ack = await b.tn.publish(name, 'echo me', false);
  assert.equal(ack.code, 202);
  assert.equal(ack.params.seq, 2);
  const echoed = await received(b, name, 2, mb2);
  assert.equal(echoed.from, b.uid);
  const ackAt = b.log.filter((x) => x.ctrl && x.ctrl.id === ack.id, mb2)[0].i;
  const dataAt = b.log.filter((x) => x.data && x.data.seq === 2, mb2)[0].i;
  assert.ok(ackAt < dataAt, 'the 202 ack comes before the {data} echo');
  await received(a, name, 2);
  await received(c, name, 2);
});

test('publish: Drafty content and head arrive unchanged', async (ctx) => {
  const { name, users } = await groupOf(ctx, ['alice', 'bob'], 'Drafty group');
  const [a, b] = users;
  const m = b.mark();
  const draft = Drafty.parse('this is *bold* and _italic_');
  const t = a.topic(name);
  const pub = t.createMessage(draft, true);
  assert.equal(pub.head.mime, 'text/x-drafty');
  await t.publishDraft(pub);
  const d = await received(b, name, 1, m);
  assert.deepEqual(d.content, JSON.parse(JSON.stringify(draft)));
  assert.equal(d.head && d.head.mime, 'text/x-drafty');
});

test('publish: three clients publishing at once; every member gets every message once, in seq order', async (ctx) => {
  const { name, users } = await groupOf(ctx, ['alice', 'bob', 'carol'], 'Busy group');
  const per = 8;
  const marks = users.map((u) => u.mark());
  const seqs = await Promise.all(
    users.map(async (u) => {
      const out = [];
      for (let i = 0; i < per; i++) out.push(await publish(u, name, `${u.label} ${i}`));
      return out;
    }),
  );
  const all = seqs.flat().sort((x, y) => x - y);
  assert.deepEqual(all, Array.from({ length: 3 * per }, (_, i) => i + 1), 'seqs 1..24, each once');
  for (let k = 0; k < users.length; k++) {
    const u = users[k];
    const others = all.filter((s) => !seqs[k].includes(s));
    await waitUntil(() => u.bodies('data', (d) => d.topic === name, marks[k]).length >= others.length, 5000, `${u.label} gets ${others.length} messages`);
    await settle();
    const got = u.bodies('data', (d) => d.topic === name, marks[k]);
    assert.deepEqual(got.map((d) => d.seq), others, `${u.label} gets the others' messages once each, in seq order`);
    for (const d of got) {
      const sender = users[seqs.findIndex((list) => list.includes(d.seq))];
      assert.equal(d.from, sender.uid, `seq ${d.seq} is from ${sender.label}`);
    }
    assert.deepEqual(u.shown(name), all, `${u.label}'s SDK shows all ${all.length} messages`);
  }
});

test('errors: a message over maxMessageSize gets 413 and the connection stays usable', async (ctx) => {
  const { name, users } = await groupOf(ctx, ['alice', 'bob'], 'Big group');
  const [a, b] = users;
  const max = a.tn.getServerParam('maxMessageSize');
  const mb = b.mark();
  await expectCode(a.tn.publish(name, 'x'.repeat(max + 64), true), 413, 'oversized pub');
  const seq = await publish(a, name, 'small');
  assert.equal(seq, 1, 'the refused message took no seq');
  await received(b, name, 1, mb);
  assert.equal(b.bodies('data', (d) => d.topic === name, mb).length, 1, 'only the small message was delivered');
});

test('errors: a reader (JR) cannot publish (403); pub without attaching gets 409', async (ctx) => {
  const { name, users } = await groupOf(ctx, ['alice', 'bob'], 'Readers group');
  const g = await newUser(ctx, 'guest');
  const { acs } = await join(g, name, { mode: 'JR' });
  assert.equal(acs && acs.mode, 'JR', 'asking for JR gives mode JR');
  await expectCode(g.tn.publish(name, 'may I?', true), 403, 'pub without W');
  // The reader still reads.
  const m = g.mark();
  const seq = await publish(users[0], name, 'for everyone');
  await received(g, name, seq, m);
  // Bob leaves (detaches); publishing from a detached session is refused.
  await users[1].topic(name).leave(false);
  await expectCode(users[1].tn.publish(name, 'after leaving', true), 409, 'pub on a topic the session left');
});

// ---------------------------------------------------------------------------------------
// History

test('history: since/before/limit, ranges, getMessagesPage, withEarlierData', async (ctx) => {
  const { name, users } = await groupOf(ctx, ['alice', 'bob'], 'History group');
  const [a, b] = users;
  for (let i = 1; i <= 30; i++) assert.equal(await publish(a, name, `m${i}`), i);
  // A new session of bob that loaded nothing yet.
  const r = await tokenSession(ctx, b, 'bob-reader');
  const t = r.topic(name);
  const m = r.mark();
  await t.subscribe(t.startMetaQuery().withDesc().build());
  await r.wait('meta', (x) => x.topic === name && x.desc, { since: m });
  await settle();
  assert.equal(t.seq, 30, 'meta desc carries the last seq');
  const range = (lo, hi) => Array.from({ length: hi - lo }, (_, i) => lo + i);
  const q = () => t.startMetaQuery();

  let h = await history(r, name, q().withData(5, 10).build());
  assert.deepEqual(h.seqs, range(5, 10), 'since is inclusive, before exclusive');
  assert.equal(h.ctrl.code, 208);
  assert.equal(h.ctrl.params.what, 'data');
  assert.equal(h.ctrl.params.count, 5);
  assert.equal(h.ctrl.topic, name);

  h = await history(r, name, q().withData(undefined, 25, 5).build());
  assert.deepEqual(h.seqs, range(20, 25), 'before=25 limit=5 gives the 5 newest below 25');

  h = await history(r, name, q().withData(10, undefined, 3).build());
  assert.deepEqual(h.seqs, [28, 29, 30], 'since=10 limit=3 gives the 3 newest from 10 on (newest first, as Tinode)');

  h = await history(r, name, q().withData(31).build());
  assert.deepEqual(h.seqs, []);
  assert.equal(h.ctrl.code, 204, 'nothing after the last seq: 204');
  assert.equal(h.ctrl.params.what, 'data');

  h = await history(r, name, q().withDataRanges([{ low: 3, hi: 6 }, { low: 12 }]).build());
  assert.deepEqual(h.seqs, [3, 4, 5, 12], 'ranges: hi exclusive, a range without hi is one seq');

  h = await history(r, name, q().withDataRanges([{ low: 1, hi: 31 }], 4).build());
  assert.deepEqual(h.seqs, [27, 28, 29, 30], 'ranges with a limit give the newest');

  // What the webapp does: pages with getMessagesPage, which asks with ranges.
  const fresh = await tokenSession(ctx, b, 'bob-pager');
  const ft = fresh.topic(name);
  const fm = fresh.mark();
  await ft.subscribe(ft.startMetaQuery().withDesc().build());
  await fresh.wait('meta', (x) => x.topic === name && x.desc, { since: fm });
  await settle();
  let sm = fresh.sent.length;
  await ft.getMessagesPage(10, undefined, 0, ft.seq + 1, false);
  await settle();
  const asked = JSON.parse(fresh.sent.slice(sm).find((s) => s.includes('"get"')));
  assert.deepEqual(asked.get.data.ranges, [{ low: 1, hi: 31 }], 'the SDK pages with ranges');
  assert.deepEqual(fresh.shown(name), range(21, 31), 'first page: the 10 newest');
  sm = fresh.sent.length;
  await ft.getMessagesPage(10, undefined, 0, ft.minMsgSeq(), false);
  await settle();
  assert.deepEqual(fresh.shown(name), range(11, 31), 'second page: 10 more');
  // withEarlierData asks for before=minSeq.
  await ft.getMeta(ft.startMetaQuery().withEarlierData(5).build());
  await settle();
  assert.deepEqual(fresh.shown(name), range(6, 31), 'withEarlierData(5) adds 6..10');
  // A live message lands in the pager's cache too.
  const seq = await publish(a, name, 'm31');
  await received(fresh, name, seq);
  assert.deepEqual(fresh.shown(name), range(6, 32));
  // withLaterData asks for since=maxSeq+1: a session that has 1..10 gets 11..31.
  const later = await tokenSession(ctx, b, 'bob-later');
  const lt = later.topic(name);
  const lm = later.mark();
  await lt.subscribe(lt.startMetaQuery().withDesc().build());
  await later.wait('meta', (x) => x.topic === name && x.desc, { since: lm });
  h = await history(later, name, lt.startMetaQuery().withData(1, 11).build());
  assert.deepEqual(h.seqs, range(1, 11));
  h = await history(later, name, lt.startMetaQuery().withLaterData(24).build());
  assert.deepEqual(h.seqs, range(11, 32), 'withLaterData(24) after 1..10');
  assert.deepEqual(later.shown(name), range(1, 32));
}, { timeout: 30000 });

// ---------------------------------------------------------------------------------------
// Receipts and unread counts

test('receipts: recv/read notes become {info} for the others; msgReadCount/msgRecvCount', async (ctx) => {
  const { name, users } = await groupOf(ctx, ['alice', 'bob', 'carol'], 'Receipts group');
  const [a, b, c] = users;
  const ma = a.mark();
  const mc = c.mark();
  const seq = await publish(a, name, 'please read');
  await received(b, name, seq);
  await received(c, name, seq, mc);
  // The SDK sends {note recv} by itself 100 ms after new data.
  for (const u of [b, c]) {
    const info = await a.wait('info', (i) => i.topic === name && i.what === 'recv' && i.from === u.uid, { since: ma, what: `info recv from ${u.label}` });
    assert.equal(info.seq, seq);
  }
  const mb = b.mark();
  const mc2 = c.mark();
  b.topic(name).noteRead(seq);
  const info = await a.wait('info', (i) => i.topic === name && i.what === 'read' && i.from === b.uid, { since: ma, what: 'info read from bob' });
  assert.equal(info.seq, seq);
  await c.wait('info', (i) => i.topic === name && i.what === 'read' && i.from === b.uid, { since: mc2, what: 'carol sees bob read it' });
  await b.none('info', (i) => i.what === 'read' && i.from === b.uid, { since: mb, ms: 300 });
  assert.equal(a.topic(name).msgReadCount(seq), 1, 'one member read it');
  assert.equal(a.topic(name).msgRecvCount(seq), 2, 'two members received it');
  // Stored: a new session of alice gets read/recv in the group's meta sub.
  const a2 = await tokenSession(ctx, a);
  const t2 = a2.topic(name);
  const m2 = a2.mark();
  await t2.subscribe(t2.startMetaQuery().withDesc().withSub().build());
  const sub = await a2.wait('meta', (x) => x.topic === name && x.sub, { since: m2 });
  const bs = sub.sub.find((s) => s.user === b.uid);
  assert.equal(bs.read, seq);
  assert.equal(bs.recv, seq);
  await settle();
  assert.equal(t2.msgReadCount(seq), 1);
  assert.equal(t2.msgRecvCount(seq), 2);
});

test('unread: me listing has seq/read/recv/clear/touched/acs/public; pres me msg while detached', async (ctx) => {
  const { name, users } = await groupOf(ctx, ['alice', 'bob'], 'Unread group');
  const [a, b] = users;
  await subscribeMe(b);
  for (let i = 1; i <= 5; i++) await publish(a, name, `u${i}`);
  await received(b, name, 5);
  const ma = a.mark();
  await a.wait('info', (i) => i.what === 'recv' && i.from === b.uid && i.seq === 5, { since: 0, what: 'bob received 5' });
  b.topic(name).noteRead(2);
  await a.wait('info', (i) => i.what === 'read' && i.from === b.uid && i.seq === 2, { since: ma, what: 'bob read 2' });
  const del = await b.topic(name).delMessagesList([1], false);
  assert.equal(del.params.del, 1, 'the first delete in the topic has del id 1');
  // Bob detaches; what alice publishes now reaches bob's me as {pres msg}.
  await b.topic(name).leave(false);
  const mb = b.mark();
  for (let i = 6; i <= 8; i++) await publish(a, name, `u${i}`);
  const pres = await b.wait('pres', (p) => p.topic === 'me' && p.what === 'msg' && p.src === name && p.seq === 8, { since: mb, what: 'pres me msg seq 8' });
  assert.equal(pres.act, a.uid, 'act is the sender');
  await b.none('data', (d) => d.topic === name, { since: mb, ms: 200 });
  await waitUntil(() => b.me().getContact(name) && b.me().getContact(name).unread === 6, 2000, 'bob’s contact shows 6 unread');
  // A new session lists me: the entry carries everything the unread count needs.
  const b2 = await tokenSession(ctx, b);
  const subs = await subscribeMe(b2);
  const e = subs.find((s) => s.topic === name);
  assert.ok(e, 'the group is in bob’s me listing');
  assert.equal(e.seq, 8);
  assert.equal(e.read, 2);
  assert.equal(e.recv, 5);
  assert.equal(e.clear, 1, 'clear is the del id of bob’s soft delete');
  assert.equal(typeof e.touched, 'string');
  assert.deepEqual(e.acs, { want: 'JRWPS', given: 'JRWPS', mode: 'JRWPS' });
  assert.equal(e.public && e.public.fn, 'Unread group');
  await settle();
  const cont = b2.me().getContact(name);
  assert.equal(cont.unread, 6, 'the SDK computes unread = seq - read = 6');
  assert.equal(b2.topic(name).unread, 6);
  // The sender's own read/recv moved with each publish.
  const a2 = await tokenSession(ctx, a);
  const asubs = await subscribeMe(a2);
  const ae = asubs.find((s) => s.topic === name);
  assert.equal(ae.seq, 8);
  assert.equal(ae.read, 8, 'publishing sets the sender’s read');
  assert.equal(ae.recv, 8);
  assert.equal(ae.acs.mode, 'JRWPASDO');
  assert.equal(a2.me().getContact(name).unread, 0);
});

// ---------------------------------------------------------------------------------------
// Edit, delete, recall, leave

test('edit: head.replace ":N" — the SDK shows the new version in place of the original', async (ctx) => {
  const { name, users } = await groupOf(ctx, ['alice', 'bob'], 'Edit group');
  const [a, b] = users;
  const mb = b.mark();
  const orig = await publish(a, name, 'original text');
  await received(b, name, orig, mb);
  const edit = await publish(a, name, 'edited text', { replace: `:${orig}` });
  assert.equal(edit, orig + 1, 'the edit is a new message with the next seq');
  const d = await received(b, name, edit, mb);
  assert.equal(d.head && d.head.replace, `:${orig}`);
  assert.equal(d.from, a.uid);
  assert.deepEqual(b.shown(name), [orig], 'the replacement is not shown as its own message');
  assert.equal(b.shownContent(name, orig), 'edited text');
  assert.equal(a.shownContent(name, orig), 'edited text', 'the sender shows the edit too');
  // A new session loading history sees the same.
  const b2 = await tokenSession(ctx, b);
  const t = b2.topic(name);
  const m = b2.mark();
  await t.subscribe(t.startMetaQuery().withDesc().withLaterData(24).build());
  await b2.wait('ctrl', (c) => c.topic === name && c.params && c.params.what === 'data', { since: m });
  await settle();
  assert.deepEqual(b2.shown(name), [orig]);
  assert.equal(b2.shownContent(name, orig), 'edited text');
});

test('soft delete: hidden for that user only; pres del to their other session; get del', async (ctx) => {
  const { name, users } = await groupOf(ctx, ['alice', 'bob', 'carol'], 'Soft group');
  const [a, b, c] = users;
  for (let i = 1; i <= 3; i++) await publish(a, name, `s${i}`);
  await received(b, name, 3);
  await received(c, name, 3);
  const b2 = await tokenSession(ctx, b);
  await join(b2, name);
  const ma = a.mark();
  const mc = c.mark();
  const mb2 = b2.mark();
  const ctrl = await b.topic(name).delMessagesList([2], false);
  assert.equal(ctrl.code, 200);
  assert.equal(ctrl.params.del, 1);
  assert.deepEqual(b.shown(name), [1, 3], 'bob no longer shows seq 2');
  const p = await b2.wait('pres', (x) => x.topic === name && x.what === 'del', { since: mb2, what: "pres del on bob's other session" });
  assert.equal(p.clear, 1);
  assert.deepEqual(p.delseq, [{ low: 2 }]);
  await a.none('pres', (x) => x.what === 'del', { since: ma, ms: 300 });
  await c.none('pres', (x) => x.what === 'del', { since: mc, ms: 0 });
  // History: bob without 2, the others with it.
  const q = (u) => u.topic(name).startMetaQuery().withData(1).build();
  assert.deepEqual((await history(b2, name, q(b2))).seqs, [1, 3]);
  assert.deepEqual((await history(a, name, q(a))).seqs, [1, 2, 3]);
  assert.deepEqual((await history(c, name, q(c))).seqs, [1, 2, 3]);
  // get del: bob's own delete log.
  const md = b2.mark();
  const meta = await b2.topic(name).getMeta(b2.topic(name).startMetaQuery().withDel(undefined, 10).build());
  assert.ok(meta.del, 'get del answers meta del');
  const raw = b2.bodies('meta', (x) => x.del, md)[0];
  assert.equal(raw.del.clear, 1);
  assert.deepEqual(raw.del.delseq, [{ low: 2 }]);
  const ad = await a.topic(name).getMeta(a.topic(name).startMetaQuery().withDel(undefined, 10).build());
  assert.equal(ad.code, 204, 'alice deleted nothing for herself');
  assert.equal(ad.params.what, 'del');
});

test('hard delete by the owner: pres del to the others; gone for everyone', async (ctx) => {
  const { name, users } = await groupOf(ctx, ['alice', 'bob', 'carol'], 'Hard group');
  const [a, b, c] = users;
  await publish(a, name, 'h1');
  await publish(b, name, 'h2 from bob');
  await publish(a, name, 'h3');
  await received(b, name, 3);
  await received(c, name, 3);
  const mb = b.mark();
  const mc = c.mark();
  const ctrl = await a.topic(name).delMessagesList([2], true);
  assert.equal(ctrl.code, 200);
  assert.equal(ctrl.params.del, 1);
  for (const [u, m] of [[b, mb], [c, mc]]) {
    const p = await u.wait('pres', (x) => x.topic === name && x.what === 'del', { since: m, what: `pres del for ${u.label}` });
    assert.equal(p.src, a.uid, 'src is the actor');
    assert.equal(p.clear, 1);
    assert.deepEqual(p.delseq, [{ low: 2 }]);
    await settle();
    assert.deepEqual(u.shown(name), [1, 3], `${u.label}'s SDK dropped seq 2`);
  }
  assert.deepEqual(a.shown(name), [1, 3]);
  for (const u of [a, b, c]) {
    const h = await history(u, name, u.topic(name).startMetaQuery().withData(1).build());
    assert.deepEqual(h.seqs, [1, 3], `seq 2 is gone from ${u.label}'s history`);
  }
  // get del lists deletes for everyone too.
  const md = c.mark();
  await c.topic(name).getMeta(c.topic(name).startMetaQuery().withDel(undefined, 10).build());
  const raw = c.bodies('meta', (x) => x.topic === name && x.del, md)[0];
  assert.ok(raw, 'get del answers meta del');
  assert.equal(raw.del.clear, 1);
  assert.deepEqual(raw.del.delseq, [{ low: 2 }]);
});

test('recall: a member hard-deletes their own message within msg_delete_age; gone for everyone', async (ctx) => {
  const { name, users } = await groupOf(ctx, ['alice', 'bob', 'carol'], 'Recall group');
  const [a, b, c] = users;
  await publish(a, name, 'r1');
  const mine = await publish(b, name, 'oops, wrong group');
  await received(a, name, mine);
  await received(c, name, mine);
  assert.equal(b.topic(name).getAccessMode().isDeleter(), false, 'bob has no D');
  const ma = a.mark();
  const mc = c.mark();
  const ctrl = await b.topic(name).delMessagesList([mine], true);
  assert.equal(ctrl.code, 200);
  for (const [u, m] of [[a, ma], [c, mc]]) {
    const p = await u.wait('pres', (x) => x.topic === name && x.what === 'del', { since: m, what: `pres del (recall) for ${u.label}` });
    assert.equal(p.src, b.uid);
    assert.deepEqual(p.delseq, [{ low: mine }]);
  }
  for (const u of [a, b, c]) {
    const h = await history(u, name, u.topic(name).startMetaQuery().withData(1).build());
    assert.deepEqual(h.seqs, [1], `the recalled message is gone for ${u.label}`);
  }
});

test('no permission: a member without D hard-deleting someone else’s message gets a soft delete', async (ctx) => {
  const { name, users } = await groupOf(ctx, ['alice', 'bob', 'carol'], 'Perm group');
  const [a, b, c] = users;
  const seq = await publish(a, name, 'alice’s message');
  await received(b, name, seq);
  await received(c, name, seq);
  const ma = a.mark();
  const mb = b.mark();
  const ctrl = await c.topic(name).delMessagesList([seq], true);
  assert.equal(ctrl.code, 200, 'answered like a soft delete');
  assert.ok(ctrl.params.del >= 1);
  await a.none('pres', (x) => x.what === 'del', { since: ma, ms: 400 });
  await b.none('pres', (x) => x.what === 'del', { since: mb, ms: 0 });
  assert.deepEqual((await history(c, name, c.topic(name).startMetaQuery().withData(1).build())).seqs, [], 'hidden for carol');
  assert.deepEqual((await history(a, name, a.topic(name).startMetaQuery().withData(1).build())).seqs, [seq], 'alice still has it');
  assert.deepEqual((await history(b, name, b.topic(name).startMetaQuery().withData(1).build())).seqs, [seq], 'bob still has it');
});

test('leave: detach stops {data}; 304 when not attached; unsub removes the group from me', async (ctx) => {
  const { name, users } = await groupOf(ctx, ['alice', 'bob'], 'Leave group');
  const [a, b] = users;
  await subscribeMe(b);
  const ctrl = await b.topic(name).leave(false);
  assert.equal(ctrl.code, 200);
  assert.equal(ctrl.topic, name);
  assert.equal(b.topic(name).isSubscribed(), false);
  const again = await b.tn.leave(name, false);
  assert.equal(again.code, 304, 'leaving a topic the session is not attached to');
  const mb = b.mark();
  const seq = await publish(a, name, 'while bob is away');
  await b.wait('pres', (p) => p.topic === 'me' && p.what === 'msg' && p.src === name && p.seq === seq, { since: mb });
  await b.none('data', (d) => d.topic === name, { since: mb, ms: 200 });
  // Back in: history has the message; then unsubscribe for good.
  await join(b, name);
  const h = await history(b, name, b.topic(name).startMetaQuery().withData(1).build());
  assert.deepEqual(h.seqs, [seq]);
  const un = await b.topic(name).leave(true);
  assert.equal(un.code, 200);
  const b2 = await tokenSession(ctx, b);
  const subs = await subscribeMe(b2);
  assert.ok(!subs.some((s) => s.topic === name && !s.deleted), 'the group left the me listing');
  await expectCode(b2.tn.getMeta(name, { what: 'data' }), 403, 'get data after unsubscribing');
});

suite.run();
