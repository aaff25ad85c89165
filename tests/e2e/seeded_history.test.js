// seeded_history.test.js — a conversation seeded in bulk by `qim-seed --messages`
// (tools/seed/history_rows.c, what the WebSocket history benchmark pages through) reads back
// over the wire exactly as if its messages had been published: `get data` returns the right
// seqs newest first with their content and senders, the topic's desc counts them, each
// sender has read its own messages, and the next {pub} continues at latest + 1.
//
// Needs a qimd of its own (it seeds the data directory before qimd starts): skipped with
// --server. QIM_SEED names the qim-seed binary (ctest sets it; else ../../build/tools).
'use strict';

const assert = require('node:assert/strict');
const childProcess = require('node:child_process');
const fs = require('node:fs');
const path = require('node:path');
const { Qimd, SERVICE, SERVICE_TOKEN, Suite } = require('./lib/harness');
const { rawOpen } = require('./lib/raw');

const suite = new Suite('seeded history');
const MESSAGES = 500;
const MEMBERS = 3;
const PASSWORD = 'seeded-pass-1';

function binary(env, built) {
  const p = process.env[env] || path.resolve(__dirname, '../../build', built);
  if (!fs.existsSync(p)) throw new Error(`${built} not found: set ${env} (ctest does) or build ./build first`);
  return p;
}

// The content qim-seed gives message `seq` (sent by member seq % MEMBERS).
function seededContent(seq) {
  return { qbn: seq, qbs: seq % MEMBERS, qbt: 0, txt: `seeded message ${seq}, about the length of a line of chat` };
}

// Seeds a fresh data directory, starts qimd on it; returns {s, accounts, name}.
async function seededServer(ctx) {
  const q = new Qimd(binary('QIMD', 'src/qimd'), ['--service-token', `${SERVICE}:${SERVICE_TOKEN}`]);
  const out = childProcess.execFileSync(binary('QIM_SEED', 'tools/qim-seed'), [
    '--data', path.join(q.dir, 'data'), '--count', String(MEMBERS), '--prefix', 'sh', '--password', PASSWORD,
    '--group', '1', '--messages', String(MESSAGES),
  ]);
  const lines = out.toString('utf8').trim().split('\n').map((l) => l.split(' '));
  const accounts = lines.filter((l) => l[0].startsWith('sh')).map(([login, uid]) => ({ login, uid }));
  const name = (lines.find((l) => l[0] === 'group') || [])[1];
  assert.deepEqual(lines[lines.length - 1], ['messages', String(MESSAGES)], 'qim-seed reports the messages last');
  assert.equal(accounts.length, MEMBERS);
  await q.start();
  ctx.cleanup(async () => {
    await q.stop();
    if (process.env.QIM_E2E_KEEP !== '1') q.removeDir();
  });
  ctx.dump(() => `seeded qimd stderr (last 30 lines):\n${q.stderrText().split('\n').slice(-30).join('\n')}`);
  const s = Object.assign(Object.create(Object.getPrototypeOf(ctx)), ctx, { server: q });
  return { s, accounts, name };
}

async function member(s, account, name) {
  const c = await rawOpen(s, account.login);
  await c.hi();
  const li = await c.request('login', { scheme: 'basic', secret: Buffer.from(`${account.login}:${PASSWORD}`).toString('base64') });
  assert.equal(li.code, 200, `${account.login} logs in (got ${li.code} ${li.text})`);
  await c.join(name);
  return c;
}

// Checks a get data answer holds exactly `seqs` (in that order) with the seeded content.
function expectPage(got, seqs, accounts, what) {
  assert.equal(got.ctrl.code, 208, `${what}: ctrl 208`);
  assert.equal(got.ctrl.params.count, seqs.length, `${what}: count`);
  assert.deepEqual(got.data.map((d) => d.seq), seqs, `${what}: seqs newest first`);
  for (const d of got.data) {
    assert.deepEqual(d.content, seededContent(d.seq), `${what}: content of seq ${d.seq}`);
    assert.equal(d.from, accounts[d.seq % MEMBERS].uid, `${what}: sender of seq ${d.seq}`);
    assert.equal(d.head, undefined, `${what}: no head on seq ${d.seq}`);
  }
  for (let i = 1; i < got.data.length; i++)
    assert.ok(Date.parse(got.data[i - 1].ts) >= Date.parse(got.data[i].ts), `${what}: ts falls with seq`);
}

const range = (hi, lo) => Array.from({ length: hi - lo + 1 }, (_, i) => hi - i);

suite.test(`qim-seed --messages ${MESSAGES}: get data reads every seeded message back as published`, async (ctx) => {
  if (ctx.server.external) {
    console.log('# skipped: needs a qimd of its own (not possible with --server)');
    return;
  }
  const { s, accounts, name } = await seededServer(ctx);
  const c = await member(s, accounts[1], name);
  expectPage(await c.getData(name, { limit: 20 }), range(MESSAGES, MESSAGES - 19), accounts, 'the newest 20');
  expectPage(await c.getData(name, { before: 251, limit: 50 }), range(250, 201), accounts, 'before=251 limit=50');
  expectPage(await c.getData(name, { ranges: [{ low: 101, hi: 111 }] }), range(110, 101), accounts, 'ranges [101, 111)');
  expectPage(await c.getData(name, { before: 3 }), [2, 1], accounts, 'before=3');
  let all = [];
  for (let before = MESSAGES + 1; before > 1; before = all[all.length - 1]) {
    const page = await c.getData(name, { before, limit: 100 });
    assert.equal(page.ctrl.code, 208, `page before=${before}`);
    all = all.concat(page.data.map((d) => d.seq));
  }
  assert.deepEqual(all, range(MESSAGES, 1), 'paging back covers seqs 1..MESSAGES once each');
});

suite.test('a seeded group: desc counts the messages, senders have read their own, the next pub is latest + 1', async (ctx) => {
  if (ctx.server.external) {
    console.log('# skipped: needs a qimd of its own (not possible with --server)');
    return;
  }
  const { s, accounts, name } = await seededServer(ctx);
  const c = await member(s, accounts[2], name);
  const meta = await c.request('get', { topic: name, what: 'desc' });
  assert.equal(meta.desc.seq, MESSAGES, 'desc.seq is the seeded latest seq');
  const last = MESSAGES - ((MESSAGES - 2) % MEMBERS); // the last seq member 2 sent
  assert.equal(meta.desc.read, last, 'the sender has read up to its own last message');
  assert.equal(meta.desc.recv, last, 'and received it');
  const ack = await c.pub(name, 'after the seeded ones');
  assert.equal(ack.code, 202, `pub answers 202 (got ${ack.code} ${ack.text})`);
  assert.equal(ack.params.seq, MESSAGES + 1, 'the commit path continues at latest + 1');
  // The live {data} first, so it cannot land among the frames of the get data below.
  await c.wait('data', (d) => d.topic === name && d.seq === MESSAGES + 1, { what: 'the live {data} of the pub' });
  const got = await c.getData(name, { limit: 2 });
  assert.deepEqual(got.data.map((d) => d.seq), [MESSAGES + 1, MESSAGES]);
  assert.equal(got.data[0].content, 'after the seeded ones');
});

suite.run();
