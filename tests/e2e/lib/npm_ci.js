// npm_ci.js — makes tests/e2e/node_modules match the committed package-lock.json before
// the Node tests run (the ctest fixture e2e_npm_ci). It runs `npm ci` when node_modules is
// missing, older than the lock file, or holds a version other than the locked one;
// otherwise it does nothing, so repeated test runs work offline. A failing `npm ci` fails
// the fixture (and with it every Node test): nothing is skipped. A lock directory keeps
// two builds' test runs from installing into the same folder at once.
//   node tests/e2e/lib/npm_ci.js
'use strict';

const childProcess = require('node:child_process');
const crypto = require('node:crypto');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');

const dir = path.resolve(__dirname, '..');
const lockFile = path.join(dir, 'package-lock.json');
const installed = path.join(dir, 'node_modules', '.package-lock.json');

function mtime(p) {
  try {
    return fs.statSync(p).mtimeMs;
  } catch (_) {
    return -1;
  }
}

// Why an install is needed, or null when node_modules already matches the lock file.
function staleReason() {
  if (mtime(installed) < 0) return 'node_modules is missing';
  if (mtime(installed) < mtime(lockFile)) return 'node_modules is older than package-lock.json';
  const lock = JSON.parse(fs.readFileSync(lockFile, 'utf8'));
  for (const [key, rec] of Object.entries(lock.packages || {})) {
    if (!key.startsWith('node_modules/')) continue;
    let have;
    try {
      have = JSON.parse(fs.readFileSync(path.join(dir, key, 'package.json'), 'utf8')).version;
    } catch (_) {
      return `${key} is missing`;
    }
    if (have !== rec.version) return `${key} is ${have}, the lock file says ${rec.version}`;
  }
  return null;
}

function sleepSync(ms) {
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
}

// mkdir is atomic: whoever creates the directory installs; a lock older than 10 minutes
// is left over from a killed run and is taken over.
function withLock(fn) {
  const name = crypto.createHash('sha256').update(dir).digest('hex').slice(0, 16);
  const lock = path.join(os.tmpdir(), `qim-e2e-npm-${name}.lock`);
  const deadline = Date.now() + 10 * 60 * 1000;
  for (;;) {
    try {
      fs.mkdirSync(lock);
      break;
    } catch (err) {
      if (err.code !== 'EEXIST') throw err;
      if (Date.now() - mtime(lock) > 10 * 60 * 1000) {
        fs.rmSync(lock, { recursive: true, force: true });
        continue;
      }
      if (Date.now() > deadline) throw new Error(`waited too long for ${lock}`);
      sleepSync(200);
    }
  }
  try {
    return fn();
  } finally {
    fs.rmSync(lock, { recursive: true, force: true });
  }
}

function main() {
  const status = withLock(() => {
    const why = staleReason();
    if (!why) {
      console.log(`npm_ci: ${path.join(dir, 'node_modules')} matches package-lock.json`);
      return 0;
    }
    console.log(`npm_ci: ${why}; running npm ci in ${dir}`);
    const res = childProcess.spawnSync('npm', ['ci', '--no-audit', '--no-fund'], { cwd: dir, stdio: 'inherit' });
    if (res.error) {
      console.error(`npm_ci: cannot run npm: ${res.error.message}`);
      return 1;
    }
    if (res.status !== 0) {
      console.error(`npm_ci: npm ci failed with status ${res.status}`);
      return 1;
    }
    const still = staleReason();
    if (still) {
      console.error(`npm_ci: after npm ci, ${still}`);
      return 1;
    }
    return 0;
  });
  process.exit(status);
}

main();
