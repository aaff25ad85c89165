// harness.js — the end-to-end test harness: starts the real qimd on a free loopback port
// with its own data directory (or uses a server that is already running, --server), runs
// a list of async tests one after another with a timeout each, prints one line per test
// and a summary, and stops qimd with SIGTERM (SIGKILL after a grace period). qimd's stderr
// goes to a file that is printed when anything fails. No test framework: plain Node and
// `assert`, so the suite needs nothing beyond the three pinned npm packages.
//
// Command line of every *.test.js file (all optional):
//   --server HOST:PORT   use a running server instead of starting qimd
//   --qimd PATH          the qimd binary (else $QIMD, else ../../build/src/qimd)
//   --only TEXT          run only the tests whose name contains TEXT (repeatable)
//   --service-token T    admin token of a --server (pipeline test; else $QIM_E2E_SERVICE_TOKEN)
//   --verbose            print every frame the test clients see when a test fails
// Environment: QIMD, QIM_ERRLOG (passed through to qimd), QIM_E2E_KEEP=1 keeps the data
// directory and stderr file, QIM_E2E_TIMEOUT_SCALE multiplies every timeout (slow machines).
'use strict';

const assert = require('node:assert/strict');
const childProcess = require('node:child_process');
const fs = require('node:fs');
const net = require('node:net');
const os = require('node:os');
const path = require('node:path');

// Tinode's well-known demo key; qimd's default configuration accepts it for tenant 1.
const API_KEY = 'AQEAAAABAAD_rAp4DJh05a1HAwFT3A6K';
// The admin token the harness gives qimd (--service-token SERVICE:TOKEN); see pipeline.test.js.
const SERVICE = 'e2e';
const SERVICE_TOKEN = 'e2e-service-token-0123456789';

const SCALE = Number(process.env.QIM_E2E_TIMEOUT_SCALE) > 0 ? Number(process.env.QIM_E2E_TIMEOUT_SCALE) : 1;

function scaled(ms) {
  return Math.round(ms * SCALE);
}

function sleep(ms) {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

// Resolves after the SDK has applied everything it received so far: the SDK applies
// {meta}/{data}/{pres}/{info} in setTimeout(0), so two timer hops land after those.
function settle() {
  return new Promise((resolve) => setTimeout(() => setTimeout(resolve, 0), 0));
}

// Races `promise` against a timer; the error names `what` so a hang is easy to place.
function withTimeout(promise, ms, what) {
  let timer;
  const limit = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out after ${ms} ms: ${what}`)), ms);
  });
  return Promise.race([promise, limit]).finally(() => clearTimeout(timer));
}

// Polls `pred` (sync or async) until it returns something truthy; returns that value.
async function waitUntil(pred, ms, what) {
  const deadline = Date.now() + scaled(ms);
  for (;;) {
    const v = await pred();
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`timed out after ${scaled(ms)} ms waiting for ${what}`);
    await sleep(20);
  }
}

// Awaits a promise that must reject with a Tinode CommError (or a {ctrl}) carrying `code`.
async function expectCode(promise, code, what) {
  let value;
  try {
    value = await promise;
  } catch (err) {
    assert.equal(err && err.code, code, `${what}: expected code ${code}, got ${err && err.code} (${err && err.message})`);
    return err;
  }
  const got = value && typeof value.code === 'number' ? value.code : JSON.stringify(value);
  assert.fail(`${what}: expected a rejection with code ${code}, got a success (${got})`);
}

// ---------------------------------------------------------------------------------------
// Command line

function parseArgs(argv) {
  const opts = { server: null, qimd: null, only: [], verbose: false, serviceToken: null };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const value = () => {
      if (i + 1 >= argv.length) throw new Error(`${a} needs a value`);
      return argv[++i];
    };
    if (a === '--server') opts.server = value();
    else if (a === '--qimd') opts.qimd = value();
    else if (a === '--only') opts.only.push(value());
    else if (a === '--service-token') opts.serviceToken = value();
    else if (a === '--verbose' || a === '-v') opts.verbose = true;
    else if (a === '--help' || a === '-h') opts.help = true;
    else throw new Error(`unknown argument '${a}' (see tests/e2e/README.md)`);
  }
  if (opts.server && !/^[^\s:]+:\d+$/.test(opts.server)) throw new Error(`--server expects HOST:PORT, got '${opts.server}'`);
  return opts;
}

// ---------------------------------------------------------------------------------------
// The qimd process

// A loopback port the kernel just handed out; qimd binds it a moment later (start() retries
// with another port if that ever loses a race).
function freePort() {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.unref();
    srv.on('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
  });
}

function findQimd(opts) {
  const candidates = [opts.qimd, process.env.QIMD, path.resolve(__dirname, '../../../build/src/qimd')];
  for (const c of candidates) {
    if (c && fs.existsSync(c)) return path.resolve(c);
  }
  throw new Error('qimd binary not found: pass --qimd PATH or set QIMD (ctest does), or build ./build first');
}

// Resolves true when a WebSocket upgrade to /v0/channels with the demo key succeeds (the
// server answers 101); resolves with the error text otherwise. Closes the socket at once.
function probeUpgrade(host, port, ms) {
  const WebSocket = require('ws');
  return new Promise((resolve) => {
    let done = false;
    const finish = (v) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      try {
        ws.terminate();
      } catch (_) {
        /* already gone */
      }
      resolve(v);
    };
    const ws = new WebSocket(`ws://${host}:${port}/v0/channels?apikey=${API_KEY}`, { perMessageDeflate: false });
    const timer = setTimeout(() => finish(`no answer within ${ms} ms`), ms);
    ws.on('open', () => finish(true));
    ws.on('unexpected-response', (_req, res) => finish(`HTTP ${res.statusCode} instead of 101`));
    ws.on('error', (err) => finish(err.message));
  });
}

class Qimd {
  constructor(binary, extraArgs) {
    this.binary = binary;
    this.extraArgs = extraArgs || [];
    this.dir = fs.mkdtempSync(path.join(process.env.TMPDIR || os.tmpdir(), 'qim-e2e-'));
    this.stderrPath = path.join(this.dir, 'qimd.stderr');
    this.proc = null;
    this.exit = null; // {code, signal} once the process is gone
    this.stopping = false;
    this.external = false;
  }

  get hostPort() {
    return `127.0.0.1:${this.port}`;
  }

  async start() {
    let lastError;
    for (let attempt = 0; attempt < 3; attempt++) {
      this.port = await freePort();
      try {
        await this._startOnce();
        return;
      } catch (err) {
        lastError = err;
        await this._kill();
        // Only a lost race for the port is worth another try.
        if (!/EADDRINUSE|address already in use/i.test(this.stderrText())) break;
      }
    }
    throw lastError;
  }

  async _startOnce() {
    const args = ['--listen', this.hostPort, '--data', path.join(this.dir, 'data'), ...this.extraArgs];
    const err = fs.openSync(this.stderrPath, 'a');
    const out = fs.openSync(path.join(this.dir, 'qimd.stdout'), 'a');
    fs.writeSync(err, `# ${this.binary} ${args.join(' ')}\n`);
    this.exit = null;
    // QIM_ERRLOG (the file the contract check reads) and everything else pass through.
    this.proc = childProcess.spawn(this.binary, args, { stdio: ['ignore', out, err], env: process.env });
    fs.closeSync(err);
    fs.closeSync(out);
    this.exited = new Promise((resolve) => {
      this.proc.on('exit', (code, signal) => {
        this.exit = { code, signal };
        resolve(this.exit);
      });
      this.proc.on('error', (e) => {
        this.exit = { code: null, signal: null, error: e.message };
        resolve(this.exit);
      });
    });
    await this._waitReady();
  }

  // Ready means the WebSocket endpoint answers an upgrade. The `event=server.ready` log
  // line alone is not enough (a server can log it and still refuse upgrades), but once it
  // is there we give the endpoint 5 s more and then report why the upgrade fails.
  async _waitReady() {
    const deadline = Date.now() + scaled(20000);
    let readySince = 0;
    let last = '';
    for (;;) {
      if (this.exit) throw new Error(`qimd exited before it was ready (${describeExit(this.exit)})`);
      const r = await probeUpgrade('127.0.0.1', this.port, 1000);
      if (r === true) return;
      last = r;
      if (!readySince && /event=server\.ready/.test(this.stderrText())) readySince = Date.now();
      if (readySince && Date.now() - readySince > scaled(5000))
        throw new Error(`qimd logged event=server.ready but a WebSocket upgrade to /v0/channels fails: ${last}`);
      if (Date.now() > deadline) throw new Error(`qimd not ready within ${scaled(20000)} ms (last upgrade attempt: ${last})`);
      await sleep(100);
    }
  }

  stderrText() {
    try {
      return fs.readFileSync(this.stderrPath, 'utf8');
    } catch (_) {
      return '';
    }
  }

  // SIGTERM, then SIGKILL after `graceMs`; returns the exit record.
  async stop(graceMs = 10000) {
    this.stopping = true;
    if (!this.proc || this.exit) return this.exit;
    this.proc.kill('SIGTERM');
    const timer = setTimeout(() => {
      if (!this.exit) {
        this.killedHard = true;
        this.proc.kill('SIGKILL');
      }
    }, scaled(graceMs));
    const exit = await this.exited;
    clearTimeout(timer);
    return exit;
  }

  async _kill() {
    if (this.proc && !this.exit) {
      this.proc.kill('SIGKILL');
      await this.exited;
    }
  }

  removeDir() {
    fs.rmSync(this.dir, { recursive: true, force: true });
  }
}

function describeExit(e) {
  if (!e) return 'still running';
  if (e.error) return `could not start: ${e.error}`;
  return e.signal ? `killed by ${e.signal}` : `exit status ${e.code}`;
}

// A server someone else started (--server): nothing to start or stop.
class ExternalServer {
  constructor(hostPort) {
    this.external = true;
    this.hostPort = hostPort;
    const i = hostPort.lastIndexOf(':');
    this.host = hostPort.slice(0, i);
    this.port = Number(hostPort.slice(i + 1));
    this.exit = null;
  }
}

// ---------------------------------------------------------------------------------------
// The runner

// Per-test context: the server, a place to register cleanups (run in reverse order after
// the test, whatever its outcome), unique names, and debug dumps shown on failure.
class Context {
  constructor(suite, server, opts) {
    this.suite = suite;
    this.server = server;
    this.opts = opts;
    this.cleanups = [];
    this.dumps = [];
    this.problems = []; // protocol invariants broken by frames the clients received
  }
  cleanup(fn) {
    this.cleanups.push(fn);
  }
  dump(fn) {
    this.dumps.push(fn);
  }
  // A name no other test (and no earlier run against the same --server) has used:
  // lowercase letters and digits, as Tinode's basic logins want.
  unique(prefix) {
    return uniqueName(prefix);
  }
}

let nameCounter = 0;
const runTag = (Date.now().toString(36) + Math.floor(Math.random() * 1296).toString(36)).slice(-8);
function uniqueName(prefix) {
  nameCounter++;
  return `${prefix}${runTag}${nameCounter.toString(36)}`.toLowerCase();
}

class Suite {
  constructor(name, options) {
    this.name = name;
    this.options = options || {};
    this.tests = [];
  }

  // test(name, async (ctx) => {...}, {timeout}) — the default timeout is 15 s.
  test(name, fn, opts) {
    this.tests.push({ name, fn, timeout: (opts && opts.timeout) || 15000 });
  }

  async run(argv = process.argv.slice(2)) {
    let opts;
    try {
      opts = parseArgs(argv);
    } catch (err) {
      console.error(`${this.name}: ${err.message}`);
      process.exit(2);
    }
    if (opts.help) {
      console.log(`usage: node ${path.basename(process.argv[1])} [--server HOST:PORT] [--qimd PATH] [--only TEXT] [--service-token T] [--verbose]`);
      process.exit(0);
    }
    const started = Date.now();
    const unhandled = [];
    process.on('unhandledRejection', (reason) => {
      // The SDK fires some requests without catching them (e.g. the `get sub` it sends on
      // a `pres acs`); their rejections when a test disconnects are not test failures.
      unhandled.push(reason);
      if (opts.verbose) console.log(`#   (unhandled rejection ignored: ${reason && reason.message ? reason.message : reason})`);
    });

    let server;
    try {
      server = await this._startServer(opts);
    } catch (err) {
      // _startServer has printed qimd's stderr already.
      console.log(`not ok - ${this.name}: ${opts.server ? 'reach the server' : 'start qimd'}: ${err.message}`);
      process.exit(1);
    }
    // Whatever ends this process, qimd must not outlive it.
    process.on('exit', () => {
      if (server.proc && !server.exit) server.proc.kill('SIGKILL');
    });
    process.on('uncaughtException', (err) => {
      console.log(`not ok - uncaught exception (a bug in the test or the SDK): ${formatError(err)}`);
      if (!server.external) {
        printStderr(server);
        if (!server.exit) server.proc.kill('SIGKILL');
        if (process.env.QIM_E2E_KEEP !== '1') server.removeDir();
      }
      process.exit(1);
    });
    let stopping = false;
    const onSignal = async (sig) => {
      if (stopping) return;
      stopping = true;
      console.log(`# ${sig}: stopping qimd`);
      if (!server.external) await server.stop(2000);
      process.exit(1);
    };
    process.on('SIGTERM', () => onSignal('SIGTERM'));
    process.on('SIGINT', () => onSignal('SIGINT'));

    const where = server.external ? `the server at ${server.hostPort}` : `qimd ${server.binary} on ${server.hostPort}`;
    console.log(`# ${this.name}: ${where}`);
    const selected = this.tests.filter((t) => opts.only.length === 0 || opts.only.some((o) => t.name.includes(o)));
    let passed = 0;
    const failed = [];
    // The whole file must finish well inside ctest's timeout (150 s), qimd's stop included.
    const budget = scaled(100000);
    for (let i = 0; i < selected.length; i++) {
      const t = selected[i];
      if (Date.now() - started > budget) {
        failed.push('time budget');
        console.log(`not ok - the time budget of ${budget / 1000} s is used up; ${selected.length - i} tests not run`);
        break;
      }
      const res = await this._runOne(t, server, opts);
      const ms = `${res.ms} ms`;
      if (res.error) {
        failed.push(t.name);
        console.log(`not ok ${i + 1} - ${t.name} (${ms})`);
        console.log(indent(formatError(res.error), '#   '));
        for (const d of res.dumps) console.log(indent(d, '#   '));
      } else {
        passed++;
        console.log(`ok ${i + 1} - ${t.name} (${ms})`);
      }
      // A test that failed may have crashed qimd: give the exit a moment to show up.
      if (res.error && !server.external && !server.exit) await Promise.race([server.exited, sleep(300)]);
      if (server.exit && !server.stopping) {
        failed.push('qimd stays up');
        console.log(`not ok - qimd exited during "${t.name}" (${describeExit(server.exit)}); the remaining tests were not run`);
        break;
      }
    }

    if (!server.external) {
      const crashed = !!server.exit;
      const exit = await server.stop();
      const clean = exit && exit.code === 0 && !server.killedHard;
      if (!clean && !crashed) {
        failed.push('qimd stops cleanly');
        console.log(`not ok - qimd stops cleanly on SIGTERM (${server.killedHard ? 'needed SIGKILL' : describeExit(exit)})`);
      }
      if (failed.length) printStderr(server);
      if (process.env.QIM_E2E_KEEP === '1') console.log(`# kept ${server.dir}`);
      else server.removeDir();
    }
    const secs = ((Date.now() - started) / 1000).toFixed(1);
    const skipped = this.tests.length - selected.length;
    console.log(
      `# ${this.name}: ${passed} passed, ${failed.length} failed` + (skipped ? `, ${skipped} not selected` : '') + ` (${secs} s)`,
    );
    if (failed.length) console.log(`# failed: ${failed.join('; ')}`);
    if (unhandled.length) console.log(`# ${unhandled.length} unhandled rejection(s) inside the SDK ignored (--verbose shows them)`);
    process.exit(failed.length ? 1 : 0);
  }

  async _startServer(opts) {
    if (opts.server) {
      const ext = new ExternalServer(opts.server);
      const r = await probeUpgrade(ext.host, ext.port, scaled(5000));
      if (r !== true) throw new Error(`no WebSocket upgrade at ws://${opts.server}/v0/channels: ${r}`);
      return ext;
    }
    const extra = this.options.qimdArgs || [];
    const q = new Qimd(findQimd(opts), extra);
    try {
      await q.start();
    } catch (err) {
      printStderr(q);
      if (process.env.QIM_E2E_KEEP !== '1') q.removeDir();
      throw err;
    }
    q.host = '127.0.0.1';
    return q;
  }

  async _runOne(t, server, opts) {
    const ctx = new Context(this, server, opts);
    const t0 = Date.now();
    let error = null;
    try {
      await withTimeout(Promise.resolve().then(() => t.fn(ctx)), scaled(t.timeout), `test "${t.name}"`);
      if (ctx.problems.length) {
        error = new Error(`frames broke protocol invariants:\n  ${ctx.problems.slice(0, 20).join('\n  ')}`);
        error.stack = error.message;
      }
    } catch (err) {
      error = err;
    }
    const dumps = [];
    if (error) {
      for (const d of ctx.dumps) {
        try {
          dumps.push(d(opts.verbose));
        } catch (e) {
          dumps.push(`(dump failed: ${e.message})`);
        }
      }
    }
    for (const fn of ctx.cleanups.reverse()) {
      try {
        await withTimeout(Promise.resolve().then(fn), 5000, 'cleanup');
      } catch (e) {
        if (!error) error = new Error(`cleanup failed: ${e.message}`);
      }
    }
    return { error, ms: Date.now() - t0, dumps };
  }
}

function indent(text, prefix) {
  return String(text)
    .split('\n')
    .map((l) => prefix + l)
    .join('\n');
}

function formatError(err) {
  if (!err) return 'unknown error';
  if (err instanceof assert.AssertionError) return err.message;
  if (err.stack) {
    // Keep the test's own frames, drop Node's internals.
    return err.stack
      .split('\n')
      .filter((l) => !/node:internal|node_modules/.test(l))
      .slice(0, 8)
      .join('\n');
  }
  if (typeof err.code === 'number') return `CommError ${err.code}: ${err.message}`;
  return String(err && err.message ? err.message : JSON.stringify(err));
}

function printStderr(q) {
  const text = q.stderrText();
  const lines = text.split('\n');
  const tail = lines.length > 200 ? lines.slice(-200) : lines;
  console.log(`# qimd stderr (${q.stderrPath}${lines.length > 200 ? ', last 200 lines' : ''}):`);
  console.log(indent(tail.join('\n'), '#   '));
}

module.exports = {
  API_KEY,
  SERVICE,
  SERVICE_TOKEN,
  Qimd,
  Suite,
  expectCode,
  freePort,
  parseArgs,
  scaled,
  settle,
  sleep,
  uniqueName,
  waitUntil,
  withTimeout,
};
