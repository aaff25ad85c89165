// groupadmin.test.js — group administration with the real Tinode SDK against the real qimd
// (issue 9): invites, role changes, evictions and bans through {set sub}/{del sub}, the
// group's public and a member's own private through {set desc}, deleting the group
// ({del topic}, members told {pres gone}), paging a few dozen members with {get sub}
// (limit + the qim cursor), and a password change through {acc} that revokes older tokens.
//   node tests/e2e/groupadmin.test.js [--server 127.0.0.1:6060] [--only TEXT] [--verbose]
'use strict';

const assert = require('node:assert/strict');
const { Suite, expectCode, settle } = require('./lib/harness');
const { PASSWORD, connect, createGroup, join, newUser, publish, subscribeMe, tokenSession } = require('./lib/sdk');

const suite = new Suite('groupadmin');
const test = (name, fn, opts) => suite.test(name, fn, opts);

// Sends {get what:"sub"} with `sub` on `name` and waits for its answer; returns the
// {meta} (or undefined) and the ctrls carrying the request's id.
async function getSub(c, name, sub) {
  const m = c.mark();
  const sent = c.sent.length;
  c.tn.getMeta(name, { what: 'sub', sub }).catch(() => {});
  await c.quiesce(sent);
  await settle();
  const id = JSON.parse(c.sent[sent]).get.id;
  return {
    meta: c.bodies('meta', (x) => x.id === id && x.sub, m)[0],
    ctrls: c.bodies('ctrl', (x) => x.id === id, m),
  };
}

// The acs of member `uid` as `c` reads it with {get sub {user}}, or null (ctrl 204).
async function memberAcs(c, name, uid) {
  const { meta } = await getSub(c, name, { user: uid });
  return meta ? meta.sub.find((s) => s.user === uid).acs : null;
}

test('invite adds a member, a mode with A makes an admin, a mode without it demotes', async (ctx) => {
  const a = await newUser(ctx, 'owner');
  const b = await newUser(ctx, 'bob');
  const c = await newUser(ctx, 'carol');
  const name = await createGroup(a, 'admin group');
  const t = a.topic(name);
  const inv = await t.invite(b.uid, 'JRWPS');
  assert.equal(inv.code, 200, 'the owner invites bob');
  const raw = a.bodies('ctrl', (x) => x.id === inv.id)[0];
  assert.deepEqual(raw.params.acs, { want: 'JRWPS', given: 'JRWPS', mode: 'JRWPS' }, 'the reply carries the acs');
  const subs = await subscribeMe(b);
  assert.ok(subs.some((s) => s.topic === name), 'the invited user has the group in its me listing');
  await join(b, name);
  assert.equal((await memberAcs(a, name, b.uid)).given, 'JRWPS', 'bob is a Member');
  // Inviting carol as an admin, then demoting her to a member: both are role changes
  // the group module makes (and announces to the attached members as {pres acs}).
  const mb = b.mark();
  assert.equal((await t.invite(c.uid, 'JRWPAS')).code, 200);
  assert.equal((await memberAcs(a, name, c.uid)).given, 'JRWPASD', 'a mode with A makes an Admin');
  await b.wait('pres', (p) => p.topic === name && p.what === 'acs' && p.src === c.uid, { since: mb });
  assert.equal((await t.invite(c.uid, 'JRWPS')).code, 200, 'the owner demotes the admin');
  assert.equal((await memberAcs(a, name, c.uid)).given, 'JRWPS');
  // A member holds no A: it cannot invite nor change roles.
  const d = await newUser(ctx, 'dave');
  await expectCode(b.topic(name).invite(d.uid, 'JRWPAS'), 403, 'a member making an admin');
  await expectCode(b.topic(name).invite(c.uid, 'JR'), 403, 'a member changing a role');
  await expectCode(t.invite(c.uid, 'JRWPASDO'), 403, 'ownership transfer is not offered');
});

test('del sub evicts: the evicted member is told, detached, and can no longer publish or read', async (ctx) => {
  const a = await newUser(ctx, 'owner');
  const b = await newUser(ctx, 'bob');
  const c = await newUser(ctx, 'carol');
  const name = await createGroup(a, 'evict group');
  assert.equal((await a.topic(name).invite(b.uid, 'JRWPS')).code, 200);
  assert.equal((await a.topic(name).invite(c.uid, 'JRWPS')).code, 200);
  await join(b, name);
  await join(c, name);
  await subscribeMe(b);
  // A member cannot evict another member; nobody evicts itself (leave does that).
  await expectCode(c.topic(name).delSubscription(b.uid), 403, 'a member evicting');
  await expectCode(b.topic(name).delSubscription(b.uid), 403, 'evicting oneself');
  const mb = b.mark();
  const mc = c.mark();
  const del = await a.topic(name).delSubscription(b.uid);
  assert.equal(del.code, 200, 'the owner evicts bob');
  const ev = await b.wait('ctrl', (x) => x.topic === name && x.code === 205, { since: mb, what: 'ctrl 205 evicted' });
  assert.equal(ev.text, 'evicted');
  assert.equal(ev.params.unsub, true);
  await b.wait('pres', (p) => p.topic === 'me' && p.what === 'gone' && p.src === name, { since: mb });
  await c.wait('pres', (p) => p.topic === name && p.what === 'acs' && p.src === b.uid && p.dacs.given === 'N', {
    since: mc,
  });
  await settle();
  // Detached: publishing needs an attached session, reading history needs membership.
  await expectCode(b.tn.publishMessage(b.tn.createMessage(name, 'still here?', false)), 409, 'publish after eviction');
  await expectCode(b.tn.getMeta(name, { what: 'data' }), 403, 'get data after eviction');
  await expectCode(b.tn.getMeta(name, { what: 'sub' }), 403, 'get sub after eviction');
  // A ban (mode N) keeps carol out: joining again by the group's default access is refused.
  const mc2 = c.mark();
  assert.equal((await a.topic(name).invite(c.uid, 'N')).code, 200, 'the owner bans carol');
  await c.wait('ctrl', (x) => x.topic === name && x.code === 205, { since: mc2, what: 'ctrl 205 for the ban' });
  await expectCode(c.tn.subscribe(name), 403, 'a banned user subscribing again');
  await expectCode(a.topic(name).invite(c.uid, 'JRWPS'), 403, 'inviting a banned user');
});

test('one eviction reaching many members evicts only its own: the others see acs N and stay attached', async (ctx) => {
  // Every member's entry of the change is delivered from one parsed copy per batch
  // (gateway/push.c); with six members on the loops, entries of one batch share it.
  const a = await newUser(ctx, 'owner');
  const name = await createGroup(a, 'crowd');
  const members = [];
  for (let i = 0; i < 6; i++) {
    const m = await newUser(ctx, `m${i}`);
    assert.equal((await a.topic(name).invite(m.uid, 'JRWPS')).code, 200);
    await join(m, name);
    members.push(m);
  }
  const [gone, ...stay] = members;
  const marks = members.map((m) => m.mark());
  assert.equal((await a.topic(name).delSubscription(gone.uid)).code, 200, 'the owner evicts one member');
  await gone.wait('ctrl', (x) => x.topic === name && x.code === 205, { since: marks[0], what: 'ctrl 205 evicted' });
  for (let i = 0; i < stay.length; i++)
    await stay[i].wait('pres', (p) => p.topic === name && p.what === 'acs' && p.src === gone.uid && p.dacs.given === 'N', {
      since: marks[i + 1],
    });
  await settle();
  for (let i = 0; i < stay.length; i++) {
    assert.equal(stay[i].bodies('ctrl', (x) => x.topic === name && x.code === 205, marks[i + 1]).length, 0, `${stay[i].label} stays`);
    await publish(stay[i], name, `still here ${i}`);
  }
  await expectCode(gone.tn.publishMessage(gone.tn.createMessage(name, 'out?', false)), 409, 'the evicted member is detached');
});

test('set desc: public needs A or O, private is per member and seen by that member only', async (ctx) => {
  const a = await newUser(ctx, 'owner');
  const b = await newUser(ctx, 'bob');
  const name = await createGroup(a, 'desc group');
  assert.equal((await a.topic(name).invite(b.uid, 'JRWPS')).code, 200);
  await join(b, name);
  assert.equal((await a.topic(name).setMeta({ desc: { public: { fn: 'renamed' } } })).code, 200);
  await expectCode(b.topic(name).setMeta({ desc: { public: { fn: 'hijacked' } } }), 403, 'a member renaming');
  assert.equal((await b.topic(name).setMeta({ desc: { private: { comment: 'mine' } } })).code, 200);
  const mb = b.mark();
  await b.tn.getMeta(name, { what: 'desc' });
  const db = b.bodies('meta', (x) => x.topic === name && x.desc, mb)[0].desc;
  assert.deepEqual(db.public, { fn: 'renamed' });
  assert.deepEqual(db.private, { comment: 'mine' });
  const ma = a.mark();
  await a.tn.getMeta(name, { what: 'desc' });
  const da = a.bodies('meta', (x) => x.topic === name && x.desc, ma)[0].desc;
  assert.deepEqual(da.public, { fn: 'renamed' });
  assert.equal(da.private, undefined, "bob's private is not the owner's");
  // me: the account's own public and private.
  await subscribeMe(a);
  assert.equal((await a.me().setMeta({ desc: { public: { fn: 'Owner' }, private: { note: 'x' } } })).code, 200);
  const mm = a.mark();
  await a.tn.getMeta('me', { what: 'desc' });
  const me = a.bodies('meta', (x) => x.topic === 'me' && x.desc, mm)[0].desc;
  assert.deepEqual(me.public, { fn: 'Owner' });
  assert.deepEqual(me.private, { note: 'x' });
  await expectCode(a.topic(name).setMeta({ desc: { defacs: { auth: 'JRWP' } } }), 501, 'defacs is not stored');
});

test('del topic: only the owner; members get pres gone on the topic and on me; the topic is then 404', async (ctx) => {
  const a = await newUser(ctx, 'owner');
  const b = await newUser(ctx, 'bob');
  const name = await createGroup(a, 'doomed group');
  assert.equal((await a.topic(name).invite(b.uid, 'JRWPAS')).code, 200, 'bob is an admin');
  await join(b, name);
  await publish(a, name, 'before the end');
  const bme = await tokenSession(ctx, b, 'bob-me');
  await subscribeMe(bme);
  await expectCode(b.topic(name).delTopic(true), 403, 'an admin deleting the group');
  const mb = b.mark();
  const mm = bme.mark();
  const ctrl = await a.topic(name).delTopic(true);
  assert.equal(ctrl.code, 200, 'the owner deletes the group');
  await b.wait('pres', (p) => p.topic === name && p.what === 'gone', { since: mb, what: 'pres gone on the topic' });
  await bme.wait('pres', (p) => p.topic === 'me' && p.what === 'gone' && p.src === name, { since: mm });
  await expectCode(b.tn.subscribe(name), 404, 'subscribing to a deleted group');
  await expectCode(a.tn.subscribe(name), 404, 'the owner subscribing to its deleted group');
  await expectCode(b.tn.getMeta(name, { what: 'desc' }), 404, 'get desc of a deleted group');
  const subs = await subscribeMe(await tokenSession(ctx, b, 'bob-later'));
  assert.ok(!subs.some((s) => s.topic === name), 'the deleted group left the me listing');
});

test('get sub pages a few dozen members with limit and a stable cursor', async (ctx) => {
  const a = await newUser(ctx, 'owner');
  const name = await createGroup(a, 'big group');
  const members = [];
  for (let i = 0; i < 24; i += 6) {
    const batch = await Promise.all([0, 1, 2, 3, 4, 5].map((k) => newUser(ctx, `m${i + k}`)));
    for (const u of batch) {
      members.push(u.uid);
      u.close();
    }
  }
  for (const uid of members) assert.equal((await a.topic(name).invite(uid, 'JRWPS')).code, 200);
  const late = await newUser(ctx, 'late');
  late.close();
  const seen = [];
  let cursor;
  let pages = 0;
  for (;;) {
    const sub = { limit: 7 };
    if (cursor) sub.cursor = cursor;
    const { meta, ctrls } = await getSub(a, name, sub);
    assert.ok(meta && meta.sub.length <= 7, 'a page holds at most limit members');
    seen.push(...meta.sub.map((s) => s.user));
    pages++;
    // Joins during a listing do not change it: the cursor froze the first page's version.
    if (pages === 2) assert.equal((await a.topic(name).invite(late.uid, 'JRWPS')).code, 200);
    const more = ctrls.find((x) => x.code === 200 && x.params && x.params.what === 'sub' && x.params.cursor);
    if (!more) break;
    cursor = more.params.cursor;
  }
  assert.equal(pages, 4, '25 members in pages of 7');
  assert.equal(new Set(seen).size, seen.length, 'no member twice');
  assert.deepEqual([...seen].sort(), [a.uid, ...members].sort(), 'every member once, the late one not');
  assert.deepEqual(seen, [...seen].sort((x, y) => (Buffer.from(x.slice(3), 'base64url').compare(Buffer.from(y.slice(3), 'base64url')))),
    'ordered by user id');
  await expectCode(a.tn.getMeta(name, { what: 'sub', sub: { cursor: 'not-a-cursor' } }), 400, 'a bad cursor');
  const all = (await getSub(a, name, { limit: 100 })).meta.sub.map((s) => s.user);
  assert.ok(all.includes(late.uid) && all.length === 26, 'a new listing sees the late member');
}, { timeout: 90000 });

test('acc password change revokes older tokens; the changing session stays', async (ctx) => {
  const a = await newUser(ctx, 'alice');
  const old = await tokenSession(ctx, a, 'alice-old');
  const NEW = 'new-secret-2';
  const m = a.mark();
  const ctrl = await a.tn.updateAccountBasic(null, a.login, NEW);
  assert.equal(ctrl.code, 200);
  const raw = a.bodies('ctrl', (x) => x.id === ctrl.id, m)[0];
  assert.equal(typeof raw.params.token, 'string', 'the changing session gets a fresh token');
  // The changing session keeps working.
  await subscribeMe(a);
  // Old token refused, old password refused, new password and new token accepted.
  await expectCode((await connect(ctx, 'tok-old')).tn.loginToken(a.token), 401, 'the token made before the change');
  await expectCode((await connect(ctx, 'pw-old')).tn.loginBasic(a.login, PASSWORD), 401, 'the old password');
  assert.equal((await (await connect(ctx, 'pw-new')).tn.loginBasic(a.login, NEW)).code, 200, 'the new password');
  assert.equal((await (await connect(ctx, 'tok-new')).tn.loginToken(raw.params.token)).code, 200, 'the new token');
  // A session logged in before the change keeps its connection (revocation is at login).
  await subscribeMe(old);
  await expectCode(a.tn.updateAccountBasic(null, a.login, 'x'), 422, 'a too short password');
  await expectCode(a.tn.updateAccountBasic(null, 'someone-else', NEW), 501, 'changing the login');
});

suite.run();
