// Helpers shared by the tests that drive a local `spar cluster` process.
'use strict';

const { spawn } = require('child_process');
const fs = require('fs');
const path = require('path');

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// The trimmed contents of `file` once a daemon has written it; fails when the
// child process exits first or after `seconds`.
async function waitForFile(file, child, seconds) {
  for (let i = 0; i < seconds * 10; i++) {
    if (fs.existsSync(file) && fs.readFileSync(file, 'utf8').trim() !== '') return fs.readFileSync(file, 'utf8').trim();
    if (child.exitCode !== null) throw new Error(`spar cluster exited (${child.exitCode}) before ${file} appeared`);
    await sleep(100);
  }
  throw new Error(`timed out waiting for ${file}`);
}

// Starts `spar cluster` (cpu backend, ports picked by the daemons) on
// `model` in a fresh `work` directory; resolves to { child, httpPort,
// grpcPort, logs }. `apiKey` goes through the environment (SPAR_API_KEY).
async function startCluster(spar, work, { model, stages = 2, apiKey, servedName, extraArgs = [] }) {
  fs.rmSync(work, { recursive: true, force: true });
  fs.mkdirSync(work, { recursive: true });
  const logs = path.join(work, 'logs');
  fs.mkdirSync(logs);
  const out = fs.openSync(path.join(work, 'cluster.out'), 'w');
  const args = ['cluster', '--stages', String(stages), '--model', model, '--port', '0', '--port-file',
                path.join(work, 'grpc.port'), '--http-port', '0', '--http-port-file', path.join(work, 'http.port'),
                '--log-dir', logs, ...extraArgs];
  if (servedName) args.push('--served-model-name', servedName);
  const env = { ...process.env };
  if (apiKey) env.SPAR_API_KEY = apiKey;
  const child = spawn(spar, args, { stdio: ['ignore', out, out], env });
  const grpcPort = await waitForFile(path.join(work, 'grpc.port'), child, 180);
  const httpPort = await waitForFile(path.join(work, 'http.port'), child, 30);
  return { child, httpPort, grpcPort, logs };
}

async function stopCluster(cluster) {
  cluster.child.kill('SIGTERM');
  await new Promise((r) => (cluster.child.exitCode !== null ? r() : cluster.child.on('exit', r)));
}

// The tail of every daemon log (printed when a test failed).
function dumpLogs(logs) {
  for (const f of fs.existsSync(logs) ? fs.readdirSync(logs) : []) {
    console.log(`----- ${f} (tail) -----\n${fs.readFileSync(path.join(logs, f), 'utf8').slice(-3000)}`);
  }
}

// Runs fn over items, `width` requests in flight (the scheduler batches them).
async function mapConcurrent(items, width, fn) {
  const out = new Array(items.length);
  let next = 0;
  const worker = async () => {
    while (next < items.length) {
      const i = next++;
      out[i] = await fn(items[i], i);
    }
  };
  await Promise.all(Array.from({ length: Math.min(width, items.length) }, worker));
  return out;
}

// Runs `tests` ([{name, fn}]) in order with `ctx`; returns the failures.
async function runTests(tests, ctx) {
  let failed = 0;
  for (const t of tests) {
    const start = Date.now();
    try {
      await t.fn(ctx);
      console.log(`ok   ${t.name} (${Date.now() - start} ms)`);
    } catch (e) {
      failed++;
      console.log(`FAIL ${t.name}\n${e.stack}`);
    }
  }
  return failed;
}

// Runs `tests` against `cluster` with `ctx`, stops the cluster, reports, and
// exits 1 (with the daemons' logs) when one failed.
async function runAgainstCluster(tests, cluster, ctx) {
  let failed = 0;
  try {
    failed = await runTests(tests, ctx);
  } finally {
    await stopCluster(cluster);
  }
  if (failed > 0) {
    dumpLogs(cluster.logs);
    console.log(`${failed} of ${tests.length} failed`);
    process.exit(1);
  }
  console.log(`all ${tests.length} passed`);
}

module.exports = { sleep, waitForFile, startCluster, stopCluster, dumpLogs, runTests, runAgainstCluster, mapConcurrent };
