// pipeline.test.js — proof that live delivery goes through the pipeline (commit → outbox
// → fanout → mailboxes → push) and not around it: with the materialization stage paused,
// a {pub} is still acknowledged (202, the commit is durable) but no {data} reaches the
// other members; resumed, each message arrives exactly once.
//
// The pause/resume control (admin HTTP on qimd's listen address):
//   POST /v0/admin/pipeline
//   X-Qim-Service-Token: <token>            (qimd --service-token SERVICE:TOKEN)
//   Content-Type: application/json
//   {"stage":"materialize","paused":true}   → 2xx; false resumes
// Without a valid token the control must refuse (401 or 403).
//   node tests/e2e/pipeline.test.js [--server HOST:PORT --service-token TOKEN]
'use strict';

const assert = require('node:assert/strict');
const { SERVICE, SERVICE_TOKEN, Suite, scaled, settle, sleep, waitUntil } = require('./lib/harness');
const { groupOf, publish } = require('./lib/sdk');
const { httpRequest } = require('./lib/raw');

const suite = new Suite('pipeline', { qimdArgs: ['--service-token', `${SERVICE}:${SERVICE_TOKEN}`] });
const test = (name, fn, opts) => suite.test(name, fn, opts);

function token(ctx) {
  return ctx.opts.serviceToken || process.env.QIM_E2E_SERVICE_TOKEN || SERVICE_TOKEN;
}

function control(ctx, body, tok = token(ctx)) {
  const headers = { 'Content-Type': 'application/json' };
  if (tok !== null) headers['X-Qim-Service-Token'] = tok;
  return httpRequest(ctx, { method: 'POST', path: '/v0/admin/pipeline', headers, body });
}

// Pauses materialization for the rest of the test; the cleanup resumes it whatever happens
// (a --server must not be left paused).
async function pause(ctx) {
  ctx.cleanup(() => control(ctx, { stage: 'materialize', paused: false }));
  const res = await control(ctx, { stage: 'materialize', paused: true });
  assert.ok(res.status >= 200 && res.status < 300, `pausing answers 2xx, got ${res.status} ${res.body}`);
}

async function resume(ctx) {
  const res = await control(ctx, { stage: 'materialize', paused: false });
  assert.ok(res.status >= 200 && res.status < 300, `resuming answers 2xx, got ${res.status} ${res.body}`);
}

test('the control refuses requests without a valid service token', async (ctx) => {
  const none = await control(ctx, { stage: 'materialize', paused: true }, null);
  assert.ok(none.status === 401 || none.status === 403, `no token → 401/403, got ${none.status}`);
  const wrong = await control(ctx, { stage: 'materialize', paused: true }, 'not-the-token-0123456789');
  assert.ok(wrong.status === 401 || wrong.status === 403, `wrong token → 401/403, got ${wrong.status}`);
  const bad = await control(ctx, { stage: 'no-such-stage', paused: true });
  assert.equal(bad.status, 400, `an unknown stage → 400, got ${bad.status}`);
});

test('paused materialization: pub acknowledged, no {data}; resumed: delivered exactly once', async (ctx) => {
  const { name, users } = await groupOf(ctx, ['alice', 'bob', 'carol'], 'Pipeline group');
  const [a, b, c] = users;
  // Delivery works before the pause.
  let mb = b.mark();
  let mc = c.mark();
  const s0 = await publish(a, name, 'before the pause');
  // Both receivers must have it before the marks below: a slow (sanitizer) build may still
  // be delivering s0 to carol when the pause starts, and it would count as a second message.
  await b.wait('data', (d) => d.topic === name && d.seq === s0, { since: mb });
  await c.wait('data', (d) => d.topic === name && d.seq === s0, { since: mc });

  await pause(ctx);
  mb = b.mark();
  mc = c.mark();
  const seq = await publish(a, name, 'while paused');
  assert.equal(seq, s0 + 1, 'the pub is acknowledged with the next seq while paused');
  await b.none('data', (d) => d.topic === name, { since: mb, ms: 1000 });
  await c.none('data', (d) => d.topic === name, { since: mc, ms: 0 });

  await resume(ctx);
  for (const [u, m] of [[b, mb], [c, mc]]) {
    const d = await u.wait('data', (x) => x.topic === name && x.seq === seq, { since: m, timeout: 10000, what: `{data} seq ${seq} after resume` });
    assert.equal(d.from, a.uid);
    assert.equal(d.content, 'while paused');
  }
  await sleep(scaled(500));
  for (const [u, m] of [[b, mb], [c, mc]]) {
    const got = u.bodies('data', (x) => x.topic === name, m).map((x) => x.seq);
    assert.deepEqual(got, [seq], `${u.label} got the message exactly once`);
  }
  await settle();
  assert.deepEqual(b.shown(name), [s0, seq]);
}, { timeout: 30000 });

test('several senders while paused: after resume every message arrives once, in seq order', async (ctx) => {
  const { name, users } = await groupOf(ctx, ['alice', 'bob', 'carol'], 'Pipeline burst');
  const [a, b, c] = users;
  await pause(ctx);
  const marks = users.map((u) => u.mark());
  const sent = [];
  for (let i = 0; i < 3; i++) {
    sent.push({ seq: await publish(a, name, `a${i}`), from: a });
    sent.push({ seq: await publish(b, name, `b${i}`), from: b });
  }
  assert.deepEqual(sent.map((s) => s.seq), [1, 2, 3, 4, 5, 6], 'every pub acknowledged while paused');
  await c.none('data', (d) => d.topic === name, { since: marks[2], ms: 1000 });
  await resume(ctx);
  const expect = {
    [a.uid]: sent.filter((s) => s.from !== a).map((s) => s.seq),
    [b.uid]: sent.filter((s) => s.from !== b).map((s) => s.seq),
    [c.uid]: sent.map((s) => s.seq),
  };
  for (let k = 0; k < users.length; k++) {
    const u = users[k];
    const want = expect[u.uid];
    await waitUntil(() => u.bodies('data', (d) => d.topic === name, marks[k]).length >= want.length, 10000, `${u.label} gets ${want.length} messages`);
  }
  await sleep(scaled(500));
  for (let k = 0; k < users.length; k++) {
    const u = users[k];
    const got = u.bodies('data', (d) => d.topic === name, marks[k]).map((d) => d.seq);
    assert.deepEqual(got, expect[u.uid], `${u.label}: each message once, in seq order`);
  }
}, { timeout: 30000 });

suite.run();
