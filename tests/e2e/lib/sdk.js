// sdk.js — real Tinode clients (npm tinode-sdk 0.25.3) for the end-to-end tests, set up as
// PROTOCOL.md §13 says Node needs: transport 'ws' (Node 20 has no global WebSocket),
// fake-indexeddb's `.indexedDB` as the database provider (the constructor deletes the
// database even with persist:false), the demo API key, and onConnect — not connect() —
// as the sign that {hi} was answered. Every client logs the raw frames it receives
// (lib/frames.js) so tests can wait on them and check protocol invariants, and is
// disconnected by the test's cleanup.
'use strict';

const assert = require('node:assert/strict');
const WebSocket = require('ws');
const { indexedDB } = require('fake-indexeddb');
const { Tinode, AccessMode, Drafty } = require('tinode-sdk');
const { API_KEY, scaled, settle, withTimeout } = require('./harness');
const { FrameLog, UID_RE } = require('./frames');

Tinode.setNetworkProviders(WebSocket, null);
Tinode.setDatabaseProvider(indexedDB);

const PASSWORD = 'secret-pass-1';

class SdkClient {
  constructor(ctx, label) {
    this.ctx = ctx;
    this.label = label;
    this.tn = new Tinode({
      appName: 'qim-e2e',
      host: ctx.server.hostPort,
      apiKey: API_KEY,
      secure: false,
      transport: 'ws',
      persist: false,
    });
    this.log = new FrameLog(label, (p) => ctx.problems.push(p));
    this.sent = [];
    this.tn.onRawMessage = (raw) => this.log.push(raw);
    // Keep what the SDK sends too: failure reports show both directions.
    const conn = this.tn._connection;
    const sendText = conn.sendText.bind(conn);
    conn.sendText = (text) => {
      // After close() the SDK's own timers (the automatic {note recv} 100 ms after new
      // data) may still fire; they must not throw "Websocket is not connected".
      if (this.closing) return;
      this.sent.push(text);
      return sendText(text);
    };
    this.uid = null;
    this.login = null;
    this.token = null;
    ctx.cleanup(() => this.close());
    ctx.dump((verbose) => {
      const out = this.sent.slice(verbose ? 0 : -8).map((s) => `  -> ${s.length > 300 ? s.slice(0, 300) + '…' : s}`);
      return `${this.log.tail(verbose ? 1000 : 12)}\nframes sent by ${label}${verbose ? '' : ' (last 8)'}:\n${out.join('\n')}`;
    });
  }

  async connect() {
    const connected = new Promise((resolve, reject) => {
      this.tn.onConnect = resolve;
      this.tn.onDisconnect = (err) => reject(new Error(`${this.label}: disconnected before {hi} was answered: ${err && err.message}`));
    });
    await withTimeout(this.tn.connect(), scaled(5000), `${this.label}: WebSocket open`);
    await withTimeout(connected, scaled(5000), `${this.label}: onConnect ({ctrl 201} for hi)`);
    this.tn.onDisconnect = (err) => {
      this.log.closed = (err && err.message) || 'closed';
    };
    return this;
  }

  close() {
    this.closing = true;
    this.tn.onDisconnect = null;
    this.tn.mapTopics((t) => clearTimeout(t._recvNotificationTimer));
    this.tn.disconnect();
  }

  mark() {
    return this.log.mark();
  }

  // Waits until every request with an id that the SDK sent since `sentMark` (an index
  // into this.sent) has its {ctrl} or {meta} answer.
  async quiesce(sentMark, timeout = 5000) {
    const ids = this.sent
      .slice(sentMark)
      .map((s) => {
        try {
          const m = JSON.parse(s);
          const body = m[Object.keys(m)[0]];
          return body && body.id;
        } catch (_) {
          return undefined;
        }
      })
      .filter(Boolean);
    for (const id of ids) {
      await this.log.wait((m) => (m.ctrl && m.ctrl.id === id) || (m.meta && m.meta.id === id), {
        timeout,
        what: `the answer to request ${id}`,
      });
    }
  }

  // Waits for the first frame of `kind` (ctrl/data/meta/pres/info) at or after `since`
  // whose body matches `pred`; returns the plain-JSON body.
  async wait(kind, pred, opts = {}) {
    const e = await this.log.wait((m) => m && m[kind] && (!pred || pred(m[kind])), { what: `{${kind}}`, ...opts });
    return e.msg[kind];
  }

  // Fails if a frame of `kind` matching pred arrives within `ms` after `since`.
  none(kind, pred, opts = {}) {
    return this.log.none((m) => m[kind] && (!pred || pred(m[kind])), { what: `{${kind}}`, ...opts });
  }

  // Plain-JSON bodies of `kind` from `since` on.
  bodies(kind, pred, since = 0) {
    return this.log.filter((m) => m[kind] && (!pred || pred(m[kind])), since).map((e) => e.msg[kind]);
  }

  me() {
    return this.tn.getMeTopic();
  }

  topic(name) {
    return this.tn.getTopic(name);
  }

  // Seqs of the messages the SDK shows in `name`, in order (topic.messages()).
  shown(name) {
    const out = [];
    this.topic(name).messages((m) => out.push(m.seq));
    return out;
  }

  // Content of the message the SDK shows at `seq` (the newest version after edits).
  shownContent(name, seq) {
    let content;
    this.topic(name).messages((m) => {
      if (m.seq === seq) content = m.content;
    });
    return content;
  }
}

// A connected client whose {hi} was answered; not logged in.
async function connect(ctx, label) {
  const c = new SdkClient(ctx, label);
  await c.connect();
  return c;
}

// Creates an account with createAccountBasic(login:true) on a new connection and checks
// the reply the SDK depends on (§12.3): user, token, expires.
async function newUser(ctx, label) {
  const c = await connect(ctx, label);
  const login = ctx.unique(label.replace(/[^a-z]/gi, '').slice(0, 6) || 'u');
  const ctrl = await c.tn.createAccountBasic(login, PASSWORD, { public: { fn: `${label} ${login}` } });
  assert.equal(ctrl.code, 200, `${label}: createAccountBasic with login:true answers 200`);
  assert.match(ctrl.params.user, UID_RE, `${label}: user id is usr + 22 characters`);
  assert.equal(c.tn.isAuthenticated(), true, `${label}: authenticated after createAccountBasic`);
  assert.equal(c.tn.getCurrentUserID(), ctrl.params.user);
  const tok = c.tn.getAuthToken();
  assert.ok(tok && typeof tok.token === 'string' && tok.token.length > 0, `${label}: a token came with the account`);
  c.uid = ctrl.params.user;
  c.login = login;
  c.password = PASSWORD;
  c.token = tok.token;
  return c;
}

// Another session of the same user, logged in with the token of `of`.
async function tokenSession(ctx, of, label) {
  const c = await connect(ctx, label || `${of.label}2`);
  const ctrl = await c.tn.loginToken(of.token);
  assert.equal(ctrl.code, 200, `${c.label}: loginToken answers 200`);
  assert.equal(ctrl.params.user, of.uid, `${c.label}: the token logs in the same user`);
  c.uid = of.uid;
  c.login = of.login;
  c.password = of.password;
  c.token = of.token;
  return c;
}

// Subscribes `me` with desc + sub and waits until the listing (meta sub, or ctrl 204
// what:"sub" when the user has no subscriptions) has been applied. Returns the listing
// entries as plain JSON.
async function subscribeMe(c) {
  const me = c.me();
  const m = c.mark();
  const ctrl = await me.subscribe(me.startMetaQuery().withDesc().withSub().build());
  assert.equal(ctrl.code, 200, `${c.label}: sub me answers 200`);
  assert.equal(ctrl.topic, 'me');
  const e = await c.log.wait(
    (msg) =>
      (msg.meta && msg.meta.topic === 'me' && msg.meta.sub) ||
      (msg.ctrl && msg.ctrl.id === ctrl.id && msg.ctrl.code === 204 && msg.ctrl.params && msg.ctrl.params.what === 'sub'),
    { since: m, what: `me listing (meta sub or ctrl 204 sub) for ${c.label}` },
  );
  await c.log.wait((msg) => msg.meta && msg.meta.topic === 'me' && msg.meta.desc, { since: m, what: `meta desc of me for ${c.label}` });
  return e.msg.meta ? e.msg.meta.sub : [];
}

// Creates a group as PROTOCOL.md §11 does (newGroupTopicName + subscribe with set desc
// public) and checks the ctrl: the real grp… name, tmpname, owner's acs JRWPASDO.
async function createGroup(c, fn) {
  const t = c.topic(c.tn.newGroupTopicName());
  const tmp = t.name;
  const m = c.mark();
  const ctrl = await t.subscribe(t.startMetaQuery().withDesc().withSub().build(), { desc: { public: { fn } } });
  assert.equal(ctrl.code, 200, 'creating a group answers 200');
  assert.ok(typeof ctrl.topic === 'string' && ctrl.topic.startsWith('grp'), `ctrl.topic is the real grp… name, got ${ctrl.topic}`);
  assert.equal(ctrl.params && ctrl.params.tmpname, tmp, 'ctrl.params.tmpname echoes the new… name');
  const raw = c.bodies('ctrl', (x) => x.id === ctrl.id, m)[0];
  assert.deepEqual(raw.params.acs, { want: 'JRWPASDO', given: 'JRWPASDO', mode: 'JRWPASDO' }, 'the creator gets JRWPASDO');
  assert.equal(t.name, ctrl.topic, 'the SDK renamed the topic to the grp… name');
  await c.wait('meta', (x) => x.topic === ctrl.topic && x.sub, { since: m, what: 'meta sub after creating the group' });
  return ctrl.topic;
}

// `c` joins group `name` with desc + sub + later data, the way the webapp does (§11), and
// waits for the data part of the answer (ctrl 204/208 what:"data"). With `mode` the
// subscription asks for that access (set:{sub:{mode}}). Returns {ctrl, acs, dataCtrl}.
async function join(c, name, opts = {}) {
  const t = c.topic(name);
  const m = c.mark();
  const get = t.startMetaQuery().withDesc().withSub().withLaterData(24).build();
  const ctrl = await t.subscribe(get, opts.mode ? { sub: { mode: opts.mode } } : undefined);
  assert.equal(ctrl.code, 200, `${c.label}: joining ${name} answers 200`);
  assert.equal(ctrl.topic, name);
  const raw = c.bodies('ctrl', (x) => x.id === ctrl.id && x.code === 200, m)[0];
  const dataCtrl = await c.wait('ctrl', (x) => x.id === ctrl.id && x.params && x.params.what === 'data', {
    since: m,
    what: `the data part of the join answer for ${c.label} (ctrl 204/208 what:"data")`,
  });
  await c.wait('meta', (x) => x.topic === name && x.desc, { since: m, what: `meta desc of ${name} for ${c.label}` });
  await settle();
  return { ctrl, acs: raw.params && raw.params.acs, dataCtrl };
}

// A group owned by the first of `n` new users, the others joined (before any message, so
// every member's history window covers everything published later). The owner sees each
// join as {pres acs} before the next user joins.
async function groupOf(ctx, labels, fn = 'e2e group') {
  const users = [];
  for (const l of labels) users.push(await newUser(ctx, l));
  const owner = users[0];
  const name = await createGroup(owner, fn);
  for (const u of users.slice(1)) {
    const m = owner.mark();
    const sent = owner.sent.length;
    await join(u, name);
    await owner.wait('pres', (p) => p.topic === name && p.what === 'acs' && p.src === u.uid, {
      since: m,
      what: `{pres acs} for ${u.label} joining`,
    });
    assert.ok(owner.topic(name).subscriber(u.uid), `the owner's SDK knows ${u.label} after {pres acs}`);
    // The SDK asks for the new member's subscription (get sub user); let that finish.
    await owner.quiesce(sent);
  }
  return { name, users };
}

// Publishes with publishDraft (noecho, as the webapp does) and returns the seq from the
// 202 ack; `head` adds a head (e.g. {replace:":3"}).
async function publish(c, name, content, head) {
  const t = c.topic(name);
  const pub = t.createMessage(content, true);
  if (head) pub.head = Object.assign(pub.head || {}, head);
  const m = c.mark();
  await t.publishDraft(pub);
  const ack = c.bodies('ctrl', (x) => x.id === pub.id, m)[0];
  assert.ok(ack, `${c.label}: a ctrl answered pub ${pub.id}`);
  assert.equal(ack.code, 202, `${c.label}: pub answers 202 accepted (got ${ack.code} ${ack.text})`);
  assert.ok(Number.isInteger(ack.params && ack.params.seq), 'the 202 ack carries params.seq as a number');
  assert.equal(pub._failed, false, 'the SDK did not mark the message failed');
  return ack.params.seq;
}

// Waits until `c` received {data} for `seq` in `name`; returns the plain data body.
function received(c, name, seq, since = 0) {
  return c.wait('data', (d) => d.topic === name && d.seq === seq, { since, what: `{data} seq ${seq} in ${name}` });
}

// Runs a get on `name` and returns {ctrl, seqs}: the ctrl the SDK resolved with and the
// sorted seqs of the {data} frames that came before it.
async function history(c, name, query) {
  const m = c.mark();
  const ctrl = await c.topic(name).getMeta(query);
  await settle();
  const seqs = c
    .bodies('data', (d) => d.topic === name, m)
    .map((d) => d.seq)
    .sort((a, b) => a - b);
  return { ctrl, seqs };
}

module.exports = {
  AccessMode,
  Drafty,
  PASSWORD,
  SdkClient,
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
};
