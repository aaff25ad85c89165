// p2p.test.js — one-to-one (P2P) topics and the `me` session list, driven by the real
// Tinode JavaScript SDK (npm tinode-sdk 0.25.3) against the real qimd. Each side names a
// P2P topic by the other user's id (PROTOCOL.md §3); the checks go through the SDK's own
// state (contacts, unread counts, shown messages) and through the frames on the wire.
//   node tests/e2e/p2p.test.js [--server 127.0.0.1:6060] [--only TEXT] [--verbose]
'use strict';

const assert = require('node:assert/strict');
const { Suite, expectCode, settle, waitUntil } = require('./lib/harness');
const { createGroup, history, join, newUser, publish, received, subscribeMe, tokenSession } = require('./lib/sdk');

const suite = new Suite('p2p');
const test = (name, fn, opts) => suite.test(name, fn, opts);

const P2P = { want: 'JRWPA', given: 'JRWPA', mode: 'JRWPA' };

// `c` subscribes to the P2P topic with `peer` (named by the peer's id) with desc, sub and
// later data, and waits for the data part of the answer. Returns {ctrl, raw, desc}.
async function talkTo(c, peer) {
  const t = c.topic(peer.uid);
  const m = c.mark();
  const ctrl = await t.subscribe(t.startMetaQuery().withDesc().withSub().withLaterData(24).build());
  assert.equal(ctrl.code, 200, `${c.label}: sub to ${peer.label}'s id answers 200`);
  assert.equal(ctrl.topic, peer.uid, 'the topic keeps the peer’s name');
  const raw = c.bodies('ctrl', (x) => x.id === ctrl.id && x.code === 200, m)[0];
  await c.wait('ctrl', (x) => x.id === ctrl.id && x.params && x.params.what === 'data', { since: m, what: 'data part' });
  const desc = await c.wait('meta', (x) => x.topic === peer.uid && x.desc, { since: m, what: 'meta desc of the p2p topic' });
  await settle();
  return { ctrl, raw, desc: desc.desc };
}

test('p2p: sub usr… creates the conversation; JRWPA for both; desc shows the peer; the peer learns it on me', async (ctx) => {
  const a = await newUser(ctx, 'alice');
  const b = await newUser(ctx, 'bob');
  await subscribeMe(b);
  const mb = b.mark();
  const { raw, desc } = await talkTo(a, b);
  assert.deepEqual(raw.params && raw.params.acs, P2P, 'the creator’s subscription is new: acs JRWPA');
  assert.equal(desc.public && desc.public.fn, `bob ${b.login}`, 'the topic’s public is the peer’s card');
  assert.deepEqual(desc.acs, P2P);
  const sub = a.bodies('meta', (x) => x.topic === b.uid && x.sub)[0];
  assert.deepEqual(sub.sub.map((s) => s.user).sort(), [a.uid, b.uid].sort(), 'meta sub lists both users');
  const pres = await b.wait('pres', (p) => p.topic === 'me' && p.what === 'acs' && p.src === a.uid, { since: mb, what: 'pres acs on bob’s me' });
  assert.equal(pres.dacs && pres.dacs.given, 'JRWPA');
  await waitUntil(() => b.me().getContact(a.uid), 3000, 'bob’s SDK added alice as a contact');
  // Bob joins the same conversation from his side: no new acs (his row exists already).
  const bj = await talkTo(b, a);
  assert.equal(bj.raw.params, undefined, 'bob’s subscription existed: no acs in the ctrl');
  assert.equal(bj.desc.public && bj.desc.public.fn, `alice ${a.login}`);
  const again = await b.tn.subscribe(a.uid);
  assert.equal(again.code, 304, 'sub again while attached: 304 (a success code for the SDK)');
});

test('p2p: both directions; data.topic is the sender’s id at the receiver; history after reconnect', async (ctx) => {
  const a = await newUser(ctx, 'alice');
  const b = await newUser(ctx, 'bob');
  await talkTo(a, b);
  await talkTo(b, a);
  const mb = b.mark();
  const s1 = await publish(a, b.uid, 'hi bob');
  const d1 = await received(b, a.uid, s1, mb);
  assert.equal(d1.from, a.uid);
  assert.equal(d1.content, 'hi bob');
  const ma = a.mark();
  const s2 = await publish(b, a.uid, 'hi alice');
  assert.equal(s2, s1 + 1, 'one conversation: one seq space');
  const d2 = await received(a, b.uid, s2, ma);
  assert.equal(d2.from, b.uid);
  assert.deepEqual(a.shown(b.uid), [s1, s2]);
  assert.deepEqual(b.shown(a.uid), [s1, s2]);
  // A new session of alice loads the history under bob's name.
  const a2 = await tokenSession(ctx, a);
  await talkTo(a2, b);
  assert.deepEqual(a2.shown(b.uid), [s1, s2]);
  const h = await history(a2, b.uid, a2.topic(b.uid).startMetaQuery().withData(1).build());
  assert.deepEqual(h.seqs, [s1, s2]);
  const froms = a2.bodies('data', (d) => d.topic === b.uid).map((d) => d.from);
  assert.ok(froms.includes(a.uid) && froms.includes(b.uid), 'history carries each message’s sender');
});

test('p2p: read receipts and unread counts as the SDK computes them', async (ctx) => {
  const a = await newUser(ctx, 'alice');
  const b = await newUser(ctx, 'bob');
  await talkTo(a, b);
  await subscribeMe(b);
  const mb = b.mark();
  for (let i = 1; i <= 3; i++) await publish(a, b.uid, `m${i}`);
  const pres = await b.wait('pres', (p) => p.topic === 'me' && p.what === 'msg' && p.src === a.uid && p.seq === 3, { since: mb, what: 'pres me msg 3' });
  assert.equal(pres.act, a.uid);
  await waitUntil(() => b.me().getContact(a.uid) && b.me().getContact(a.uid).unread === 3, 3000, 'bob sees 3 unread from alice');
  await talkTo(b, a);
  const ma = a.mark();
  b.topic(a.uid).noteRead(2);
  const info = await a.wait('info', (i) => i.what === 'read' && i.from === b.uid && i.seq === 2, { since: ma, what: 'info read from bob' });
  assert.equal(info.topic, b.uid, 'alice sees the receipt on her name for the topic (bob’s id)');
  await settle();
  assert.equal(a.topic(b.uid).msgReadCount(2), 1);
  // Stored: a new session of bob lists alice with seq 3, read 2 → unread 1.
  const b2 = await tokenSession(ctx, b);
  const subs = await subscribeMe(b2);
  const e = subs.find((s) => s.topic === a.uid);
  assert.ok(e, 'the p2p topic is in bob’s me listing under alice’s id');
  assert.equal(e.seq, 3);
  assert.equal(e.read, 2);
  assert.deepEqual(e.acs, P2P);
  assert.equal(e.public && e.public.fn, `alice ${a.login}`, 'the listing shows the peer’s public');
  await settle();
  assert.equal(b2.me().getContact(a.uid).unread, 1);
});

test('p2p: soft delete hides for one side; a recall of one’s own message reaches the peer', async (ctx) => {
  const a = await newUser(ctx, 'alice');
  const b = await newUser(ctx, 'bob');
  await talkTo(a, b);
  await talkTo(b, a);
  const mb = b.mark();
  for (let i = 1; i <= 3; i++) await publish(a, b.uid, `d${i}`);
  await received(b, a.uid, 3, mb);
  const soft = await b.topic(a.uid).delMessagesList([1], false);
  assert.equal(soft.code, 200);
  assert.ok(Number.isInteger(soft.params.del));
  assert.deepEqual(b.shown(a.uid), [2, 3]);
  assert.deepEqual((await history(a, b.uid, a.topic(b.uid).startMetaQuery().withData(1).build())).seqs, [1, 2, 3]);
  const mb2 = b.mark();
  const ma2 = a.mark();
  const hard = await a.topic(b.uid).delMessagesList([2], true);
  assert.equal(hard.code, 200);
  // One Control reaches both users; each names the conversation after the other.
  const pa = await a.wait('pres', (x) => x.what === 'del' && x.delseq && x.delseq[0].low === 2, {
    since: ma2,
    what: 'pres del of seq 2 at alice',
  });
  assert.equal(pa.topic, b.uid, 'alice sees it on usr<bob>');
  // (bob's own soft delete also comes back to his devices as pres del {low:1}.)
  const p = await b.wait('pres', (x) => x.topic === a.uid && x.what === 'del' && x.delseq && x.delseq[0].low === 2, {
    since: mb2,
    what: 'pres del of seq 2 at bob',
  });
  assert.deepEqual(p.delseq, [{ low: 2 }]);
  assert.equal(p.src, a.uid);
  const b2 = await tokenSession(ctx, b);
  await talkTo(b2, a);
  assert.deepEqual(b2.shown(a.uid), [3], 'bob: 1 soft-deleted by him, 2 recalled by alice');
});

test('p2p: a body too large to inline reaches every session of both users live', async (ctx) => {
  // Bodies over the inline threshold (4 KiB) are read from history by the loop that
  // pushes them. The two users name the conversation differently, so each user's entry
  // needs its own frame from that body. Four sessions each put both users on one loop
  // (SO_REUSEPORT spreads connections over the two loops) all but surely.
  const a = await newUser(ctx, 'alice');
  const b = await newUser(ctx, 'bob');
  const as = [a], bs = [b];
  for (let i = 0; i < 3; i++) as.push(await tokenSession(ctx, a));
  for (let i = 0; i < 3; i++) bs.push(await tokenSession(ctx, b));
  for (const c of as) await talkTo(c, b);
  for (const c of bs) await talkTo(c, a);
  const marks = [...as, ...bs].map((c) => c.mark());
  const big = 'x'.repeat(20000);
  const seq = await publish(a, b.uid, big);
  const all = [...as.map((c) => [c, b.uid]), ...bs.map((c) => [c, a.uid])];
  for (let i = 0; i < all.length; i++) {
    const [c, name] = all[i];
    if (c === a) continue; // the publishing session: its own {data} is the SDK's echo, checked by publish
    const d = await received(c, name, seq, marks[i]);
    assert.equal(d.content, big, `${c.label}: the whole body`);
  }
});

test('p2p: wrong names — unknown user 404, own id 404, pub without sub 409, data without sub 403', async (ctx) => {
  const a = await newUser(ctx, 'alice');
  const b = await newUser(ctx, 'bob');
  const ghost = 'usr' + 'A'.repeat(22);
  await expectCode(a.topic(ghost).subscribe(), 404, 'sub to a user that does not exist');
  await expectCode(a.tn.subscribe(a.uid), 404, 'sub to one’s own id');
  await expectCode(a.tn.publish(b.uid, 'not attached'), 409, 'pub without sub');
  await expectCode(a.tn.getMeta(b.uid, { what: 'data' }), 403, 'get data without sub');
  await expectCode(a.tn.getMeta(b.uid, { what: 'desc' }), 404, 'desc of a conversation that does not exist yet');
});

test('me: the session list orders p2p and groups by activity, counts unread, stays live, pages', async (ctx) => {
  const u = await newUser(ctx, 'ursula');
  const v = await newUser(ctx, 'victor');
  const w = await newUser(ctx, 'wendy');
  const g = await createGroup(u, 'U group');
  await talkTo(v, u);
  await talkTo(w, u);
  await publish(u, g, 'in the group'); // oldest activity
  await publish(w, u.uid, 'from wendy');
  await publish(v, u.uid, 'from victor 1'); // newest activity
  const u2 = await tokenSession(ctx, u);
  const subs = await subscribeMe(u2);
  assert.deepEqual(subs.map((s) => s.topic), [v.uid, w.uid, g], 'newest activity first');
  const unread = Object.fromEntries(subs.map((s) => [s.topic, s.seq - (s.read || 0)]));
  assert.deepEqual(unread, { [v.uid]: 1, [w.uid]: 1, [g]: 0 }, 'own messages are read');
  await settle();
  assert.equal(u2.me().getContact(v.uid).unread, 1);
  // Live: a new message is {pres msg} on me; the SDK's count follows.
  const m = u2.mark();
  await publish(v, u.uid, 'from victor 2');
  await u2.wait('pres', (p) => p.topic === 'me' && p.what === 'msg' && p.src === v.uid && p.seq === 2, { since: m, what: 'pres me msg from victor' });
  await waitUntil(() => u2.me().getContact(v.uid).unread === 2, 3000, 'victor’s contact shows 2 unread');
  // Reading on another session: {pres read} on me keeps the count current.
  const mr = u2.mark();
  await talkTo(u, v);
  u.topic(v.uid).noteRead(2);
  await u2.wait('pres', (p) => p.topic === 'me' && p.what === 'read' && p.src === v.uid && p.seq === 2, { since: mr, what: 'pres me read' });
  await waitUntil(() => u2.me().getContact(v.uid).unread === 0, 3000, 'read on another session clears the count');
  // Paging (qim extension): limit 2, then the cursor the ctrl after the meta carries.
  const mp = u2.mark();
  const first = await u2.tn.getMeta('me', { what: 'sub', sub: { limit: 2 } });
  const page1 = u2.bodies('meta', (x) => x.topic === 'me' && x.sub && x.id === first.id, mp)[0];
  assert.deepEqual(page1.sub.map((s) => s.topic), [v.uid, w.uid]);
  const more = await u2.wait('ctrl', (x) => x.id === first.id && x.params && x.params.cursor, { since: mp, what: 'the next-page cursor' });
  assert.equal(more.params.what, 'sub');
  const mp2 = u2.mark();
  const second = await u2.tn.getMeta('me', { what: 'sub', sub: { limit: 2, cursor: more.params.cursor } });
  const page2 = u2.bodies('meta', (x) => x.topic === 'me' && x.sub && x.id === second.id, mp2)[0];
  assert.deepEqual(page2.sub.map((s) => s.topic), [g], 'the second page continues after the first');
  await settle();
  assert.equal(u2.bodies('ctrl', (x) => x.id === second.id && x.params && x.params.cursor, mp2).length, 0, 'no cursor after the last page');
  await expectCode(u2.tn.getMeta('me', { what: 'sub', sub: { limit: 2, cursor: 'AAAA' } }), 400, 'a cursor qim did not make');
  // One entry by topic (what the SDK asks after a pres acs for a new contact).
  const mo = u2.mark();
  const one = await u2.tn.getMeta('me', { what: 'sub', sub: { topic: w.uid } });
  const only = u2.bodies('meta', (x) => x.id === one.id && x.sub, mo)[0];
  assert.deepEqual(only.sub.map((s) => s.topic), [w.uid]);
  // A changed description reaches the members' session lists as {pres upd}.
  const mu = u2.mark();
  await u.topic(g).setMeta({ desc: { public: { fn: 'U group renamed' } } });
  await u2.wait('pres', (p) => p.topic === 'me' && p.what === 'upd' && p.src === g, { since: mu, what: 'pres me upd' });
  await waitUntil(() => (u2.me().getContact(g).public || {}).fn === 'U group renamed', 3000, 'the SDK re-read the contact');
});

test('me: joining and leaving a group reach the user’s other sessions as pres acs and gone', async (ctx) => {
  const o = await newUser(ctx, 'owner');
  const j = await newUser(ctx, 'joiner');
  const g = await createGroup(o, 'Joinable');
  const j2 = await tokenSession(ctx, j);
  await subscribeMe(j2);
  const m = j2.mark();
  await join(j, g);
  const acs = await j2.wait('pres', (p) => p.topic === 'me' && p.what === 'acs' && p.src === g, { since: m, what: 'pres me acs for the join' });
  assert.equal(acs.dacs && acs.dacs.given, 'JRWPS');
  await waitUntil(() => j2.me().getContact(g), 3000, 'the SDK added the group to the contacts');
  const mg = j2.mark();
  const un = await j.topic(g).leave(true);
  assert.equal(un.code, 200);
  await j2.wait('pres', (p) => p.topic === 'me' && p.what === 'gone' && p.src === g, { since: mg, what: 'pres me gone for the leave' });
});

suite.run();
