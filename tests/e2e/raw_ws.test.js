// raw_ws.test.js — qimd's WebSocket endpoint seen through exact frames (npm `ws`, no SDK):
// the probe, the hi reply, malformed and unknown frames, id echo, ordering rules, the
// size limits (413 for an oversized {pub}, close 1009 for an oversized frame), the HTTP
// answers before the upgrade, and qim's cmid extension (a retried {pub} is stored once).
//   node tests/e2e/raw_ws.test.js [--server 127.0.0.1:6060] [--only TEXT]
'use strict';

const assert = require('node:assert/strict');
const crypto = require('node:crypto');
const { Suite, scaled, sleep } = require('./lib/harness');
const { TS_RE } = require('./lib/frames');
const { httpRequest, newCmid, rawOpen, rawUser, refusedUpgrade } = require('./lib/raw');

const suite = new Suite('raw_ws');
const test = (name, fn, opts) => suite.test(name, fn, opts);

// A user with a group of their own and a second member attached to it.
async function pair(ctx) {
  const a = await rawUser(ctx, 'alice');
  const b = await rawUser(ctx, 'bob');
  const grp = await a.createGroup('raw pair');
  await b.join(grp);
  return { a, b, grp };
}

test('probe: text frame "1" is answered with "0", before and after hi', async (ctx) => {
  const r = await rawOpen(ctx, 'raw');
  let m = r.mark();
  r.send('1');
  let e = await r.next(m, 'the probe answer');
  assert.equal(e.raw, '0');
  await r.hi();
  m = r.mark();
  r.send('1');
  e = await r.next(m, 'the probe answer after hi');
  assert.equal(e.raw, '0');
});

test('upgrade: permessage-deflate offered by the client is declined', async (ctx) => {
  const r = await rawOpen(ctx, 'raw');
  assert.equal(r.ws.extensions, '', 'no extension negotiated');
  await r.hi();
});

test('hi: 201 created with params ver and maxMessageSize, ts in RFC 3339', async (ctx) => {
  const r = await rawOpen(ctx, 'raw');
  const ctrl = await r.request('hi', { ver: '0.25.3', ua: 'qim-e2e raw', lang: 'en', platf: 'web' });
  assert.equal(ctrl.code, 201);
  assert.equal(ctrl.text, 'created');
  assert.equal(ctrl.params.ver, '0.25');
  assert.ok(Number.isInteger(ctrl.params.maxMessageSize) && ctrl.params.maxMessageSize > 0);
  if (!ctx.server.external) assert.equal(ctrl.params.maxMessageSize, 131072);
  assert.match(ctrl.ts, TS_RE);
  assert.ok(Math.abs(Date.parse(ctrl.ts) - Date.now()) < 60000, 'ts is about now');
});

test('hi: again with the same ver 200, another ver 409; old ver 505; bad ver 400', async (ctx) => {
  const r = await rawOpen(ctx, 'raw');
  await r.hi();
  assert.equal((await r.request('hi', { ver: '0.25.3' })).code, 200, 'same ver again');
  assert.equal((await r.request('hi', { ver: '0.24.1' })).code, 409, 'a different ver');
  const old = await rawOpen(ctx, 'old');
  assert.equal((await old.request('hi', { ver: '0.15.0' })).code, 505, 'ver below 0.20');
  const bad = await rawOpen(ctx, 'bad');
  assert.equal((await bad.request('hi', { ver: 'banana' })).code, 400, 'unparsable ver');
});

test('malformed JSON: ctrl 400 "malformed" without id; the connection stays usable', async (ctx) => {
  const r = await rawOpen(ctx, 'raw');
  for (const junk of ['{"hi":{"id":"1","ver":"0.25.3"}', 'not json at all', '{"hi":{"id":"2","id":"3","ver":"0.25.3"}}', '[1,2,3]']) {
    const m = r.mark();
    r.send(junk);
    const ctrl = await r.wait('ctrl', null, { since: m, what: `the answer to ${junk}` });
    assert.equal(ctrl.code, 400, `${junk} → 400`);
    assert.equal(ctrl.text, 'malformed');
    assert.equal(ctrl.id, undefined, `${junk} → no id`);
  }
  await r.hi();
});

test('unknown top-level key: ctrl 400 without id; payload not an object: 400', async (ctx) => {
  const r = await rawOpen(ctx, 'raw');
  await r.hi();
  let m = r.mark();
  r.send({ foo: { id: 'f1', topic: 'me' } });
  let ctrl = await r.wait('ctrl', null, { since: m, what: 'the answer to {foo}' });
  assert.equal(ctrl.code, 400);
  assert.equal(ctrl.id, undefined);
  m = r.mark();
  r.send({ pub: 'hello' });
  ctrl = await r.wait('ctrl', null, { since: m, what: 'the answer to {pub:"hello"}' });
  assert.equal(ctrl.code, 400);
  const ok = await r.request('hi', { ver: '0.25.3' });
  assert.equal(ok.code, 200, 'still usable');
});

test('id: echoed exactly, non-ASCII and JSON escapes included', async (ctx) => {
  const r = await rawOpen(ctx, 'raw');
  let m = r.mark();
  r.send('{"hi":{"id":"abc-é 1","ver":"0.25.3"}}');
  let ctrl = await r.wait('ctrl', null, { since: m });
  assert.equal(ctrl.id, 'abc-é 1');
  assert.equal(ctrl.code, 201);
  m = r.mark();
  r.send('{"hi":{"id":"abc-\\u00e9 \\"2\\"","ver":"0.25.3"}}');
  ctrl = await r.wait('ctrl', null, { since: m });
  assert.equal(ctrl.id, 'abc-é "2"', 'escapes undone, the string value echoed');
  m = r.mark();
  r.send('{"hi":{"id":"😀 3","ver":"0.25.3"}}');
  ctrl = await r.wait('ctrl', null, { since: m });
  assert.equal(ctrl.id, '😀 3');
});

test('order: before hi 409 with the id; a note before hi gets no reply', async (ctx) => {
  const r = await rawOpen(ctx, 'raw');
  const ctrl = await r.request('acc', { user: 'new', scheme: 'basic', secret: Buffer.from('abcdef:abcdefg').toString('base64'), login: true });
  assert.equal(ctrl.code, 409);
  assert.equal((await r.request('get', { topic: 'me', what: 'desc' })).code, 409);
  const m = r.mark();
  r.send({ note: { topic: 'me', what: 'kp' } });
  r.send({ hi: { id: 'after-note', ver: '0.25.3' } });
  const e = await r.next(m, 'the next frame after a note and a hi');
  assert.equal(e.msg && e.msg.ctrl && e.msg.ctrl.id, 'after-note', 'the note was dropped silently');
});

test('order: before login 401 with the id for sub/pub/get/leave/del; a note gets no reply', async (ctx) => {
  const r = await rawOpen(ctx, 'raw');
  await r.hi();
  const grp = 'grpAAAAAAAAAAAAAAAAAAAAAA';
  assert.equal((await r.request('sub', { topic: 'me' })).code, 401);
  assert.equal((await r.request('pub', { topic: grp, content: 'x' })).code, 401);
  assert.equal((await r.request('get', { topic: 'me', what: 'desc' })).code, 401);
  assert.equal((await r.request('leave', { topic: grp })).code, 401);
  assert.equal((await r.request('del', { topic: grp, what: 'msg', delseq: [{ low: 1 }] })).code, 401);
  const m = r.mark();
  r.send({ note: { topic: grp, what: 'read', seq: 1 } });
  r.send({ hi: { id: 'after-note', ver: '0.25.3' } });
  const e = await r.next(m, 'the next frame after a note and a hi');
  assert.equal(e.msg && e.msg.ctrl && e.msg.ctrl.id, 'after-note', 'the note was dropped silently');
});

test('bad requests: get with no known what 400; del beyond the last seq 400; leave unsub me 403', async (ctx) => {
  const { a, grp } = await pair(ctx);
  assert.equal((await a.pub(grp, 'one')).code, 202);
  const get = await a.request('get', { topic: grp, what: 'bogus words' });
  assert.equal(get.code, 400, 'get whose what names nothing known');
  const del = await a.request('del', { topic: grp, what: 'msg', delseq: [{ low: 5 }] });
  assert.equal(del.code, 400, 'deleting a seq above the last one');
  const del0 = await a.request('del', { topic: grp, what: 'msg', delseq: [{ low: 0 }] });
  assert.equal(del0.code, 400, 'deleting seq 0');
  assert.equal((await a.request('sub', { topic: 'me' })).code, 200);
  const leave = await a.request('leave', { topic: 'me', unsub: true });
  assert.equal(leave.code, 403, 'unsubscribing from me');
});

test('notes: a read beyond the last seq is dropped; a note on a topic left gets 409 without id', async (ctx) => {
  const { a, b, grp } = await pair(ctx);
  const mb = b.mark();
  assert.equal((await a.pub(grp, 'read me')).code, 202);
  await b.wait('data', (d) => d.topic === grp && d.seq === 1, { since: mb });
  const ma = a.mark();
  b.send({ note: { topic: grp, what: 'read', seq: 99 } });
  b.send({ note: { topic: grp, what: 'read', seq: 1 } });
  const info = await a.wait('info', (i) => i.topic === grp, { since: ma, what: 'info read' });
  assert.deepEqual([info.what, info.from, info.seq], ['read', b.uid, 1], 'only the valid note was relayed');
  assert.equal((await b.request('leave', { topic: grp })).code, 200);
  const m = b.mark();
  b.send({ note: { topic: grp, what: 'read', seq: 1 } });
  const ctrl = await b.wait('ctrl', null, { since: m, what: 'the answer to a note on a topic the session left' });
  assert.equal(ctrl.code, 409);
  assert.equal(ctrl.id, undefined);
});

test('oversized {pub}: ctrl 413 with the id; the connection stays usable', async (ctx) => {
  const { a, b, grp } = await pair(ctx);
  const hi = a.log.filter((x) => x.ctrl && x.ctrl.code === 201)[0].msg.ctrl;
  const max = hi.params.maxMessageSize;
  const mb = b.mark();
  const big = await a.pub(grp, 'y'.repeat(max + 64));
  assert.equal(big.code, 413);
  assert.equal(big.topic, grp);
  const small = await a.pub(grp, 'fits');
  assert.equal(small.code, 202);
  assert.equal(small.text, 'accepted');
  assert.equal(small.params.seq, 1, 'the refused pub took no seq');
  const d = await b.wait('data', (x) => x.topic === grp, { since: mb });
  assert.equal(d.seq, 1);
  assert.equal(d.content, 'fits');
  assert.equal(d.from, a.uid);
});

test('oversized frame: the server closes with 1009', async (ctx) => {
  const r = await rawOpen(ctx, 'raw', { deflate: false });
  const hi = await r.hi();
  // A masked text frame whose header announces 16 × maxMessageSize bytes, written to the
  // socket by hand and streamed until the server closes: a server that checks the header
  // closes at once, one that counts bytes closes once past its limit.
  const len = 16 * hi.params.maxMessageSize;
  const header = Buffer.alloc(14);
  header[0] = 0x81; // FIN + text
  header[1] = 0x80 | 127; // masked, 64-bit length
  header.writeBigUInt64BE(BigInt(len), 2);
  crypto.randomBytes(4).copy(header, 10);
  const sock = r.ws._socket;
  sock.on('error', () => {}); // the server may reset while we still write
  sock.write(header);
  const chunk = Buffer.alloc(64 * 1024, 0x20);
  let sent = 0;
  while (sent < len && !r.closeInfo && !sock.destroyed) {
    const ok = sock.write(chunk);
    sent += chunk.length;
    if (!ok) await Promise.race([new Promise((res) => sock.once('drain', res)), r.closed, sleep(scaled(2000))]);
  }
  const info = await Promise.race([r.closed, sleep(scaled(5000)).then(() => null)]);
  assert.ok(info, 'the server closed the connection');
  assert.equal(info.code, 1009, `close code 1009 (message too big), got ${info.code}`);
});

test('API key: a bad or missing key gets HTTP 403 with a JSON ctrl body before the upgrade', async (ctx) => {
  for (const path of ['/v0/channels?apikey=AQAAAAABAAD_badbadbadbadbad', '/v0/channels']) {
    const res = await refusedUpgrade(ctx, path);
    assert.equal(res.status, 403, `${path} → 403`);
    const body = JSON.parse(res.body);
    assert.equal(body.ctrl && body.ctrl.code, 403);
    assert.equal(body.ctrl.text, 'valid API key required');
  }
});

test('HTTP: other methods on /v0/channels get 405, unknown paths 404', async (ctx) => {
  const post = await httpRequest(ctx, { method: 'POST', path: '/v0/channels?apikey=AQEAAAABAAD_rAp4DJh05a1HAwFT3A6K', body: '{}' });
  assert.equal(post.status, 405);
  const missing = await httpRequest(ctx, { path: '/v0/no-such-thing' });
  assert.equal(missing.status, 404);
});

test('cmid: the same {pub} sent twice gets the same seq; one {data}; one message in history', async (ctx) => {
  const { a, b, grp } = await pair(ctx);
  const cmid = newCmid();
  assert.equal(cmid.length, 22);
  const mb = b.mark();
  const first = await a.pub(grp, 'exactly once', { cmid });
  assert.equal(first.code, 202);
  const again = await a.pub(grp, 'exactly once', { cmid });
  assert.equal(again.code, 202, 'the retry is acknowledged too');
  assert.equal(again.params.seq, first.params.seq, 'the retry gets the original seq');
  await b.wait('data', (d) => d.topic === grp && d.seq === first.params.seq, { since: mb });
  const other = await a.pub(grp, 'a different message', { cmid: newCmid() });
  assert.equal(other.params.seq, first.params.seq + 1, 'the next message takes the next seq');
  await b.wait('data', (d) => d.topic === grp && d.seq === other.params.seq, { since: mb });
  const got = b.log.filter((m) => m.data && m.data.topic === grp, mb).map((e) => e.msg.data.seq);
  assert.deepEqual(got, [first.params.seq, other.params.seq], 'one {data} per message');
  const h = await b.getData(grp, { since: 1 });
  assert.equal(h.ctrl.code, 208);
  assert.equal(h.ctrl.params.count, 2);
  assert.deepEqual(h.data.map((d) => d.seq).sort((x, y) => x - y), [1, 2]);
  assert.equal(h.data.find((d) => d.seq === 1).content, 'exactly once');
});

test('cmid: reused with other content 409; malformed cmid 400 with the id', async (ctx) => {
  const { a, grp } = await pair(ctx);
  const cmid = newCmid();
  assert.equal((await a.pub(grp, 'original', { cmid })).code, 202);
  const clash = await a.pub(grp, 'something else', { cmid });
  assert.equal(clash.code, 409, 'same cmid, different content');
  for (const bad of [crypto.randomBytes(16).toString('hex'), crypto.randomBytes(16).toString('base64'), 'AAAAAAAAAAAAAAAAAAAAAA', 'short']) {
    const id = `bad-cmid-${bad.length}`;
    const ctrl = await a.pub(grp, 'x', { id, cmid: bad });
    assert.equal(ctrl.code, 400, `cmid ${bad} → 400`);
    assert.equal(ctrl.id, id);
  }
});

suite.run();
