// slow_clients.test.js — clients that misbehave by being slow or many (issue 12): a reader
// that stops reading is disconnected once its bounded output queue fills while another
// member keeps receiving every message; a slowloris upgrade (a request trickling in byte by
// byte) is closed by the handshake timeout; connections beyond the per-IP limit are refused
// with HTTP 429 and a JSON reason while /healthz and the live connections keep working.
// qimd runs with a 1 s handshake timeout, 8 connections per IP and a send burst large
// enough for one publisher to fill a queue. Needs its own qimd (reads its log).
//   node tests/e2e/slow_clients.test.js [--only TEXT]
'use strict';

const assert = require('node:assert/strict');
const net = require('node:net');
const { API_KEY, Suite, sleep, waitUntil } = require('./lib/harness');
const { httpRequest, rawOpen, rawUser, refusedUpgrade } = require('./lib/raw');

const MAX_PER_IP = 8;
const suite = new Suite('slow_clients', {
  qimdArgs: ['--handshake-timeout', '1s', '--conns-per-ip', String(MAX_PER_IP), '--send-rate', '100000', '--send-burst', '100000'],
});

suite.test('per-IP limit: upgrades beyond it get 429 with a JSON reason; healthz and live connections keep working', async (ctx) => {
  const open = [];
  let refused = null;
  for (let i = 0; i <= MAX_PER_IP + 2 && !refused; i++) {
    try {
      open.push(await rawOpen(ctx, `c${i}`));
    } catch (err) {
      refused = err;
    }
  }
  assert.ok(refused, `an upgrade beyond ${MAX_PER_IP} live connections is refused`);
  assert.match(refused.message, /HTTP 429/);
  assert.ok(open.length >= 1 && open.length <= MAX_PER_IP, `${open.length} connections were accepted first`);
  const r = await refusedUpgrade(ctx, `/v0/channels?apikey=${API_KEY}`);
  assert.equal(r.status, 429);
  assert.deepEqual(JSON.parse(r.body), { ctrl: { code: 429, text: 'too many connections from this address' } });
  assert.equal((await httpRequest(ctx, { path: '/healthz' })).status, 200, '/healthz is not limited');
  await open[0].hi(); // the live connections are untouched
  for (const c of open) c.close();
  await waitUntil(async () => {
    try {
      (await rawOpen(ctx, 'after')).close();
      return true;
    } catch (_) {
      return false;
    }
  }, 5000, 'an upgrade to succeed once the connections closed');
});

suite.test('slowloris: an upgrade request trickling in is closed by the handshake timeout', async (ctx) => {
  const [host, port] = ctx.server.hostPort.split(':');
  const sock = net.connect(Number(port), host);
  let answer = '';
  sock.on('data', (d) => (answer += d.toString('latin1')));
  const closed = new Promise((resolve) => sock.on('close', resolve));
  sock.on('error', () => {});
  await new Promise((resolve) => sock.once('connect', resolve));
  const request = `GET /v0/channels?apikey=${API_KEY} HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nX-Pad: ${'a'.repeat(10000)}`;
  let sent = 0;
  let isClosed = false;
  closed.then(() => (isClosed = true));
  // One byte every 100 ms: the request never completes, only the server can end this.
  while (!isClosed && sent < request.length) {
    sock.write(request[sent++]);
    await sleep(100);
  }
  assert.ok(isClosed, 'the server closed the connection before the request was complete');
  assert.ok(!/^HTTP\/1\.1 101/.test(answer), `no upgrade happened (answer: ${JSON.stringify(answer.slice(0, 80))})`);
  await rawOpen(ctx, 'normal').then((c) => c.hi()); // others still get in
}, { timeout: 30000 });

suite.test('slow reader: disconnected when its queue fills; another member receives every message', async (ctx) => {
  const a = await rawUser(ctx, 'pub');
  const fast = await rawUser(ctx, 'fast');
  const slow = await rawUser(ctx, 'slow');
  const grp = await a.createGroup('slow reader');
  await fast.join(grp);
  await slow.join(grp);
  const seqs = [];
  const publish = async (n, size) => {
    const acks = await Promise.all(Array.from({ length: n }, (_, i) => a.pub(grp, `${seqs.length + i} ${'x'.repeat(size)}`, { noecho: true })));
    for (const c of acks) {
      assert.equal(c.code, 202, `pub answered ${c.code} ${c.text}`);
      seqs.push(c.params.seq);
    }
  };
  for (let i = 0; i < 3; i++) await publish(8, 100000); // 2.4 MB of history
  // The slow member stops reading and keeps asking for the whole history: its replies
  // (and the live messages published meanwhile) pile up in the kernel buffers, then in
  // qimd's bounded output queue, until qimd cuts it off.
  slow.ws._socket.pause();
  const logged = () => /event=gateway\.slow_consumer/.test(ctx.server.stderrText ? ctx.server.stderrText() : '');
  for (let i = 0; i < 60 && !logged(); i++) {
    slow.send({ get: { id: `h${i}`, topic: grp, what: 'data', data: { limit: 24 } } });
    await publish(1, 100);
  }
  await waitUntil(logged, 10000, 'qimd to log event=gateway.slow_consumer');
  await publish(8, 100); // and after the cut
  // The fast member got every message once, in order.
  const want = [...seqs].sort((x, y) => x - y);
  const got = () => fast.log.filter((m) => m.data && m.data.topic === grp).map((e) => e.msg.data.seq);
  await waitUntil(() => got().length >= want.length, 30000, `the fast member to receive all ${want.length} messages`);
  assert.deepEqual(got(), want, 'the fast member received every message once, in order');
  slow.ws._socket.resume();
  const info = await slow.closed;
  assert.ok([1006, 1008].includes(info.code), `the slow reader was closed (code ${info.code})`);
  assert.equal((await a.pub(grp, 'after')).code, 202, 'the publisher is unaffected');
}, { timeout: 90000 });

suite.run();
