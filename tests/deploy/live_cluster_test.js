// Observability on a live local cluster (one `spar cluster`: a scheduler
// and 2 stage workers on 127.0.0.1, shared by every check below):
//  - after traffic, Debian's `promtool check metrics` passes on each
//    daemon's /metrics and the cluster's own (the vllm: names only draw the colon lint, as vLLM's
//    do; everything else is clean), /health and /readyz answer;
//  - docs/metrics.md, the live /metrics and the Grafana dashboard agree:
//    every documented name is exported, every panel names exported metrics;
//  - a real Prometheus server (Debian's) scrapes the cluster through
//    deploy/prometheus/prometheus.yml's relabelling (pod discovery emulated
//    with file_sd targets carrying the same __meta_kubernetes_* labels, as
//    Debian's Prometheus is built without Kubernetes discovery), loads the
//    alert rules, returns the request counter after traffic, and evaluates
//    every dashboard query;
//  - SIGTERM stops the cluster gracefully (exit 0).
//
// usage: node live_cluster_test.js SPAR PROMTOOL PROMETHEUS SOURCE_DIR NODE_MODULES
'use strict';
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const os = require('node:os');
const net = require('node:net');
const path = require('node:path');
const { spawn, spawnSync, execFileSync } = require('node:child_process');

const [spar, promtool, prometheus, sourceDir, nodeModules] = process.argv.slice(2);
if (!nodeModules) {
  console.error('usage: node live_cluster_test.js SPAR PROMTOOL PROMETHEUS SOURCE_DIR NODE_MODULES');
  process.exit(2);
}
const yaml = require(path.join(nodeModules, 'js-yaml'));
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function waitFor(what, timeoutMs, probe) {
  const until = Date.now() + timeoutMs;
  for (;;) {
    const v = await probe().catch(() => undefined);
    if (v) return v;
    if (Date.now() > until) throw new Error(`timed out waiting for ${what}`);
    await sleep(200);
  }
}

async function get(url) {
  const r = await fetch(url, { signal: AbortSignal.timeout(5000) });
  return { status: r.status, body: await r.text() };
}

function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
    s.on('error', reject);
  });
}

function exited(child) {
  return new Promise((resolve) => {
    if (child.exitCode !== null || child.signalCode !== null) resolve(child.exitCode);
    else child.on('exit', (code) => resolve(code));
  });
}

// Metric family names (from # TYPE lines) of an exposition.
function families(text) {
  return new Set([...text.matchAll(/^# TYPE (\S+) /gm)].map((m) => m[1]));
}

// Drops the families whose names match `re` (HELP, TYPE and samples).
function withoutFamilies(text, re) {
  return text.split('\n').filter((l) => {
    const name = l.startsWith('#') ? l.split(' ')[2] : l.split(/[{ ]/)[0];
    return !(name && re.test(name));
  }).join('\n');
}

function promtoolCheckMetrics(text) {
  const r = spawnSync(promtool, ['check', 'metrics'], { input: text, encoding: 'utf8' });
  return { code: r.status, out: (r.stdout + r.stderr).trim() };
}

// The documented names: first cell of the tables in docs/metrics.md.
function documentedNames() {
  const md = fs.readFileSync(path.join(sourceDir, 'docs', 'metrics.md'), 'utf8');
  return new Set([...md.matchAll(/^\| `((?:vllm:|spar_)[a-z0-9_:]+)` \|/gm)].map((m) => m[1]));
}

// Metric names a PromQL expression reads, as exposed families (histogram
// series suffixes removed).
function exprMetrics(expr, exported) {
  return [...expr.matchAll(/\b(vllm:[a-z0-9_:]+|spar_[a-z0-9_]+)/g)].map((m) => {
    const n = m[1];
    const base = n.replace(/_(bucket|sum|count)$/, '');
    return exported.has(n) ? n : base;
  });
}

test('a live local cluster is observable end to end', async (t) => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'spar-obs-'));
  const model = path.join(dir, 'model');
  execFileSync(spar, ['make-tiny', '--arch', 'glm5', '--out', model], { stdio: 'ignore' });
  const portFile = path.join(dir, 'port'), targetsFile = path.join(dir, 'targets.json');
  const cluster = spawn(spar, ['cluster', '--stages', '2', '--model', model, '--port', '0', '--port-file', portFile,
                               '--metrics-targets-file', targetsFile, '--shutdown-timeout', '10', '--log-dir', dir],
                        { stdio: ['ignore', 'pipe', 'pipe'] });
  let clusterOut = '';
  cluster.stdout.on('data', (d) => { clusterOut += d; });
  cluster.stderr.on('data', (d) => { clusterOut += d; });
  let prom;
  try {
    await waitFor('the cluster to serve', 120000, async () => {
      if (cluster.exitCode !== null) throw new Error(`spar cluster exited: ${clusterOut}`);
      return fs.existsSync(targetsFile);
    });
    const address = `127.0.0.1:${fs.readFileSync(portFile, 'utf8').trim()}`;
    const groups = JSON.parse(fs.readFileSync(targetsFile, 'utf8'));
    assert.equal(groups.length, 4, 'scheduler + 2 workers + the cluster itself (its restart counters)');
    const byDaemon = Object.fromEntries(groups.map((g) => [g.labels.daemon, g.targets[0]]));

    // Traffic: streamed requests.
    let requests = 0;
    const traffic = (n) => {
      for (let i = 0; i < n; ++i, ++requests) {
        execFileSync(spar, ['generate', '--server', address, '--prompt', `The capital of France ${requests}`,
                            '--max-tokens', '6', '--seed', String(requests)], { stdio: 'ignore' });
      }
    };
    traffic(3);

    const live = {};
    await t.test('promtool check metrics passes on every daemon', async () => {
      for (const [daemon, target] of Object.entries(byDaemon)) {
        const m = await get(`http://${target}/metrics`);
        assert.equal(m.status, 200);
        live[daemon] = m.body;
        assert.equal((await get(`http://${target}/health`)).status, 200, `${daemon} /health`);
        assert.equal((await get(`http://${target}/readyz`)).status, 200, `${daemon} /readyz`);
        const full = promtoolCheckMetrics(m.body);
        // The only accepted finding: the colon in vLLM's own names.
        for (const line of full.out.split('\n').filter((l) => l)) {
          assert.match(line, /^vllm:[a-z0-9_:]+ metric names should not contain ':'$/, `${daemon}: ${line}`);
        }
        const rest = promtoolCheckMetrics(withoutFamilies(m.body, /^vllm:/));
        assert.equal(rest.code, 0, `${daemon}: ${rest.out}`);
        assert.equal(rest.out, '');
      }
      assert.match(live.scheduler, /^vllm:request_success_total\{finished_reason="length",model_name="model"\} 3$/m);
      assert.match(live.scheduler, /^vllm:time_to_first_token_seconds_count\{model_name="model"\} 3$/m);
      assert.match(live['stage-1'], /^spar_stage_sampling_seconds_count\{stage="1"\} [1-9]/m);
      assert.match(live['stage-0'], /^spar_activation_bytes_total\{direction="sent",stage="0"\} [1-9]/m);
    });

    assert.match(live.cluster, /^spar_cluster_worker_restarts_total\{rank="0",stage="1"\} 0$/m);
    const exported = new Set([...families(live.scheduler), ...families(live['stage-0']), ...families(live['stage-1']),
                              ...families(live.cluster)]);
    const dashboard = JSON.parse(fs.readFileSync(path.join(sourceDir, 'deploy', 'grafana', 'spar-dashboard.json'), 'utf8'));
    const panels = dashboard.panels.filter((p) => p.type !== 'row');

    await t.test('docs/metrics.md, the live /metrics and the Grafana dashboard agree', () => {
      const documented = documentedNames();
      assert.ok(documented.size >= 30, `${documented.size} documented names`);
      for (const n of documented) assert.ok(exported.has(n), `documented ${n} is exported`);
      for (const n of exported) {
        if (/^(vllm:|spar_)/.test(n)) assert.ok(documented.has(n), `exported ${n} is documented`);
      }
      assert.ok(panels.length >= 20);
      for (const p of panels) {
        assert.ok(p.targets.length > 0, `panel ${p.title} has queries`);
        for (const target of p.targets) {
          const names = exprMetrics(target.expr, exported);
          assert.ok(names.length > 0, `panel "${p.title}" query names a spar metric: ${target.expr}`);
          for (const n of names) {
            assert.ok(exported.has(n), `panel "${p.title}" reads ${n}, which no daemon exports`);
            assert.ok(documented.has(n), `panel "${p.title}" reads ${n}, which docs/metrics.md does not list`);
          }
        }
      }
    });

    await t.test('a real Prometheus scrapes the cluster and answers queries', async () => {
      const promDir = path.join(dir, 'prometheus');
      fs.mkdirSync(promDir);
      // Pod discovery as Kubernetes would report these daemons.
      const pod = (target, podName, portName) => ({
        targets: [target],
        labels: {
          __meta_kubernetes_namespace: 'local',
          __meta_kubernetes_pod_name: podName,
          __meta_kubernetes_pod_label_app_kubernetes_io_name: 'spar',
          __meta_kubernetes_pod_container_port_name: portName,
        },
      });
      const sd = [
        pod(byDaemon.scheduler, 'spar-0', 'metrics'),
        pod(byDaemon['stage-0'], 'spar-0', 'metrics-r0'),
        pod(byDaemon['stage-1'], 'spar-0-1', 'metrics-r0'),
        pod(address, 'spar-0', 'grpc'),  // not a metrics port: must be dropped
      ];
      fs.writeFileSync(path.join(promDir, 'pods.json'), JSON.stringify(sd));
      const config = yaml.load(fs.readFileSync(path.join(sourceDir, 'deploy', 'prometheus', 'prometheus.yml'), 'utf8'));
      config.global.scrape_interval = '1s';
      config.global.evaluation_interval = '1s';
      config.rule_files = [path.join(sourceDir, 'deploy', 'prometheus', 'alerts.yml')];
      assert.ok(config.scrape_configs[0].kubernetes_sd_configs, 'the shipped config discovers pods');
      delete config.scrape_configs[0].kubernetes_sd_configs;
      config.scrape_configs[0].file_sd_configs = [{ files: [path.join(promDir, 'pods.json')], refresh_interval: '1s' }];
      const configFile = path.join(promDir, 'prometheus.yml');
      fs.writeFileSync(configFile, yaml.dump(config));
      const check = spawnSync(promtool, ['check', 'config', configFile], { encoding: 'utf8' });
      assert.equal(check.status, 0, check.stdout + check.stderr);

      const port = await freePort();
      const api = `http://127.0.0.1:${port}`;
      prom = spawn(prometheus, [`--config.file=${configFile}`, `--storage.tsdb.path=${path.join(promDir, 'data')}`,
                                `--web.listen-address=127.0.0.1:${port}`, '--log.level=warn'],
                   { stdio: ['ignore', 'ignore', 'pipe'] });
      let promLog = '';
      prom.stderr.on('data', (d) => { promLog += d; });
      await waitFor('Prometheus to be ready', 60000, async () => (await get(`${api}/-/ready`)).status === 200);
      const query = async (q) => {
        const r = await get(`${api}/api/v1/query?query=${encodeURIComponent(q)}`);
        const j = JSON.parse(r.body);
        assert.equal(j.status, 'success', `${q}: ${r.body}`);
        return j.data.result;
      };
      await waitFor('every target scraped', 30000, async () => (await query('up')).length === 3);
      traffic(2);  // more traffic while Prometheus watches, so rates have data
      // The request counter, after traffic, through the shipped relabelling.
      const success = await waitFor('the request counter in Prometheus', 60000, async () => {
        const r = await query('sum(vllm:request_success_total{job="spar-scheduler",namespace="local"})');
        return r.length === 1 && Number(r[0].value[1]) === requests ? r : undefined;
      }).catch((e) => { throw new Error(`${e.message}\n${promLog}`); });
      assert.equal(Number(success[0].value[1]), requests);
      const up = await waitFor('every target up', 30000, async () => {
        const r = await query('up');
        return r.length === 3 && r.every((s) => s.value[1] === '1') ? r : undefined;
      });
      const jobs = up.map((s) => `${s.metric.job}/${s.metric.pod}/${s.metric.tp_rank || '-'}`).sort();
      assert.deepEqual(jobs, ['spar-scheduler/spar-0/-', 'spar-worker/spar-0-1/0', 'spar-worker/spar-0/0']);
      const stages = await query('count by (stage) (spar_stage_micro_batches_total)');
      assert.deepEqual(stages.map((s) => s.metric.stage).sort(), ['0', '1']);
      // The alert rules are loaded and healthy (evaluated without errors).
      const rules = JSON.parse((await get(`${api}/api/v1/rules`)).body).data.groups.flatMap((g) => g.rules);
      assert.equal(rules.length, 7);
      await waitFor('the rules to be evaluated', 20000, async () => {
        const rs = JSON.parse((await get(`${api}/api/v1/rules`)).body).data.groups.flatMap((g) => g.rules);
        return rs.every((r) => r.health === 'ok') ? rs : undefined;
      });
      // Every dashboard query runs (Grafana's variables filled in); the
      // request and stage panels fed by the traffic have data.
      for (const p of panels) {
        for (const target of p.targets) {
          const q = target.expr.replaceAll('$__rate_interval', '1m').replaceAll('$model_name', 'model');
          const r = await query(q);
          if (/^(E2E Request Latency|Token Throughput|Time To First Token|Scheduler State|Stage Forward Time)$/.test(p.title)) {
            // A rate needs two scrapes of the target bracketing the traffic; the
            // request counter above proves only the scheduler's, so a slow (loaded)
            // worker scrape may still be pending: wait for it rather than race it.
            const hasData = (rs) => rs.some((s) => Number.isFinite(Number(s.value[1])));
            let last = r;
            await waitFor(`panel "${p.title}" to have data`, 30000, async () => {
              last = await query(q);
              return hasData(last) ? last : undefined;
            }).catch(() => assert.fail(`panel "${p.title}" has data: ${q} -> ${JSON.stringify(last)}`));
          }
        }
      }
    });

    await t.test('SIGTERM stops the cluster gracefully', async () => {
      cluster.kill('SIGTERM');
      assert.equal(await exited(cluster), 0, clusterOut);
    });
  } finally {
    if (prom && prom.exitCode === null) {
      prom.kill('SIGTERM');
      await exited(prom);
    }
    if (cluster.exitCode === null) {
      cluster.kill('SIGTERM');
      await exited(cluster);
    }
    fs.rmSync(dir, { recursive: true, force: true });
  }
});
