// admin_api.test.js — qimd's admin HTTP API for internal services (docs/gateway.md "Admin
// HTTP API"): liveness and readiness, group creation and AdminMembershipChange (add,
// remove), role changes and bans on behalf of a member; every group route refuses a request
// without a service token (401) or with a wrong one (403) with a JSON error body
// (InternalIdentityRequired). Changes are checked through a member's WebSocket session: the
// member listing and the live {pres what:"acs"} that the membership Control produces.
//   node tests/e2e/admin_api.test.js [--only TEXT]
'use strict';

const assert = require('node:assert/strict');
const { API_KEY, SERVICE, SERVICE_TOKEN, Suite } = require('./lib/harness');
const crypto = require('node:crypto');
const { httpRequest, rawUser } = require('./lib/raw');

// A well-formed id nobody has: usr/grp + 16 random bytes in base64url.
const unknownId = (prefix) => prefix + crypto.randomBytes(16).toString('base64url');

const suite = new Suite('admin_api', { qimdArgs: ['--service-token', `${SERVICE}:${SERVICE_TOKEN}`] });
const test = (name, fn, opts) => suite.test(name, fn, opts);

// POST a JSON body to an admin route; `token` null leaves the header out.
async function admin(ctx, path, body, { token = SERVICE_TOKEN, apikey = API_KEY, method = 'POST' } = {}) {
  const headers = { 'Content-Type': 'application/json' };
  if (token !== null) headers['X-Qim-Service-Token'] = token;
  if (apikey !== null) headers['X-Tinode-APIKey'] = apikey;
  const res = await httpRequest(ctx, { method, path, headers, body });
  let json;
  try {
    json = JSON.parse(res.body);
  } catch {
    assert.fail(`${method} ${path}: the body is not JSON: ${res.body}`);
  }
  assert.match(res.headers['content-type'] || '', /^application\/json/);
  return { status: res.status, json };
}

// The users listed by `get sub` on a group, from session c (attached to it).
async function members(c, grp) {
  const id = c.id();
  const m = c.mark();
  c.send({ get: { id, topic: grp, what: 'sub' } });
  const meta = await c.wait('meta', (x) => x.id === id, { since: m, what: `get sub ${id}` });
  return meta.sub.map((s) => s.user).sort();
}

test('healthz 200 ok; readyz 200 ready with store, mailbox and fanout ok; other methods 405', async (ctx) => {
  const h = await httpRequest(ctx, { path: '/healthz' });
  assert.equal(h.status, 200);
  assert.deepEqual(JSON.parse(h.body), { status: 'ok' });
  const r = await httpRequest(ctx, { path: '/readyz' });
  assert.equal(r.status, 200, r.body);
  assert.deepEqual(JSON.parse(r.body), { status: 'ready', store: 'ok', mailbox: 'ok', fanout: 'ok' });
  assert.equal((await httpRequest(ctx, { method: 'POST', path: '/readyz', body: {} })).status, 405);
  assert.equal((await admin(ctx, '/v0/admin/groups', undefined, { method: 'GET' })).status, 405);
});

test('stats: the store counters move with the writes a group creation makes; no token 401', async (ctx) => {
  const get = async (token) => {
    const headers = token ? { 'X-Qim-Service-Token': token } : {};
    return httpRequest(ctx, { path: '/v0/admin/stats', headers });
  };
  assert.equal((await get(null)).status, 401);
  const all = JSON.parse((await get(SERVICE_TOKEN)).body);
  assert.equal(typeof all.loop_stalls, 'number', 'loop_stalls is a number');
  const before = all.store;
  for (const k of ['operations', 'transactions', 'fsyncs', 'reads', 'reads_inline', 'pages_written',
    'lingers', 'lingered', 'rejected_backpressure', 'checkpoints', 'checkpoints_background', 'syncs',
    'sync_waits', 'slow_syncs', 'slow_transactions']) {
    assert.equal(typeof before[k], 'number', `store.${k} is a number`);
  }
  const owner = await rawUser(ctx, 'statsown');
  const r = await admin(ctx, '/v0/admin/groups', { owner: owner.uid, members: [], public: { fn: 'S' } });
  assert.equal(r.status, 201);
  const after = JSON.parse((await get(SERVICE_TOKEN)).body).store;
  assert.ok(after.operations > before.operations, 'the creation wrote through the store');
  assert.ok(after.transactions > before.transactions && after.fsyncs > before.fsyncs);
  assert.ok(after.pages_written > before.pages_written);
  assert.ok(after.syncs > before.syncs, 'the syncer made the creation durable');
});

test('group routes: no service token 401, a wrong one 403, both InternalIdentityRequired; nothing is created', async (ctx) => {
  const a = await rawUser(ctx, 'owner');
  for (const path of ['/v0/admin/groups', '/v0/admin/members', '/v0/admin/retention']) {
    const none = await admin(ctx, path, { owner: a.uid }, { token: null });
    assert.equal(none.status, 401, `${path} without a token`);
    assert.equal(none.json.ctrl.code, 401);
    assert.equal(none.json.error, 'GroupMembershipError::InternalIdentityRequired');
    const wrong = await admin(ctx, path, { owner: a.uid }, { token: `${SERVICE_TOKEN}x` });
    assert.equal(wrong.status, 403, `${path} with a wrong token`);
    assert.equal(wrong.json.ctrl.code, 403);
    assert.equal(wrong.json.error, 'GroupMembershipError::InternalIdentityRequired');
  }
  const m = a.mark();
  await a.request('sub', { topic: 'me' });
  const id = a.id();
  a.send({ get: { id, topic: 'me', what: 'sub' } });
  const ctrl = await a.wait('ctrl', (c) => c.id === id, { since: m, what: 'the me listing' });
  assert.equal(ctrl.code, 204, 'the owner has no group');
});

test('groups: created for an owner with members; bad requests 400, unknown users 404, no API key 403', async (ctx) => {
  const a = await rawUser(ctx, 'owner');
  const b = await rawUser(ctx, 'member');
  const res = await admin(ctx, '/v0/admin/groups', { owner: a.uid, members: [b.uid], public: { fn: 'made by a service' } });
  assert.equal(res.status, 201, JSON.stringify(res.json));
  assert.match(res.json.group, /^grp[A-Za-z0-9_-]{22}$/);
  assert.equal(res.json.owner, a.uid);
  assert.equal(res.json.membership_version, 2, 'owner, then the members');
  const sub = await a.join(res.json.group);
  assert.equal(sub.code, 200);
  assert.deepEqual(await members(a, res.json.group), [a.uid, b.uid].sort());
  const id = a.id();
  const m = a.mark();
  a.send({ get: { id, topic: res.json.group, what: 'desc' } });
  const desc = await a.wait('meta', (x) => x.id === id, { since: m, what: 'get desc' });
  assert.deepEqual(desc.desc.public, { fn: 'made by a service' });

  assert.equal((await admin(ctx, '/v0/admin/groups', { members: [b.uid] })).status, 400, 'no owner');
  assert.equal((await admin(ctx, '/v0/admin/groups', { owner: a.uid, members: 'usrX' })).status, 400, 'members not a list');
  assert.equal((await admin(ctx, '/v0/admin/groups', [1, 2])).status, 400, 'not an object');
  assert.equal((await admin(ctx, '/v0/admin/groups', { owner: unknownId('usr') })).status, 404, 'no such owner');
  assert.equal((await admin(ctx, '/v0/admin/groups', { owner: a.uid }, { apikey: null })).status, 403, 'no API key');
});

test('members: add and remove by the service, role and ban on behalf of the owner; members see {pres acs}', async (ctx) => {
  const a = await rawUser(ctx, 'owner');
  const b = await rawUser(ctx, 'bob');
  const c = await rawUser(ctx, 'carol');
  const created = await admin(ctx, '/v0/admin/groups', { owner: a.uid });
  assert.equal(created.status, 201);
  const grp = created.json.group;
  await a.join(grp);

  let m = a.mark();
  const add = await admin(ctx, '/v0/admin/members', { group: grp, add: [b.uid, c.uid], subject: 'crm-sync' });
  assert.equal(add.status, 200, JSON.stringify(add.json));
  assert.equal(add.json.group, grp);
  assert.equal(add.json.membership_version, created.json.membership_version + 1);
  for (const u of [b.uid, c.uid]) await a.wait('pres', (p) => p.topic === grp && p.what === 'acs' && p.src === u, { since: m });
  assert.deepEqual(await members(a, grp), [a.uid, b.uid, c.uid].sort());

  m = a.mark();
  const rm = await admin(ctx, '/v0/admin/members', { group: grp, remove: [b.uid] });
  assert.equal(rm.status, 200);
  assert.equal(rm.json.membership_version, add.json.membership_version + 1);
  await a.wait('pres', (p) => p.topic === grp && p.what === 'acs' && p.src === b.uid, { since: m });
  assert.deepEqual(await members(a, grp), [a.uid, c.uid].sort());

  const role = await admin(ctx, '/v0/admin/members', { group: grp, op: 'role', user: c.uid, role: 'admin', as: a.uid });
  assert.equal(role.status, 200, JSON.stringify(role.json));
  const denied = await admin(ctx, '/v0/admin/members', { group: grp, op: 'ban', user: a.uid, as: c.uid });
  assert.equal(denied.status, 403, 'an admin cannot ban the owner');
  assert.equal(denied.json.error, 'GroupMembershipError::PermissionDenied');
  const ban = await admin(ctx, '/v0/admin/members', { group: grp, op: 'ban', user: c.uid, as: a.uid });
  assert.equal(ban.status, 200);
  assert.deepEqual(await members(a, grp), [a.uid]);
  const back = await admin(ctx, '/v0/admin/members', { group: grp, add: [c.uid] });
  assert.equal(back.status, 403, 'a banned user cannot be added back');

  assert.equal((await admin(ctx, '/v0/admin/members', { group: grp })).status, 400, 'an empty change');
  assert.equal((await admin(ctx, '/v0/admin/members', { group: 'grpnope', add: [b.uid] })).status, 400, 'a bad group name');
  assert.equal((await admin(ctx, '/v0/admin/members', { group: grp, op: 'promote', user: b.uid, as: a.uid })).status, 400, 'an unknown op');
  assert.equal((await admin(ctx, '/v0/admin/members', { group: grp, remove: [a.uid] })).status, 403, 'the owner cannot be removed');
  const other = await admin(ctx, '/v0/admin/members', { group: unknownId('grp'), add: [b.uid] });
  assert.equal(other.status, 404, 'no such group');
  assert.equal(other.json.error, 'GroupMembershipError::NotFound');
});

suite.run();
