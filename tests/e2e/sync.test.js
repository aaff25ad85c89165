// sync.test.js — qim's own client extensions over raw WebSocket frames (docs/protocol.md
// §3.1 `device`, §3.6 `cmid`, §3.11 / §4.6 `{sync}`): a retried {pub} with the same cmid is
// stored once (also after a reconnect), a device pages through its mailbox with the cursor
// it got at login, continues after a reconnect with the same device id, gets a mention entry
// for a Drafty @mention, and gets 410 "cursor expired" (with a fresh cursor to rebuild from)
// once retention trimmed past it.
//
// qimd runs with a tiny mailbox retention (4 dispatch records per lane) that is applied only
// when asked (POST /v0/admin/retention; the periodic pass is an hour away), so only the
// expiry test, which runs last, trims anything.
//   node tests/e2e/sync.test.js [--only TEXT]
'use strict';

const assert = require('node:assert/strict');
const crypto = require('node:crypto');
const { SERVICE, SERVICE_TOKEN, Suite, waitUntil } = require('./lib/harness');
const { httpRequest, newCmid, rawOpen, rawUser } = require('./lib/raw');

const suite = new Suite('sync', {
  qimdArgs: [
    '--service-token', `${SERVICE}:${SERVICE_TOKEN}`,
    '--mailbox-retain-count', '4',
    '--mailbox-retention-interval', '1h',
  ],
});
const test = (name, fn, opts) => suite.test(name, fn, opts);

const CURSOR_RE = /^[A-Za-z0-9_-]{128}$/;
const U64_RE = /^(0|[1-9][0-9]*)$/;

// A qim device: hi with a stable device id, then a new account or a token login.
async function device(ctx, label, dev, token) {
  const c = await rawOpen(ctx, label);
  const hi = await c.request('hi', { ver: '0.25.3', ua: 'qim-e2e sync', device: dev });
  assert.equal(hi.code, 201);
  const ctrl = token ? await c.loginToken(token) : await c.account(label.replace(/[^a-z]/gi, '').slice(0, 6));
  c.dev = dev;
  c.cursor = ctrl.params.cursor;
  assert.match(c.cursor || '', CURSOR_RE, `${label}: the login reply carries a cursor`);
  return c;
}

// Sends {sync} and returns its answer: {sync: frame} or {ctrl: frame}.
async function sync(c, body = {}) {
  const id = c.id();
  const m = c.mark();
  c.send({ sync: { id, ...body } });
  const e = await c.log.wait((msg) => (msg.sync && msg.sync.id === id) || (msg.ctrl && msg.ctrl.id === id), {
    since: m,
    what: `the answer to {sync} ${id}`,
  });
  return e.msg;
}

// Pages from `cursor` until `done(entries)` holds, checking every page; returns
// {entries, cursor, pages}.
async function drain(c, cursor, limit, done, what) {
  const entries = [];
  let pages = 0;
  await waitUntil(async () => {
    const r = await sync(c, { cursor, limit });
    assert.ok(r.sync, `a page, got ${JSON.stringify(r)}`);
    const p = r.sync;
    pages++;
    assert.ok(Array.isArray(p.entries));
    assert.ok(p.entries.length <= limit, `at most ${limit} entries per page, got ${p.entries.length}`);
    assert.match(p.covered, U64_RE);
    assert.match(p.watermark, U64_RE);
    assert.match(p.cursor, CURSOR_RE);
    if (p.more) assert.ok(p.entries.length > 0, 'a page with more has entries');
    entries.push(...p.entries);
    cursor = p.cursor;
    return done(entries);
  }, 20000, what);
  return { entries, cursor, pages };
}

function messagesOf(entries, topic) {
  return entries.filter((e) => e.type === 'message' && e.topic === topic);
}

// Event ids strictly increase (mailbox order) and never repeat.
function checkOrder(entries) {
  for (let i = 1; i < entries.length; i++)
    assert.ok(BigInt(entries[i].event_id) > BigInt(entries[i - 1].event_id), `event ids increase at ${i}`);
}

// Publishes texts pipelined, 16 in flight (well under the session's queue of 32; concurrent
// requests commit in any order); returns the texts in seq order.
async function pubAll(c, topic, texts) {
  const acks = new Array(texts.length);
  let next = 0;
  await Promise.all(Array.from({ length: 16 }, async () => {
    while (next < texts.length) {
      const i = next++;
      acks[i] = await c.request('pub', { topic, content: texts[i], cmid: newCmid() }, { ctrlOnly: true, timeout: 20000 });
    }
  }));
  for (const a of acks) assert.equal(a.code, 202, `pub answers 202, got ${a.code} ${a.text}`);
  const bySeq = texts.map((t, i) => [acks[i].params.seq, t]).sort((x, y) => x[0] - y[0]);
  return bySeq.map((x) => x[1]);
}

test('login: a qim device gets a cursor; a Tinode session gets none and its {sync} is refused', async (ctx) => {
  const d = await device(ctx, 'dev', `dev-${crypto.randomUUID()}`);
  assert.equal(d.cursor.length, 128);
  const t = await rawUser(ctx, 'tinode');
  assert.equal(t.token.length > 0, true);
  const r = await sync(t, {});
  assert.equal(r.ctrl && r.ctrl.code, 400, 'no hi.device: 400');
  const first = await sync(d, {});
  assert.ok(first.sync, 'without a cursor: a page of what the mailbox holds');
  assert.match(first.sync.cursor, CURSOR_RE);
  const bad = await sync(d, { cursor: 'not-a-cursor' });
  assert.equal(bad.ctrl.code, 400);
  assert.equal(bad.ctrl.text, 'cursor invalid');
});

test('cmid: retried {pub} gets the same seq, also after a reconnect; one stored message, one mailbox entry', async (ctx) => {
  const dev = `writer-${crypto.randomUUID()}`;
  const a = await device(ctx, 'writer', dev);
  const grp = await a.createGroup('cmid group');
  const cmid = newCmid();
  const first = await a.pub(grp, 'once only', { cmid });
  assert.equal(first.code, 202);
  const same = await a.pub(grp, 'once only', { cmid });
  assert.equal(same.params.seq, first.params.seq, 'a retry on the same connection');
  a.close();
  await a.closed;
  const a2 = await device(ctx, 'writer-again', dev, a.token);
  await a2.join(grp);
  const again = await a2.pub(grp, 'once only', { cmid });
  assert.equal(again.code, 202, 'the retry after reconnect is acknowledged');
  assert.equal(again.params.seq, first.params.seq, 'the retry after reconnect gets the original seq');
  const next = await a2.pub(grp, 'the next one', { cmid: newCmid() });
  assert.equal(next.params.seq, first.params.seq + 1, 'nothing new was stored: the next message takes the next seq');
  const h = await a2.getData(grp, { since: 1 });
  assert.equal(h.ctrl.params.count, 2, 'two messages in history');
  // The writer's own mailbox, from the cursor it got before publishing: one entry per message.
  const { entries } = await drain(a2, a.cursor, 50, (es) => messagesOf(es, grp).length >= 2, 'both messages in the mailbox');
  const msgs = messagesOf(entries, grp);
  assert.deepEqual(msgs.map((e) => e.seq), [first.params.seq, next.params.seq]);
  assert.equal(msgs[0].cmid, cmid, 'the sender\'s mailbox entry carries its cmid');
  assert.equal(msgs[0].content, 'once only');
  assert.equal(msgs[0].from, a.uid);
});

test('sync: pages through 300 messages of 3 groups in order, nothing missed or repeated; membership and delete entries', async (ctx) => {
  const r = await device(ctx, 'reader', `reader-${crypto.randomUUID()}`);
  const writers = [];
  const groups = [];
  for (let i = 0; i < 3; i++) {
    const w = await rawUser(ctx, `w${i}`);
    const g = await w.createGroup(`sync group ${i}`);
    await r.join(g);
    writers.push(w);
    groups.push(g);
  }
  const N = 100;
  const texts = (i) => Array.from({ length: N }, (_, k) => `g${i} m${k + 1}`);
  const sent = await Promise.all(writers.map((w, i) => pubAll(w, groups[i], texts(i))));
  const limit = 37;
  const got = await drain(r, r.cursor, limit, (es) => groups.every((g) => messagesOf(es, g).length >= N), 'all 300 messages');
  assert.ok(got.pages >= Math.ceil((3 * N) / limit), `paged (${got.pages} pages)`);
  checkOrder(got.entries);
  const ids = new Set(got.entries.map((e) => e.event_id));
  assert.equal(ids.size, got.entries.length, 'no entry twice');
  groups.forEach((g, i) => {
    const m = messagesOf(got.entries, g);
    assert.equal(m.length, N, `${g}: exactly ${N} messages`);
    assert.deepEqual(m.map((e) => e.seq), Array.from({ length: N }, (_, k) => k + 1), `${g}: seqs 1..${N} in order`);
    assert.deepEqual(m.map((e) => e.content), sent[i], `${g}: the contents`);
    assert.ok(m.every((e) => e.from === writers[i].uid && e.cmid === undefined), 'from the writer; no cmid in others\' mailboxes');
    const joins = got.entries.filter((e) => e.type === 'membership' && e.topic === g);
    assert.ok(joins.some((e) => e.content.changes.some((c) => c.user === r.uid && c.change === 'added')),
      `${g}: the reader's join is a membership entry`);
  });
  // Nothing more: the next page from the last cursor is empty.
  const tail = await sync(r, { cursor: got.cursor, limit });
  assert.equal(tail.sync.entries.length, 0);
  assert.equal(tail.sync.more, undefined);
  // A hard delete reaches the mailbox as a control entry a client can apply.
  const del = await writers[0].request('del', { topic: groups[0], what: 'msg', hard: true, delseq: [{ low: 1, hi: 3 }] });
  assert.equal(del.code, 200, `del answers 200, got ${del.code} ${del.text}`);
  const d = await drain(r, got.cursor, limit, (es) => es.some((e) => e.type === 'control' && e.topic === groups[0]), 'the delete');
  const c = d.entries.find((e) => e.type === 'control');
  assert.equal(c.content.op, 'del');
  assert.equal(c.content.hard, true);
  assert.deepEqual([...c.content.deleted, ...(c.content.recalled || [])], [{ low: 1, hi: 3 }], JSON.stringify(c.content));
}, { timeout: 60000 });

test('sync: a reconnect with the same device id continues from its cursor; another device\'s cursor is refused', async (ctx) => {
  const dev = `phone-${crypto.randomUUID()}`;
  const r = await device(ctx, 'phone', dev);
  const w = await rawUser(ctx, 'writer');
  const g = await w.createGroup('reconnect group');
  await r.join(g);
  await pubAll(w, g, ['one', 'two', 'three']);
  const before = await drain(r, r.cursor, 10, (es) => messagesOf(es, g).length >= 3, 'the first three');
  r.close();
  await r.closed;
  const away = await pubAll(w, g, ['four', 'five']);
  const back = await device(ctx, 'phone-again', dev, r.token);
  const after = await drain(back, before.cursor, 10, (es) => messagesOf(es, g).length >= 2, 'the two sent while away');
  assert.deepEqual(messagesOf(after.entries, g).map((e) => e.content), away, 'exactly what was missed');
  const other = await device(ctx, 'laptop', `laptop-${crypto.randomUUID()}`, r.token);
  const refused = await sync(other, { cursor: before.cursor });
  assert.equal(refused.ctrl.code, 400, 'a cursor of another device');
  assert.equal(refused.ctrl.text, 'cursor invalid');
});

test('sync: a p2p conversation is named by the peer\'s usr… on each side (own and peer entries); an own group entry stays grp…', async (ctx) => {
  const a = await device(ctx, 'alice', `alice-${crypto.randomUUID()}`);
  const b = await device(ctx, 'bob', `bob-${crypto.randomUUID()}`);
  const created = await a.join(b.uid);
  assert.equal(created.topic, b.uid, 'alice names the p2p topic after bob');
  await b.join(a.uid);
  const g = await a.createGroup('alice\'s own group');
  assert.equal((await a.pub(b.uid, 'a to b', { cmid: newCmid() })).code, 202);
  assert.equal((await b.pub(a.uid, 'b to a', { cmid: newCmid() })).code, 202);
  assert.equal((await a.pub(g, 'a in group', { cmid: newCmid() })).code, 202);
  const both = (peer) => (es) => messagesOf(es, peer).length >= 2;
  const pa = await drain(a, a.cursor, 50, (es) => both(b.uid)(es) && messagesOf(es, g).length >= 1, 'alice\'s three messages');
  const pb = await drain(b, b.cursor, 50, both(a.uid), 'bob\'s two messages');
  for (const [who, got, peer] of [['alice', pa, b], ['bob', pb, a]]) {
    const m = messagesOf(got.entries, peer.uid);
    assert.deepEqual(m.map((e) => e.content), ['a to b', 'b to a'], `${who}: both directions under the peer's name`);
    assert.deepEqual(m.map((e) => e.seq), [1, 2], `${who}: seqs of the one conversation`);
    assert.deepEqual(m.map((e) => e.from), [a.uid, b.uid], `${who}: senders`);
    assert.ok(got.entries.every((e) => e.topic === undefined || !e.topic.startsWith('p2p')), `${who}: no p2p… name on the wire`);
    const foreign = got.entries.filter((e) => e.topic && e.topic.startsWith('grp') && e.topic !== g);
    assert.deepEqual(foreign, [], `${who}: no grp… name for the p2p conversation`);
  }
  assert.deepEqual(messagesOf(pa.entries, g).map((e) => e.content), ['a in group'], 'alice\'s own group message is named grp…');
});

test('sync: a Drafty @mention from a Tinode {pub} gives the mentioned member a mention entry; head and content arrive as sent', async (ctx) => {
  const r = await device(ctx, 'mentioned', `mentioned-${crypto.randomUUID()}`);
  const other = await device(ctx, 'bystander', `bystander-${crypto.randomUUID()}`);
  const w = await rawUser(ctx, 'mentioner');
  const g = await w.createGroup('mention group');
  await r.join(g);
  await other.join(g);
  const content = { txt: 'hi @you', fmt: [{ at: 3, len: 4 }], ent: [{ tp: 'MN', data: { val: r.uid } }] };
  const head = { mime: 'text/x-drafty' };
  const live = other.mark();
  const ack = await w.request('pub', { topic: g, head, content, cmid: newCmid() }, { ctrlOnly: true });
  assert.equal(ack.code, 202, `pub answers 202, got ${ack.code} ${ack.text}`);
  // Live, to a member attached to the group: the stored head and content, exactly.
  const data = await other.log.wait((msg) => msg.data && msg.data.topic === g && msg.data.seq === ack.params.seq,
    { since: live, what: 'the live {data}' });
  assert.deepEqual(data.msg.data.content, content);
  assert.deepEqual(data.msg.data.head, head);
  // The mentioned member's mailbox: the message, then its mention entry.
  const got = await drain(r, r.cursor, 50, (es) => es.some((e) => e.type === 'mention' && e.topic === g), 'the mention');
  const m = messagesOf(got.entries, g);
  assert.equal(m.length, 1);
  assert.deepEqual(m[0].content, content);
  assert.deepEqual(m[0].head, head);
  const i = got.entries.indexOf(m[0]);
  assert.equal(got.entries[i + 1].type, 'mention', 'the mention follows its message');
  assert.equal(got.entries[i + 1].seq, ack.params.seq);
  // Someone not mentioned gets the message alone (an event group is never split across pages).
  const ob = await drain(other, other.cursor, 50, (es) => messagesOf(es, g).length >= 1, 'the bystander\'s message');
  assert.deepEqual(ob.entries.filter((e) => e.type === 'mention'), []);
});

test('sync: a cursor behind retention gets 410 with a fresh cursor; rebuild from history, then sync on', async (ctx) => {
  const r = await device(ctx, 'stale', `stale-${crypto.randomUUID()}`);
  const w = await rawUser(ctx, 'writer');
  const g = await w.createGroup('expiry group');
  await r.join(g);
  const old = r.cursor;
  await pubAll(w, g, Array.from({ length: 20 }, (_, k) => `old ${k + 1}`));
  // Wait until the reader's lane materialized them, then trim.
  await drain(r, old, 100, (es) => messagesOf(es, g).length >= 20, 'the 20 messages');
  const kick = await httpRequest(ctx, { method: 'POST', path: '/v0/admin/retention', headers: { 'X-Qim-Service-Token': SERVICE_TOKEN }, body: {} });
  assert.equal(kick.status, 202, kick.body);
  const expired = await waitUntil(async () => {
    const a = await sync(r, { cursor: old });
    return a.ctrl && a.ctrl.code === 410 ? a.ctrl : null;
  }, 10000, 'the old cursor to expire');
  assert.equal(expired.text, 'cursor expired');
  assert.match(expired.params.trim_watermark, U64_RE);
  assert.match(expired.params.cursor, CURSOR_RE, 'the 410 carries a fresh cursor');
  // Rebuild: history for the conversation, then the fresh cursor for what comes next.
  const h = await r.getData(g, { since: 1 });
  assert.equal(h.data.length, 20, 'history still has every message');
  await pubAll(w, g, ['after rebuild']);
  const next = await drain(r, expired.params.cursor, 10, (es) => messagesOf(es, g).length >= 1, 'the new message');
  assert.deepEqual(messagesOf(next.entries, g).map((e) => e.content), ['after rebuild'], 'only what came after the rebuild cursor');
});

suite.run();
