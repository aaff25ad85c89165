// bad_input.test.js — hostile and malformed input, one row per case (issue 12). Each row
// opens a fresh raw WebSocket in a given state (just open, after {hi}, logged in), sends its
// frame and asserts the exact answer: a {ctrl} code (with or without the request id), a
// close code, or nothing at all. Where the protocol keeps the connection, the row then
// proves it still works (a {hi} on it is answered), and after every row a witness on
// another connection publishes and gets its 202 — bad input on one connection never
// disturbs another. qimd runs with a second API key (tenant 2) for the cross-tenant rows.
//   node tests/e2e/bad_input.test.js [--only TEXT]
'use strict';

const assert = require('node:assert/strict');
const { API_KEY, Suite, uniqueName } = require('./lib/harness');
const { rawOpen, rawUser, newCmid } = require('./lib/raw');

const KEY2 = 'qimTenantTwoKey-0123456789abcdef';
const suite = new Suite('bad_input', { qimdArgs: ['--api-key', `${API_KEY}:1`, '--api-key', `${KEY2}:2`] });
const MAX_MESSAGE_SIZE = 131072;

// Shared fixture made by the first row: a user with a group, a witness member attached to
// it, and a user of tenant 2 (their connections outlive single rows).
let fx = null;
async function fixture(ctx) {
  if (fx) return fx;
  const keep = { server: ctx.server, problems: ctx.problems, cleanup() {}, dump() {}, unique: uniqueName };
  const owner = await rawUser(keep, 'owner');
  const grp = await owner.createGroup('bad input');
  const witness = await rawUser(keep, 'witness');
  await witness.join(grp);
  const other = await rawOpen(keep, 'tenant2', { apikey: KEY2 });
  await other.hi();
  await other.account('tentwo');
  const otherGrp = await other.createGroup('tenant 2 group');
  fx = { owner, grp, witness, other, otherGrp };
  return fx;
}

// A connection in the row's state: 'open', 'hi' or 'login' (as the fixture's owner, by token).
async function connect(ctx, state, opts) {
  const c = await rawOpen(ctx, `row-${state}`, opts);
  if (state === 'open') return c;
  await c.hi();
  if (state === 'login') await c.loginToken(fx.owner.token);
  return c;
}

const J = JSON.stringify;
const deep = (n) => '['.repeat(n) + ']'.repeat(n);
const T = (s) => s.replace('$GRP', () => fx.grp).replace('$OTHER', () => fx.otherGrp);

// Rows: [name, state, frame (string, Buffer, or function of the fixture), expectation]
// expectation: {code, id} (id: the id the ctrl must carry, null = none), {close}, {silent}.
const ROWS = [
  // malformed JSON
  ['malformed: not JSON', 'open', 'hello there', { code: 400, id: null }],
  ['malformed: truncated object', 'open', '{"hi":{"id":"t1","ver":"0.25.3"}', { code: 400, id: null }],
  ['malformed: trailing bytes after the object', 'open', '{"hi":{"id":"t2","ver":"0.25.3"}} {}', { code: 400, id: null }],
  ['malformed: \\u0000 inside a string', 'open', '{"hi":{"id":"t3","ver":"0.25.3","ua":"a\\u0000b"}}', { code: 400, id: null }],
  ['malformed: integer beyond 64 bits', 'login', '{"get":{"id":"t4","topic":"me","what":"desc","desc":{"ims":1},"x":123456789012345678901234567890}}', { code: 400, id: null }],
  ['malformed: single quotes', 'open', "{'hi':{'id':'t5'}}", { code: 400, id: null }],
  ['malformed: empty text frame', 'open', '', { code: 400, id: null }],
  // non-object frames
  ['non-object: array', 'open', '[{"hi":{"id":"n1","ver":"0.25.3"}}]', { code: 400, id: null }],
  ['non-object: string', 'open', '"hi"', { code: 400, id: null }],
  ['non-object: number', 'open', '42', { code: 400, id: null }],
  ['non-object: null', 'open', 'null', { code: 400, id: null }],
  ['non-object: payload is an array', 'open', '{"hi":[1]}', { code: 400, id: null }],
  ['non-object: payload is a string', 'login', '{"pub":"hello"}', { code: 400, id: null }],
  // unknown and duplicate keys
  ['unknown: no known payload key', 'open', '{"hello":{"id":"u1"}}', { code: 400, id: null }],
  ['unknown: extra top-level key beside hi is ignored', 'open', '{"hi":{"id":"u2","ver":"0.25.3"},"zzz":1}', { code: 201, id: 'u2' }],
  ['unknown: unknown field inside hi is ignored', 'open', '{"hi":{"id":"u3","ver":"0.25.3","zzz":{"a":1}}}', { code: 201, id: 'u3' }],
  ['duplicate: payload key twice', 'open', '{"hi":{"id":"d1","ver":"0.25.3"},"hi":{"id":"d2","ver":"0.25.3"}}', { code: 400, id: null }],
  ['duplicate: nested key twice', 'open', '{"hi":{"id":"d3","ver":"0.25.3","ver":"0.25.3"}}', { code: 400, id: null }],
  ['duplicate: id twice', 'open', '{"hi":{"id":"d4","id":"d5","ver":"0.25.3"}}', { code: 400, id: null }],
  ['duplicate: deep inside content', 'login', () => `{"pub":{"id":"d6","topic":"${fx.grp}","content":{"a":{"b":1,"b":2}}}}`, { code: 400, id: null }],
  ['several payload keys: 400 with the first id', 'login', '{"get":{"id":"s2","topic":"me","what":"desc"},"hi":{"id":"s1","ver":"0.25.3"}}', { code: 400, id: 's1' }],
  // deep nesting
  ['deep: 40 levels of arrays', 'open', () => `{"hi":{"id":"x1","ver":"0.25.3","ua":${deep(40)}}}`, { code: 400, id: null }],
  ['deep: 100000 open brackets', 'open', () => '['.repeat(100000), { code: 400, id: null }],
  ['deep: content 35 levels deep in a pub', 'login', () => `{"pub":{"id":"x2","topic":"${fx.grp}","content":${deep(35)}}}`, { code: 400, id: null }],
  ['deep: brackets inside strings do not count', 'open', () => `{"hi":{"id":"x3","ver":"0.25.3","ua":"${'['.repeat(100)}"}}`, { code: 201, id: 'x3' }],
  // invalid UTF-8 and binary frames
  ['utf-8: invalid bytes in a text frame close with 1007', 'open', Buffer.from([0x7b, 0x22, 0xc3, 0x28, 0x22, 0x7d]), { close: 1007 }],
  ['utf-8: an overlong encoding closes with 1007', 'hi', Buffer.from([0x22, 0xc0, 0xaf, 0x22]), { close: 1007 }],
  ['utf-8: a lone surrogate closes with 1007', 'login', Buffer.from([0x22, 0xed, 0xa0, 0x80, 0x22]), { close: 1007 }],
  ['binary: a binary frame is 400 malformed', 'open', { binary: Buffer.from('{"hi":{"id":"b1","ver":"0.25.3"}}') }, { code: 400, id: null }],
  ['binary: after login too', 'login', { binary: Buffer.from([0, 1, 2, 3, 255]) }, { code: 400, id: null }],
  // sizes
  ['oversized: a frame beyond the limit closes with 1009', 'login', () => `{"pub":{"id":"o1","topic":"${fx.grp}","content":"${'x'.repeat(4 * MAX_MESSAGE_SIZE + 70000)}"}}`, { close: 1009 }],
  ['oversized: a {pub} beyond max_message_size is 413 with the id', 'login', () => `{"pub":{"id":"o2","topic":"${fx.grp}","content":"${'x'.repeat(MAX_MESSAGE_SIZE + 10)}"}}`, { code: 413, id: 'o2', attach: true }],
  ['oversized: an id longer than 64 bytes is 400 without id', 'open', `{"hi":{"id":"${'i'.repeat(65)}","ver":"0.25.3"}}`, { code: 400, id: null }],
  ['oversized: a topic longer than 64 bytes is 400', 'login', `{"sub":{"id":"o3","topic":"grp${'A'.repeat(70)}"}}`, { code: 400, id: 'o3' }],
  ['oversized: a ua longer than 512 bytes is 400', 'open', `{"hi":{"id":"o4","ver":"0.25.3","ua":"${'u'.repeat(600)}"}}`, { code: 400, id: 'o4' }],
  ['oversized: 1025 delete ranges is 400', 'login', () => `{"del":{"id":"o5","topic":"${fx.grp}","what":"msg","delseq":${J(Array.from({ length: 1025 }, (_, i) => ({ low: 2 * i + 1 })))}}}`, { code: 400, id: 'o5' }],
  // order: before hi, before login
  ['order: login before hi is 409', 'open', () => J({ login: { id: 'b2', scheme: 'token', secret: fx.owner.token } }), { code: 409, id: 'b2' }],
  ['order: sub before hi is 409', 'open', '{"sub":{"id":"b3","topic":"me"}}', { code: 409, id: 'b3' }],
  ['order: a note before hi gets nothing', 'open', () => J({ note: { topic: fx.grp, what: 'kp' } }), { silent: true }],
  ['order: sub before login is 401', 'hi', () => J({ sub: { id: 'b4', topic: fx.grp } }), { code: 401, id: 'b4' }],
  ['order: pub before login is 401', 'hi', () => J({ pub: { id: 'b5', topic: fx.grp, content: 'x' } }), { code: 401, id: 'b5' }],
  ['order: get before login is 401', 'hi', '{"get":{"id":"b6","topic":"me","what":"desc"}}', { code: 401, id: 'b6' }],
  ['order: set before login is 401', 'hi', '{"set":{"id":"b7","topic":"me","desc":{"public":{"fn":"x"}}}}', { code: 401, id: 'b7' }],
  ['order: del before login is 401', 'hi', () => J({ del: { id: 'b8', topic: fx.grp, what: 'msg', delseq: [{ low: 1 }] } }), { code: 401, id: 'b8' }],
  ['order: leave before login is 401', 'hi', () => J({ leave: { id: 'b9', topic: fx.grp } }), { code: 401, id: 'b9' }],
  // wrong types, field by field
  ['type: hi.ver a number', 'open', '{"hi":{"id":"w1","ver":25}}', { code: 400, id: 'w1' }],
  ['type: hi.id a number', 'open', '{"hi":{"id":7,"ver":"0.25.3"}}', { code: 400, id: null }],
  ['type: hi.ua an object', 'open', '{"hi":{"id":"w2","ver":"0.25.3","ua":{}}}', { code: 400, id: 'w2' }],
  ['type: acc.user a number', 'hi', '{"acc":{"id":"w3","user":1,"scheme":"basic","secret":"eDp5"}}', { code: 400, id: 'w3' }],
  ['type: acc.login a string', 'hi', '{"acc":{"id":"w4","user":"new","scheme":"basic","secret":"eDp5","login":"yes"}}', { code: 400, id: 'w4' }],
  ['type: acc.secret not base64', 'hi', '{"acc":{"id":"w5","user":"new","scheme":"basic","secret":"!!!"}}', { code: 400, id: 'w5' }],
  ['type: login.scheme an array', 'hi', '{"login":{"id":"w6","scheme":["basic"],"secret":"eDp5"}}', { code: 400, id: 'w6' }],
  ['type: login.secret a number', 'hi', '{"login":{"id":"w7","scheme":"basic","secret":5}}', { code: 400, id: 'w7' }],
  ['type: sub.topic a number', 'login', '{"sub":{"id":"w8","topic":5}}', { code: 400, id: 'w8' }],
  ['type: sub.get a string', 'login', '{"sub":{"id":"w9","topic":"me","get":"desc"}}', { code: 400, id: 'w9' }],
  ['type: sub.set.sub.mode a number', 'login', () => `{"sub":{"id":"w10","topic":"${fx.grp}","set":{"sub":{"mode":7}}}}`, { code: 400, id: 'w10' }],
  ['type: sub.set.sub.mode a bad mode', 'login', () => `{"sub":{"id":"w11","topic":"${fx.grp}","set":{"sub":{"mode":"XYZ!"}}}}`, { code: 400, id: 'w11' }],
  ['type: pub.noecho a string', 'login', () => `{"pub":{"id":"w12","topic":"${fx.grp}","noecho":"yes","content":"x"}}`, { code: 400, id: 'w12' }],
  ['type: pub.head a string', 'login', () => `{"pub":{"id":"w13","topic":"${fx.grp}","head":"x","content":"x"}}`, { code: 400, id: 'w13' }],
  ['type: pub.cmid a number', 'login', () => `{"pub":{"id":"w14","topic":"${fx.grp}","cmid":5,"content":"x"}}`, { code: 400, id: 'w14' }],
  ['type: get.what a number', 'login', '{"get":{"id":"w15","topic":"me","what":5}}', { code: 400, id: 'w15' }],
  ['type: get.data.limit a string', 'login', () => `{"get":{"id":"w16","topic":"${fx.grp}","what":"data","data":{"limit":"10"}}}`, { code: 400, id: 'w16' }],
  ['type: get.data.since negative', 'login', () => `{"get":{"id":"w17","topic":"${fx.grp}","what":"data","data":{"since":-1}}}`, { code: 400, id: 'w17' }],
  ['type: get.data.before a fraction', 'login', () => `{"get":{"id":"w18","topic":"${fx.grp}","what":"data","data":{"before":1.5}}}`, { code: 400, id: 'w18' }],
  ['type: get.desc.ims not a timestamp', 'login', '{"get":{"id":"w19","topic":"me","what":"desc","desc":{"ims":"yesterday"}}}', { code: 400, id: 'w19' }],
  ['type: set.desc a number', 'login', '{"set":{"id":"w20","topic":"me","desc":5}}', { code: 400, id: 'w20' }],
  ['type: del.what a number', 'login', () => `{"del":{"id":"w21","topic":"${fx.grp}","what":5}}`, { code: 400, id: 'w21' }],
  ['type: del.delseq a string', 'login', () => `{"del":{"id":"w22","topic":"${fx.grp}","what":"msg","delseq":"1-5"}}`, { code: 400, id: 'w22' }],
  ['type: del.delseq entry not an object', 'login', () => `{"del":{"id":"w23","topic":"${fx.grp}","what":"msg","delseq":[1,2]}}`, { code: 400, id: 'w23' }],
  ['type: del.hard a number', 'login', () => `{"del":{"id":"w24","topic":"${fx.grp}","what":"msg","hard":1,"delseq":[{"low":1}]}}`, { code: 400, id: 'w24' }],
  ['type: leave.unsub a string', 'login', () => `{"leave":{"id":"w25","topic":"${fx.grp}","unsub":"true"}}`, { code: 400, id: 'w25' }],
  ['type: note.seq a string is 400 without id (a note has none)', 'login', () => `{"note":{"topic":"${fx.grp}","what":"read","seq":"5"}}`, { code: 400, id: null }],
  ['type: note.what unknown is dropped silently', 'login', () => `{"note":{"topic":"${fx.grp}","what":"shout"}}`, { silent: true }],
  ['type: a topic that is an object', 'login', '{"get":{"id":"w26","topic":{"a":1},"what":"desc"}}', { code: 400, id: 'w26' }],
  // huge limits and ranges
  ['huge: get data limit 2147483647 is clamped', 'login', () => `{"get":{"id":"h1","topic":"${fx.grp}","what":"data","data":{"limit":2147483647}}}`, { code: [200, 204, 208], id: 'h1', attach: true }],
  ['huge: limit 2147483648 is 400', 'login', () => `{"get":{"id":"h2","topic":"${fx.grp}","what":"data","data":{"limit":2147483648}}}`, { code: 400, id: 'h2' }],
  ['huge: since beyond the last seq is empty', 'login', () => `{"get":{"id":"h3","topic":"${fx.grp}","what":"data","data":{"since":2147483647}}}`, { code: 204, id: 'h3', attach: true }],
  ['huge: del a range beyond the last seq is 400', 'login', () => `{"del":{"id":"h4","topic":"${fx.grp}","what":"msg","delseq":[{"low":2000000000,"hi":2147483647}]}}`, { code: 400, id: 'h4', attach: true }],
  ['huge: get del with since above before is 204 (empty)', 'login', () => `{"get":{"id":"h5","topic":"${fx.grp}","what":"del","del":{"since":10,"before":2}}}`, { code: 204, id: 'h5', attach: true }],
  // unknown topics and other tenants
  ['topic: an unknown group is 404', 'login', '{"sub":{"id":"t6","topic":"grpAAAAAAAAAAAAAAAAAAAAAAA"}}', { code: 404, id: 't6' }],
  ['topic: a malformed grp name is 404', 'login', '{"sub":{"id":"t7","topic":"grp!!"}}', { code: 404, id: 't7' }],
  ['topic: an unknown prefix is 404', 'login', '{"sub":{"id":"t8","topic":"xyz123"}}', { code: 404, id: 't8' }],
  ['topic: pub to a topic not attached is 409', 'login', () => `{"pub":{"id":"t9","topic":"${fx.grp}","content":"x"}}`, { code: 409, id: 't9' }],
  ['tenant: another tenant\'s group is 404', 'login', () => J({ sub: { id: 't10', topic: fx.otherGrp } }), { code: 404, id: 't10' }],
  ['tenant: a token of tenant 1 on tenant 2\'s key is 401', 'hi2', () => J({ login: { id: 't11', scheme: 'token', secret: fx.owner.token } }), { code: 401, id: 't11' }],
  ['tenant: tenant 1\'s group from tenant 2 is 404', 'login2', () => J({ sub: { id: 't12', topic: fx.grp } }), { code: 404, id: 't12' }],
];

async function rowConnection(ctx, state) {
  if (state === 'hi2' || state === 'login2') {
    const c = await rawOpen(ctx, `row-${state}`, { apikey: KEY2 });
    await c.hi();
    if (state === 'login2') await c.loginToken(fx.other.token);
    return c;
  }
  return connect(ctx, state);
}

async function witnessWorks() {
  const ctrl = await fx.witness.pub(fx.grp, `still here ${newCmid()}`);
  assert.equal(ctrl.code, 202, 'the witness on another connection still publishes');
}

for (const [name, state, frame, want] of ROWS) {
  suite.test(`bad input: ${name}`, async (ctx) => {
    await fixture(ctx);
    const c = await rowConnection(ctx, state);
    if (want.attach) assert.equal((await c.request('sub', { topic: fx.grp }, { ctrlOnly: true })).code, 200);
    const f = typeof frame === 'function' ? frame() : frame;
    const m = c.mark();
    if (f.binary) c.ws.send(f.binary, { binary: true });
    else if (Buffer.isBuffer(f)) c.ws.send(f, { binary: false });
    else c.send(T(f));
    if (want.close) {
      const info = await c.closed;
      assert.equal(info.code, want.close, `close code (got ${info.code})`);
      assert.equal(c.log.filter((x) => x.ctrl, m).length, 0, 'no {ctrl} before the close');
    } else if (want.silent) {
      await c.none('ctrl', null, { since: m, ms: 300 });
    } else {
      const ctrl = await c.wait('ctrl', null, { since: m, what: 'the answer' });
      const codes = Array.isArray(want.code) ? want.code : [want.code];
      assert.ok(codes.includes(ctrl.code), `code ${ctrl.code} (${ctrl.text}) is one of ${codes}`);
      if (want.id === null) assert.equal(ctrl.id, undefined, 'the ctrl carries no id');
      else assert.equal(ctrl.id, want.id, 'the ctrl echoes the id');
    }
    if (!want.close) {
      // The connection keeps working: a {hi} is answered (201 first, 200 once said).
      const again = await c.request('hi', { ver: '0.25.3' });
      assert.ok([200, 201].includes(again.code), `a later hi answered ${again.code}`);
      assert.equal(c.closeInfo, null, 'the connection is still open');
    }
    await witnessWorks();
  });
}

suite.run();
