// Kubernetes manifests of deploy/k8s: both Kustomize overlays render with
// Debian's kubectl (`kubectl kustomize`), every object passes schema
// validation (kubernetes-models' validators, generated from the Kubernetes
// OpenAPI schemas; the LeaderWorkerSet against its v1 API schema with its
// pod templates checked as core/v1 PodTemplateSpec), the validators reject
// broken objects, and the pieces agree with each other (ports, probes, GPU
// count vs tensor ranks, drain budget, Service and NetworkPolicy selectors,
// the Prometheus relabelling).
//
// usage: node validate_manifests.js KUBECTL SOURCE_DIR NODE_MODULES
'use strict';
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const { execFileSync } = require('node:child_process');

const [kubectl, sourceDir, nodeModules] = process.argv.slice(2);
if (!kubectl || !sourceDir || !nodeModules) {
  console.error('usage: node validate_manifests.js KUBECTL SOURCE_DIR NODE_MODULES');
  process.exit(2);
}
const need = (m) => require(path.join(nodeModules, m));
const yaml = need('js-yaml');
const Ajv = need('ajv');
const models = {
  'v1/ConfigMap': need('kubernetes-models/v1/ConfigMap').ConfigMap,
  'v1/Service': need('kubernetes-models/v1/Service').Service,
  'apps/v1/Deployment': need('kubernetes-models/apps/v1/Deployment').Deployment,
  'networking.k8s.io/v1/NetworkPolicy': need('kubernetes-models/networking.k8s.io/v1/NetworkPolicy').NetworkPolicy,
};
const { PodTemplateSpec } = need('kubernetes-models/v1/PodTemplateSpec');
const lwsSchema = JSON.parse(fs.readFileSync(path.join(__dirname, 'leaderworkerset_v1_schema.json'), 'utf8'));
const validateLwsEnvelope = new Ajv({ allErrors: true, strict: false }).compile(lwsSchema);

const k8sDir = path.join(sourceDir, 'deploy', 'k8s');

// Throws with the validator's message when `obj` is not a valid object.
function validate(obj) {
  const key = `${obj.apiVersion}/${obj.kind}`;
  if (key === 'leaderworkerset.x-k8s.io/v1/LeaderWorkerSet') {
    if (!validateLwsEnvelope(obj)) {
      throw new Error(`${obj.kind} ${obj.metadata && obj.metadata.name}: ` +
                      validateLwsEnvelope.errors.map((e) => `${e.instancePath} ${e.message}`).join('; '));
    }
    const t = obj.spec.leaderWorkerTemplate;
    for (const which of ['leaderTemplate', 'workerTemplate']) {
      if (t[which] === undefined) continue;
      try {
        new PodTemplateSpec(t[which]).validate();
      } catch (e) {
        throw new Error(`LeaderWorkerSet ${obj.metadata.name} ${which}: ${e.message}`);
      }
    }
    return;
  }
  const Model = models[key];
  if (!Model) throw new Error(`no validator for ${key} (add it to validate_manifests.js)`);
  new Model(obj).validate();
}

function render(overlay) {
  const out = execFileSync(kubectl, ['kustomize', path.join(k8sDir, 'overlays', overlay)], { encoding: 'utf8' });
  return yaml.loadAll(out).filter((o) => o);
}

function find(objs, kind) {
  return objs.filter((o) => o.kind === kind);
}

// The pod templates of a rendered overlay's workload.
function podTemplates(objs) {
  const out = [];
  for (const d of find(objs, 'Deployment')) out.push(d.spec.template);
  for (const l of find(objs, 'LeaderWorkerSet')) {
    out.push(l.spec.leaderWorkerTemplate.leaderTemplate, l.spec.leaderWorkerTemplate.workerTemplate);
  }
  return out.filter((t) => t);
}

function configData(objs, name) {
  const cm = find(objs, 'ConfigMap').find((c) => c.metadata.name === name);
  assert.ok(cm, `ConfigMap ${name} is rendered`);
  return cm.data;
}

function inRange(port, rule) {
  const lo = rule.port, hi = rule.endPort !== undefined ? rule.endPort : rule.port;
  return port >= lo && port <= hi;
}

for (const overlay of ['1-node', '2-node']) {
  test(`overlay ${overlay} renders and every object validates`, () => {
    const objs = render(overlay);
    assert.ok(objs.length >= 5, `${objs.length} objects`);
    for (const o of objs) validate(o);
    const kinds = objs.map((o) => o.kind).sort();
    const workload = overlay === '1-node' ? 'Deployment' : 'LeaderWorkerSet';
    assert.deepEqual(kinds, ['ConfigMap', 'ConfigMap', workload, 'NetworkPolicy', 'Service'].sort());
    for (const o of objs) assert.equal(o.metadata.namespace, 'spar', `${o.kind} ${o.metadata.name} namespace`);
  });

  test(`overlay ${overlay}: ports, probes, GPUs, drain budget and selectors agree`, () => {
    const objs = render(overlay);
    const config = configData(objs, 'spar-config');
    configData(objs, 'spar-nccl');
    const tp = Number(config.SPAR_TP_SIZE);
    const shutdown = Number(config.SPAR_SHUTDOWN_TIMEOUT);
    assert.ok(tp >= 1 && tp <= 8 && shutdown > 0);
    const policy = find(objs, 'NetworkPolicy')[0];
    const service = find(objs, 'Service')[0];
    const templates = podTemplates(objs);
    let stages = 0, schedulers = 0;
    for (const t of templates) {
      const spec = t.spec;
      for (const c of spec.containers) {
        const declared = new Set((c.ports || []).map((p) => p.containerPort));
        for (const probe of ['startupProbe', 'readinessProbe', 'livenessProbe']) {
          assert.ok(c[probe], `${c.name} has a ${probe}`);
          assert.ok(declared.has(c[probe].httpGet.port), `${c.name} ${probe} port ${c[probe].httpGet.port} is declared`);
        }
        for (const ref of c.envFrom || []) {
          configData(objs, ref.configMapRef.name);  // exists
        }
        assert.equal(c.securityContext.runAsNonRoot, true, `${c.name} runs as non-root`);
        if (c.name === 'stage') {
          ++stages;
          assert.equal(Number(c.resources.limits['nvidia.com/gpu']), tp, 'one worker process (tensor rank) per GPU');
          assert.equal(c.resources.requests['nvidia.com/gpu'], c.resources.limits['nvidia.com/gpu']);
          const workerPorts = c.ports.filter((p) => /^worker-r[0-9]+$/.test(p.name)).map((p) => p.containerPort);
          const metricsPorts = c.ports.filter((p) => /^metrics-r[0-9]+$/.test(p.name)).map((p) => p.containerPort);
          assert.equal(workerPorts.length, tp);
          assert.equal(metricsPorts.length, tp);
          // Worker ports: only spar's own pods; metrics: the monitoring namespace.
          const workerRule = policy.spec.ingress.find((r) => r.ports.some((p) => inRange(workerPorts[0], p)));
          assert.ok(workerRule, 'the NetworkPolicy has a rule for the worker ports');
          assert.deepEqual(workerRule.from, [{ podSelector: { matchLabels: { 'app.kubernetes.io/name': 'spar' } } }]);
          for (const p of workerPorts) assert.ok(workerRule.ports.some((r) => inRange(p, r)), `worker port ${p} covered`);
          const metricsRule = policy.spec.ingress.find((r) => r.ports.some((p) => inRange(metricsPorts[0], p)));
          assert.ok(metricsRule && metricsRule.from[0].namespaceSelector, 'metrics ports open to the monitoring namespace');
          assert.equal(spec.volumes.find((v) => v.name === 'dshm').emptyDir.medium, 'Memory', '/dev/shm in memory');
          assert.ok(c.volumeMounts.some((m) => m.mountPath === '/dev/shm'));
        }
        if (c.name === 'scheduler') {
          ++schedulers;
          const sleep = Number(c.lifecycle.preStop.exec.command[1]);
          assert.ok(spec.terminationGracePeriodSeconds >= sleep + shutdown,
                    `terminationGracePeriodSeconds ${spec.terminationGracePeriodSeconds} >= preStop ${sleep} + drain ${shutdown}`);
          for (const [k, v] of Object.entries(service.spec.selector)) {
            assert.equal(t.metadata.labels[k], v, `Service selector ${k} matches the scheduler's pod`);
          }
          assert.ok(declared.has(service.spec.ports[0].targetPort));
          const open = policy.spec.ingress.find((r) => !r.from && r.ports.some((p) => p.port === 50051));
          assert.ok(open, 'the public API port is open to clients');
        }
      }
    }
    assert.equal(schedulers, 1, 'one scheduler per replica');
    if (overlay === '2-node') {
      const lws = find(objs, 'LeaderWorkerSet')[0];
      assert.equal(lws.spec.leaderWorkerTemplate.size, 2);
      assert.equal(lws.spec.leaderWorkerTemplate.restartPolicy, 'RecreateGroupOnPodRestart');
      assert.equal(stages, 2, 'stage containers in the leader and the worker template');
      // One contiguous layer range per stage, read by the scheduler and the workers.
      const ranges = config.SPAR_STAGE_LAYERS.split(',').map((r) => r.split(':').map(Number));
      assert.equal(ranges.length, lws.spec.leaderWorkerTemplate.size, 'a layer range per stage');
      ranges.forEach(([a, b], i) => {
        assert.ok(b > a && a === (i === 0 ? 0 : ranges[i - 1][1]), `SPAR_STAGE_LAYERS ${config.SPAR_STAGE_LAYERS}`);
      });
    } else {
      assert.equal(stages, 1);
      const stage = find(objs, 'Deployment')[0].spec.template.spec.containers.find((c) => c.name === 'stage');
      assert.equal(stage.env.find((e) => e.name === 'SPAR_STAGES').value, '1');
      assert.equal(config.SPAR_STAGE_LAYERS, undefined, 'one stage holds every layer');
    }
  });
}

test('every file under deploy/k8s is itself valid', () => {
  let n = 0;
  for (const dir of ['base', 'single-node', 'multi-node']) {
    for (const f of fs.readdirSync(path.join(k8sDir, dir))) {
      if (!f.endsWith('.yaml') || f === 'kustomization.yaml') continue;
      for (const o of yaml.loadAll(fs.readFileSync(path.join(k8sDir, dir, f), 'utf8'))) {
        if (!o) continue;
        validate(o);
        ++n;
      }
    }
  }
  assert.ok(n >= 6, `${n} objects`);
});

test('the Prometheus relabelling keeps exactly the metrics ports the pods declare', () => {
  const prom = yaml.load(fs.readFileSync(path.join(sourceDir, 'deploy', 'prometheus', 'prometheus.yml'), 'utf8'));
  const keep = prom.scrape_configs[0].relabel_configs.find(
      (r) => r.action === 'keep' && r.source_labels[0] === '__meta_kubernetes_pod_container_port_name');
  const re = new RegExp(`^(?:${keep.regex})$`);  // Prometheus anchors regexes
  for (const t of podTemplates(render('2-node'))) {
    for (const c of t.spec.containers) {
      for (const p of c.ports) assert.equal(re.test(p.name), p.name.startsWith('metrics'), `port ${c.name}/${p.name}`);
    }
  }
});

test('the validators reject broken objects', () => {
  const lws = find(render('2-node'), 'LeaderWorkerSet')[0];
  const broken = [
    ['restartPolicy outside the enum', (o) => { o.spec.leaderWorkerTemplate.restartPolicy = 'Sometimes'; }],
    ['no workerTemplate', (o) => { delete o.spec.leaderWorkerTemplate.workerTemplate; }],
    ['size 0', (o) => { o.spec.leaderWorkerTemplate.size = 0; }],
    ['a misspelt spec field', (o) => { o.spec.leaderWorkerTemplat = o.spec.leaderWorkerTemplate; }],
    ['a port number as text in the leader pod', (o) => {
      o.spec.leaderWorkerTemplate.leaderTemplate.spec.containers[0].ports[0].containerPort = 'fifty';
    }],
    ['a container without a name in the worker pod', (o) => {
      delete o.spec.leaderWorkerTemplate.workerTemplate.spec.containers[0].name;
    }],
  ];
  for (const [what, mutate] of broken) {
    const o = JSON.parse(JSON.stringify(lws));
    mutate(o);
    assert.throws(() => validate(o), undefined, `accepted a LeaderWorkerSet with ${what}`);
  }
  const dep = find(render('1-node'), 'Deployment')[0];
  const bad = JSON.parse(JSON.stringify(dep));
  bad.spec.template.spec.containers[1].resources.limits.memory = 'lots';
  assert.throws(() => validate(bad), /memory/);
  const np = JSON.parse(JSON.stringify(find(render('1-node'), 'NetworkPolicy')[0]));
  np.spec.ingress[1].ports[0].endPort = 'high';
  assert.throws(() => validate(np), /endPort/);
});
