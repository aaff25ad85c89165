// raw.js — a bare WebSocket client (npm `ws`) for tests that need exact frames the SDK
// never sends: malformed JSON, requests before {hi} or login, exact ids, cmid, oversized
// frames. It speaks the same JSON as the SDK (PROTOCOL.md §5) with helpers for the usual
// steps (hi, account creation, group creation, join) and keeps a FrameLog like the SDK
// clients, so waits and protocol-invariant checks work the same way.
'use strict';

const assert = require('node:assert/strict');
const crypto = require('node:crypto');
const http = require('node:http');
const WebSocket = require('ws');
const { API_KEY, scaled, withTimeout } = require('./harness');
const { FrameLog, UID_RE } = require('./frames');

const PASSWORD = 'secret-pass-1';

class RawClient {
  constructor(ctx, label, opts = {}) {
    this.ctx = ctx;
    this.label = label;
    this.log = new FrameLog(label, (p) => ctx.problems.push(p));
    this.sent = [];
    this.nextId = 1;
    this.closeInfo = null;
    const key = opts.apikey === undefined ? API_KEY : opts.apikey;
    const query = key === null ? '' : `?apikey=${encodeURIComponent(key)}`;
    this.url = `ws://${ctx.server.hostPort}${opts.path || '/v0/channels'}${query}`;
    this.ws = new WebSocket(this.url, { perMessageDeflate: opts.deflate !== false ? undefined : false, maxPayload: 64 << 20 });
    this.ws.on('message', (data, isBinary) => {
      if (isBinary) ctx.problems.push(`${label}: the server sent a binary frame`);
      this.log.push(data.toString('utf8'));
    });
    this.closed = new Promise((resolve) => {
      this.ws.on('close', (code, reason) => {
        this.closeInfo = { code, reason: reason.toString() };
        this.log.closed = `close code ${code}`;
        resolve(this.closeInfo);
      });
    });
    this.ws.on('error', (err) => {
      this.error = err;
    });
    ctx.cleanup(() => this.close());
    ctx.dump(() => {
      const out = this.sent.slice(-8).map((s) => `  -> ${s.length > 300 ? s.slice(0, 300) + '…' : s}`);
      return `${this.log.tail(12)}\nframes sent by ${label} (last 8):\n${out.join('\n')}`;
    });
  }

  open() {
    return withTimeout(
      new Promise((resolve, reject) => {
        this.ws.once('open', resolve);
        this.ws.once('error', reject);
        this.ws.once('unexpected-response', (_req, res) => reject(new Error(`${this.label}: HTTP ${res.statusCode} instead of 101`)));
      }),
      scaled(5000),
      `${this.label}: WebSocket open`,
    );
  }

  close() {
    if (this.ws.readyState === WebSocket.OPEN || this.ws.readyState === WebSocket.CONNECTING) this.ws.terminate();
  }

  mark() {
    return this.log.mark();
  }

  // Sends a string as is, or an object as JSON.
  send(frame) {
    const text = typeof frame === 'string' ? frame : JSON.stringify(frame);
    this.sent.push(text);
    this.ws.send(text);
  }

  id() {
    return `${this.label}-${this.nextId++}`;
  }

  // Sends `frame` and returns the first {ctrl} (or {meta}) carrying its id.
  async request(kind, body, opts = {}) {
    const id = body.id || this.id();
    const m = this.mark();
    this.send({ [kind]: { id, ...body } });
    const e = await this.log.wait((msg) => (msg.ctrl && msg.ctrl.id === id) || (!opts.ctrlOnly && msg.meta && msg.meta.id === id), {
      since: m,
      timeout: opts.timeout || 5000,
      what: `the answer to {${kind}} ${id}`,
    });
    return e.msg.ctrl || e.msg.meta;
  }

  // The next frame (any kind) after `since`.
  async next(since, what = 'a frame', timeout = 5000) {
    const e = await this.log.wait(() => true, { since, timeout, what });
    return e;
  }

  wait(kind, pred, opts = {}) {
    return this.log.wait((m) => m && m[kind] && (!pred || pred(m[kind])), { what: `{${kind}}`, ...opts }).then((e) => e.msg[kind]);
  }

  none(kind, pred, opts = {}) {
    return this.log.none((m) => m[kind] && (!pred || pred(m[kind])), { what: `{${kind}}`, ...opts });
  }

  async hi() {
    const ctrl = await this.request('hi', { ver: '0.25.3', ua: 'qim-e2e raw' });
    assert.equal(ctrl.code, 201, `${this.label}: hi answers 201`);
    return ctrl;
  }

  // Creates an account (acc basic, login:true) on this connection.
  async account(prefix = 'raw') {
    const login = this.ctx.unique(prefix);
    const ctrl = await this.request('acc', {
      user: 'new',
      scheme: 'basic',
      secret: Buffer.from(`${login}:${PASSWORD}`).toString('base64'),
      login: true,
      desc: { public: { fn: `${this.label} ${login}` } },
    });
    assert.equal(ctrl.code, 200, `${this.label}: acc with login:true answers 200 (got ${ctrl.code} ${ctrl.text})`);
    assert.match(ctrl.params.user, UID_RE);
    this.uid = ctrl.params.user;
    this.login = login;
    this.token = ctrl.params.token;
    return ctrl;
  }

  async loginToken(token) {
    const ctrl = await this.request('login', { scheme: 'token', secret: token });
    assert.equal(ctrl.code, 200, `${this.label}: login token answers 200`);
    this.uid = ctrl.params.user;
    return ctrl;
  }

  // Creates a group and returns its grp… name.
  async createGroup(fn = 'raw group') {
    const ctrl = await this.request('sub', { topic: `new${this.nextId}`, set: { desc: { public: { fn } } } }, { ctrlOnly: true });
    assert.equal(ctrl.code, 200, `${this.label}: creating a group answers 200`);
    assert.ok(ctrl.topic && ctrl.topic.startsWith('grp'));
    return ctrl.topic;
  }

  async join(name) {
    const ctrl = await this.request('sub', { topic: name }, { ctrlOnly: true });
    assert.equal(ctrl.code, 200, `${this.label}: joining ${name} answers 200 (got ${ctrl.code} ${ctrl.text})`);
    return ctrl;
  }

  // Sends a pub and returns its ctrl.
  pub(topic, content, extra = {}) {
    return this.request('pub', { topic, content, ...extra }, { ctrlOnly: true });
  }

  // A get data and its answer: {ctrl, data:[bodies]}.
  async getData(topic, data) {
    const id = this.id();
    const m = this.mark();
    this.send({ get: { id, topic, what: 'data', ...(data ? { data } : {}) } });
    const ctrl = await this.wait('ctrl', (c) => c.id === id, { since: m, what: `the answer to get data ${id}` });
    const got = this.log.filter((msg) => msg.data && msg.data.topic === topic, m).map((e) => e.msg.data);
    return { ctrl, data: got };
  }
}

// A client whose socket is open (no {hi} sent yet).
async function rawOpen(ctx, label, opts) {
  const c = new RawClient(ctx, label, opts);
  await c.open();
  return c;
}

// A client that said hi and created an account.
async function rawUser(ctx, label) {
  const c = await rawOpen(ctx, label);
  await c.hi();
  await c.account(label.replace(/[^a-z]/gi, '').slice(0, 6) || 'raw');
  return c;
}

// An HTTP request to the server; resolves {status, headers, body}.
function httpRequest(ctx, { method = 'GET', path = '/', headers = {}, body } = {}) {
  const [host, port] = [ctx.server.hostPort.slice(0, ctx.server.hostPort.lastIndexOf(':')), Number(ctx.server.hostPort.split(':').pop())];
  return withTimeout(
    new Promise((resolve, reject) => {
      const req = http.request({ host, port, method, path, headers }, (res) => {
        const chunks = [];
        res.on('data', (c) => chunks.push(c));
        res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, body: Buffer.concat(chunks).toString('utf8') }));
        res.on('error', reject);
      });
      req.on('error', reject);
      if (body !== undefined) req.write(typeof body === 'string' ? body : JSON.stringify(body));
      req.end();
    }),
    scaled(5000),
    `HTTP ${method} ${path}`,
  );
}

// The answer to a WebSocket upgrade that the server refuses: {status, headers, body}.
function refusedUpgrade(ctx, urlPath, headers) {
  return withTimeout(
    new Promise((resolve, reject) => {
      const ws = new WebSocket(`ws://${ctx.server.hostPort}${urlPath}`, { perMessageDeflate: false, headers });
      ws.on('open', () => {
        ws.terminate();
        reject(new Error(`the upgrade to ${urlPath} succeeded; expected a refusal`));
      });
      ws.on('unexpected-response', (_req, res) => {
        const chunks = [];
        res.on('data', (c) => chunks.push(c));
        res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, body: Buffer.concat(chunks).toString('utf8') }));
        res.on('error', reject);
      });
      ws.on('error', (err) => reject(new Error(`upgrade to ${urlPath}: ${err.message} (expected an HTTP refusal)`)));
    }),
    scaled(5000),
    `upgrade to ${urlPath}`,
  );
}

// A fresh ClientMessageId: 16 random non-zero bytes as 22 characters of URL-safe base64
// without padding (docs/protocol.md §3.6; Node's encoder gives the canonical spelling).
function newCmid() {
  let b;
  do b = crypto.randomBytes(16);
  while (b.every((x) => x === 0));
  return b.toString('base64url');
}

module.exports = { RawClient, httpRequest, newCmid, rawOpen, rawUser, refusedUpgrade };
