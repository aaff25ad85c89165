// adapters.js — one client interface over two protocols, so bench/peers/harness.js runs
// the same scenario and timing code against every server and only the server differs:
//   QimConn   Tinode JSON frames over a WebSocket (npm `ws`), as Tinode clients speak to qimd;
//   XmppConn  XMPP over TCP (npm `@xmpp/client` parts) for ejabberd and Prosody.
// Both expose: connect(), register() (XMPP in-band registration / Tinode {acc}), direct(peer)
// → a target for one-to-one messages, createRoom(name) / joinRoom(target) → a group
// target, send(target, body), onMessage(fn(body)) for messages from others, close().
'use strict';

const WebSocket = require('ws');
const { Client, xml } = require('@xmpp/client-core');

const TIMEOUT_MS = 20000; // any single setup step (login, join, create) must finish within this

function withTimeout(p, what) {
  let t;
  return Promise.race([
    p.finally(() => clearTimeout(t)),
    new Promise((_, rej) => { t = setTimeout(() => rej(new Error(`${what}: timed out`)), TIMEOUT_MS); }),
  ]);
}

// ---- qim: Tinode frames ------------------------------------------------------------------
class QimConn {
  constructor(opts, account) {
    this.opts = opts;
    this.acc = account; // { login, password, uid, token }
    this.waiting = new Map(); // ctrl id → resolve
    this.onmsg = () => {};
    this.seq = 0;
  }

  connect() {
    return withTimeout(new Promise((res, rej) => {
      this.ws = new WebSocket(`ws://${this.opts.host}:${this.opts.port}/v0/channels?apikey=${this.opts.apikey}`, { perMessageDeflate: false });
      this.ws.on('error', rej);
      this.ws.on('open', () => res());
      this.ws.on('message', (d) => this.frame(d));
    }), 'qim connect').then(() => this.ctrl({ hi: { ver: '0.25', ua: 'qim-bench-peers', platf: 'web' } }));
  }

  frame(d) {
    const m = JSON.parse(d);
    if (m.ctrl && m.ctrl.id && this.waiting.has(m.ctrl.id)) {
      const f = this.waiting.get(m.ctrl.id);
      this.waiting.delete(m.ctrl.id);
      f(m.ctrl);
    } else if (m.data) {
      if (m.data.from !== this.acc.uid) this.onmsg(typeof m.data.content === 'string' ? m.data.content : '');
    }
  }

  // Sends a frame whose single key's object gets an id; resolves with its {ctrl}.
  ctrl(frame, ok = (c) => c.code < 300) {
    const id = `c${++this.seq}`;
    const key = Object.keys(frame)[0];
    frame[key].id = id;
    const p = new Promise((res) => this.waiting.set(id, res));
    this.ws.send(JSON.stringify(frame));
    return withTimeout(p, `qim ${key}`).then((c) => {
      if (!ok(c)) throw new Error(`qim ${key}: ${c.code} ${c.text}`);
      return c;
    });
  }

  async register() {
    const secret = Buffer.from(`${this.acc.login}:${this.acc.password}`).toString('base64');
    const c = await this.ctrl({ acc: { user: 'new', scheme: 'basic', secret, login: true, desc: { public: { fn: this.acc.login } } } });
    this.acc.uid = c.params.user;
    this.acc.token = c.params.token;
  }

  login() {
    return this.ctrl({ login: { scheme: 'token', secret: this.acc.token } });
  }

  // One-to-one: the p2p topic (`sub usr<peer>`; the first side's sub creates the
  // conversation), or with --qim-direct group a 2-member group made by the pair's first member.
  async direct(peer, creator) {
    if (this.opts.qimDirect === 'p2p') {
      await this.ctrl({ sub: { topic: peer.acc.uid } });
      return peer.acc.uid;
    }
    if (!creator) return null; // the group is made by the pair's first member
    const topic = await this.createRoom('pair');
    await peer.joinRoom(topic);
    return topic;
  }

  async createRoom() {
    const c = await this.ctrl({ sub: { topic: `new${this.seq}`, set: { desc: { public: { fn: 'bench' } } } } });
    return c.topic;
  }

  joinRoom(topic) {
    return this.ctrl({ sub: { topic } });
  }

  send(topic, body) {
    this.ws.send(JSON.stringify({ pub: { topic, noecho: true, content: body } }));
  }

  onMessage(fn) { this.onmsg = fn; }

  close() {
    return new Promise((res) => {
      if (this.ws.readyState === WebSocket.CLOSED) return res();
      this.ws.once('close', res);
      this.ws.close();
      setTimeout(() => { this.ws.terminate(); res(); }, 2000).unref();
    });
  }
}

// ---- XMPP --------------------------------------------------------------------------------
// A client made of @xmpp/client's parts without STARTTLS (loopback; the servers offer none)
// and with PLAIN as the only SASL mechanism: SCRAM would cost the client about a second of
// CPU per login and is not what is measured.
function xmppClient(opts, account) {
  const _tcp = require('@xmpp/tcp');
  const _middleware = require('@xmpp/middleware');
  const _streamFeatures = require('@xmpp/stream-features');
  const _iqCaller = require('@xmpp/iq/caller');
  const _sasl = require('@xmpp/sasl');
  const _bind = require('@xmpp/resource-binding');
  const _session = require('@xmpp/session-establishment');
  const plain = require('@xmpp/sasl-plain');
  const entity = new Client({ service: `xmpp://${opts.host}:${opts.port}`, domain: opts.domain });
  _tcp({ entity });
  const middleware = _middleware({ entity });
  const streamFeatures = _streamFeatures({ middleware });
  const iqCaller = _iqCaller({ middleware, entity });
  const sasl = _sasl({ streamFeatures }, { username: account.login, password: account.password });
  plain(sasl);
  _bind({ iqCaller, streamFeatures }, 'bench');
  _session({ iqCaller, streamFeatures });
  entity.iqCaller = iqCaller;
  return entity;
}

class XmppConn {
  constructor(opts, account) {
    this.opts = opts;
    this.acc = account;
    this.onmsg = () => {};
    this.presenceWait = new Map(); // room bare jid → resolve on our own occupant presence
  }

  jid(acc) { return `${acc.login}@${this.opts.domain}`; }

  async connect() {
    this.c = xmppClient(this.opts, this.acc);
    this.c.on('error', () => {});
    this.c.on('stanza', (s) => this.stanza(s));
    await withTimeout(this.c.start(), 'xmpp login');
    await this.c.send(xml('presence')); // available: chat messages go to this session
  }

  stanza(s) {
    if (s.is('message')) {
      const body = s.getChildText('body');
      if (body !== null && s.attrs.type !== 'error') this.onmsg(body);
    } else if (s.is('presence')) {
      const room = (s.attrs.from || '').split('/')[0];
      const x = s.getChild('x', 'http://jabber.org/protocol/muc#user');
      const self = x && x.getChildren('status').some((st) => st.attrs.code === '110');
      if (self && this.presenceWait.has(room)) {
        const f = this.presenceWait.get(room);
        this.presenceWait.delete(room);
        f(s);
      } else if (s.attrs.type === 'error' && this.presenceWait.has(room)) {
        const f = this.presenceWait.get(room);
        this.presenceWait.delete(room);
        f(s);
      }
    }
  }

  // In-band registration (XEP-0077) on a raw stream: connect, register, done.
  register() {
    const net = require('net');
    return withTimeout(new Promise((res, rej) => {
      const s = net.connect(this.opts.port, this.opts.host);
      let buf = '';
      let asked = false;
      s.setEncoding('utf8');
      s.on('error', rej);
      s.on('connect', () => s.write(`<?xml version='1.0'?><stream:stream to='${this.opts.domain}' xmlns='jabber:client' xmlns:stream='http://etherx.jabber.org/streams' version='1.0'>`));
      s.on('data', (d) => {
        buf += d;
        if (!asked && buf.includes('</stream:features>')) {
          asked = true;
          s.write(`<iq type='set' id='reg1'><query xmlns='jabber:iq:register'><username>${this.acc.login}</username><password>${this.acc.password}</password></query></iq>`);
        }
        const m = buf.match(/<iq[^>]*id=['"]reg1['"][^>]*>/);
        if (m) {
          s.end('</stream:stream>');
          if (/type=['"]result['"]/.test(m[0]) || /<conflict/.test(buf)) res();
          else rej(new Error(`xmpp register: ${buf.slice(0, 300)}`));
        }
      });
    }), 'xmpp register');
  }

  async direct(peer) { return { to: this.jid(peer.acc), type: 'chat' }; }

  // Creates a MUC room and unlocks it (an "instant room": the owner submits the default
  // configuration), so that others may join.
  async createRoom(name) {
    const room = `${name}@${this.opts.muc}`;
    await this.joinRoom({ room });
    await withTimeout(this.c.iqCaller.request(xml('iq', { type: 'set', to: room },
      xml('query', { xmlns: 'http://jabber.org/protocol/muc#owner' }, xml('x', { xmlns: 'jabber:x:data', type: 'submit' })))), 'xmpp unlock room');
    return { to: room, type: 'groupchat', room };
  }

  async joinRoom(target) {
    const room = target.room;
    const p = new Promise((res) => this.presenceWait.set(room, res));
    await this.c.send(xml('presence', { to: `${room}/${this.acc.login}` }, xml('x', { xmlns: 'http://jabber.org/protocol/muc' }, xml('history', { maxstanzas: '0' }))));
    const s = await withTimeout(p, 'xmpp join room');
    if (s.attrs.type === 'error') throw new Error(`xmpp join ${room}: ${s.toString().slice(0, 300)}`);
  }

  send(target, body) {
    this.c.send(xml('message', { to: target.to, type: target.type }, xml('body', {}, body))).catch(() => {});
  }

  onMessage(fn) { this.onmsg = fn; }

  async close() {
    try { await withTimeout(this.c.stop(), 'xmpp close'); } catch { /* the socket goes anyway */ }
  }
}

module.exports = { QimConn, XmppConn };
