// A stand-in for the REST gateway with made-up data, for looking at the console without a
// Trainyard server: `node scripts/mock-gateway.mjs` (port 8090, or MOCK_PORT), then
// `npm run dev`. Tokens: "admin" (platform-admin), "member" (member of acme), "viewer"
// (viewer of acme), "finance" (platform finance). Not part of the bundle.
import { createServer } from 'node:http';

const port = Number(process.env.MOCK_PORT ?? 8090);
const now = Date.now();
const iso = (ms) => new Date(ms).toISOString().replace(/\.\d+Z$/, 'Z');
const usd = (micros) => ({ currencyCode: 'USD', micros: String(micros) });

const callers = {
  admin: { principal: 'users/root', bindings: [{ name: 'roleBindings/1', principal: 'users/root', role: 'ROLE_PLATFORM_ADMIN' }] },
  member: { principal: 'users/alice', bindings: [{ name: 'roleBindings/2', principal: 'users/alice', role: 'ROLE_MEMBER', tenant: 'acme' }] },
  viewer: { principal: 'users/vic', bindings: [{ name: 'roleBindings/3', principal: 'users/vic', role: 'ROLE_VIEWER', tenant: 'acme' }] },
  finance: { principal: 'users/fin', bindings: [{ name: 'roleBindings/4', principal: 'users/fin', role: 'ROLE_FINANCE' }] },
};

const STATES = ['JOB_STATE_RUNNING', 'JOB_STATE_QUEUED', 'JOB_STATE_SUCCEEDED', 'JOB_STATE_FAILED', 'JOB_STATE_HELD', 'JOB_STATE_CANCELLED', 'JOB_STATE_QUEUED', 'JOB_STATE_RUNNING'];
const jobs = [];
for (let i = 1; i <= 1200; i++) {
  const tenant = i % 5 === 0 ? 'globex' : 'acme';
  const state = STATES[i % STATES.length];
  const created = now - (1200 - i) * 60_000;
  const running = state === 'JOB_STATE_RUNNING';
  const ended = ['JOB_STATE_SUCCEEDED', 'JOB_STATE_FAILED', 'JOB_STATE_CANCELLED'].includes(state);
  const attempts = [];
  if (running || ended) {
    if (i % 3 === 0) {
      attempts.push({ index: 1, cluster: 'clusters/sim-a', flavor: 'flavors/spot-h100', admitTime: iso(created + 60_000), startTime: iso(created + 90_000), endTime: iso(created + 900_000), failureClass: 'FAILURE_CLASS_SPOT_RECLAIM', message: 'spot capacity reclaimed by the provider', lostGpuSeconds: '2400', placements: [{ worker: 0, node: 'clusters/sim-a/nodes/n0001' }], backendJobName: `ty-${i}-1`, estimatedCost: usd(12_500_000) });
    }
    const idx = attempts.length + 1;
    attempts.push({ index: idx, cluster: 'clusters/sim-a', flavor: 'flavors/od-h100', admitTime: iso(created + 960_000), startTime: iso(created + 1_000_000), ...(ended ? { endTime: iso(created + 3_000_000) } : {}), ...(state === 'JOB_STATE_FAILED' ? { failureClass: 'FAILURE_CLASS_USER_ERROR', exitCode: 1, message: 'exit status 1' } : {}), resumedFrom: idx > 1 ? '/ckpt/step-1200' : undefined, placements: [{ worker: 0, node: 'clusters/sim-a/nodes/n0002' }, { worker: 1, node: 'clusters/sim-a/nodes/n0003' }], backendJobName: `ty-${i}-${idx}`, estimatedCost: usd(40_000_000) });
  }
  jobs.push({
    name: `tenants/${tenant}/jobs/${i}`,
    tenant,
    displayName: i === 7 ? '<script>alert("x")</script> "quoted"' : `train-${['bert', 'llama', 'vit', 'sd'][i % 4]}-${i}`,
    labels: { team: ['vision', 'nlp'][i % 2], ...(i === 7 ? { '<b>': '"><img src=x>' } : {}) },
    spec: {
      project: ['llm-pretrain', 'vision', 'nlp'][i % 3],
      queue: ['default', 'research', 'batch'][i % 3],
      priorityClass: i % 4 === 0 ? 'high' : '',
      workers: i % 6 === 0 ? 4 : 1,
      resources: { gpus: [1, 8, 2, 4][i % 4], gpuModel: 'H100', cpuMillis: '16000', memoryBytes: String(128 * 1024 ** 3) },
      command: ['torchrun', 'train.py', `--run=${i}`],
      timeLimit: '86400s',
      spotPolicy: i % 3 === 0 ? 'SPOT_POLICY_ALLOWED' : undefined,
      checkpoint: i % 3 === 0 ? { directory: `/ckpt/${i}`, interval: '900s', resumable: true } : undefined,
      jobSet: i % 10 < 3 ? `sweep-${Math.floor(i / 50)}` : undefined,
    },
    state,
    stateReason: { JOB_STATE_QUEUED: 'SUBMITTED', JOB_STATE_RUNNING: 'STARTED', JOB_STATE_HELD: 'HELD_BY_USER', JOB_STATE_FAILED: 'USER_ERROR', JOB_STATE_SUCCEEDED: 'COMPLETED', JOB_STATE_CANCELLED: 'CANCELLED_BY_USER' }[state],
    creator: ['users/alice', 'users/bob', 'users/carol'][i % 3],
    priority: i % 4 === 0 ? 100 : 0,
    createTime: iso(created),
    updateTime: iso(created + 1_000_000),
    ...(ended ? { endTime: iso(created + 3_000_000) } : {}),
    attemptCount: attempts.length || undefined,
    attempts,
    version: '3',
    ...(running || ended ? { cost: { spent: usd(1_234_567 * (i % 40 + 1)), tenantCost: usd(1_000_000 * (i % 40 + 1)), lostWork: usd(i % 3 === 0 ? 5_000_000 : 0), gpuHours: String((i % 40) + 0.5), final: ended, estimate: usd(40_000_000) } } : {}),
  });
}
jobs.reverse(); // newest first

const queues = ['acme', 'globex'].flatMap((t) =>
  ['default', 'research', 'batch'].map((q, k) => ({
    name: `tenants/${t}/queues/${q}`,
    cohort: q === 'batch' ? '' : 'research',
    quotas: [
      { flavor: 'od-h100', resources: [{ resource: 'RESOURCE_NAME_GPU', nominal: String(32 + k * 16), lendingLimit: k === 1 ? '8' : undefined }] },
      { flavor: 'spot-h100', resources: [{ resource: 'RESOURCE_NAME_GPU', nominal: '16' }] },
    ],
    fairShareWeight: 1 + k,
    queueingStrategy: k === 2 ? 'QUEUEING_STRATEGY_STRICT_FIFO' : 'QUEUEING_STRATEGY_BEST_EFFORT_FIFO',
    stopPolicy: t === 'globex' && q === 'batch' ? 'STOP_POLICY_HOLD' : undefined,
  })),
);
const cohorts = [{ name: 'cohorts/research', fairShareWeight: 1, quotas: [{ flavor: 'od-h100', resources: [{ resource: 'RESOURCE_NAME_GPU', nominal: '16' }] }] }];
const flavors = [
  { name: 'flavors/od-h100', kind: 'FLAVOR_KIND_ON_DEMAND', gpuModel: 'H100', gpuHourPrice: usd(4_000_000) },
  { name: 'flavors/spot-h100', kind: 'FLAVOR_KIND_SPOT', gpuModel: 'H100', gpuHourPrice: usd(1_500_000), reclaimRatePerHour: 0.05 },
  { name: 'flavors/res-a100', kind: 'FLAVOR_KIND_RESERVED', gpuModel: 'A100-80GB', gpuHourPrice: usd(2_000_000) },
];
const clusters = [
  { name: 'clusters/sim-a', displayName: 'Sim A', backend: 'BACKEND_KIND_SIM', health: 'CLUSTER_HEALTH_HEALTHY', heartbeatTime: iso(now - 4000) },
  { name: 'clusters/slurm-b', displayName: 'Slurm B', backend: 'BACKEND_KIND_SLURM', health: 'CLUSTER_HEALTH_UNHEALTHY', healthMessage: 'slurmrestd: connection refused', heartbeatTime: iso(now - 600_000), cordoned: true },
];
const pools = [
  { name: 'clusters/sim-a/pools/od', flavor: 'od-h100' },
  { name: 'clusters/sim-a/pools/spot', flavor: 'spot-h100' },
  { name: 'clusters/slurm-b/pools/gpu', flavor: 'res-a100' },
];
const nodes = [];
for (let n = 1; n <= 60; n++) {
  const cluster = n <= 40 ? 'sim-a' : 'slurm-b';
  const pool = cluster === 'slurm-b' ? 'gpu' : n % 2 ? 'od' : 'spot';
  nodes.push({
    name: `clusters/${cluster}/nodes/n${String(n).padStart(4, '0')}`,
    pool,
    capacity: { gpus: 8, gpuModel: cluster === 'slurm-b' ? 'A100-80GB' : 'H100', cpuMillis: '96000', memoryBytes: String(1024 ** 4) },
    topology: { block: `b${Math.ceil(n / 20)}`, rack: `r${Math.ceil(n / 5)}` },
    state: n % 17 === 0 ? 'NODE_STATE_DOWN' : n % 13 === 0 ? 'NODE_STATE_DRAINING' : 'NODE_STATE_READY',
    stateMessage: n % 17 === 0 ? 'not responding' : undefined,
    reportTime: iso(now - 10_000),
  });
}

let sequence = 5000;
function send(res, code, body, headers = {}) {
  res.writeHead(code, { 'Content-Type': 'application/json', ...headers });
  res.end(JSON.stringify(body));
}
function fail(res, code, status, message, extra = {}) {
  send(res, code, { error: { code, status, message, ...extra } });
}
function readBody(req) {
  return new Promise((resolve) => {
    let b = '';
    req.on('data', (c) => (b += c));
    req.on('end', () => resolve(b ? JSON.parse(b) : {}));
  });
}
function tenantsOf(caller) {
  if (caller.bindings.some((b) => !b.tenant)) return ['acme', 'globex'];
  return caller.bindings.map((b) => b.tenant);
}
function reportFor(tenant, q) {
  const dims = q.getAll('groupBy');
  const start = new Date(q.get('startTime') ?? iso(now - 30 * 86400_000)).getTime();
  const end = new Date(q.get('endTime') ?? iso(now)).getTime();
  const stepMs = q.get('step') === 'REPORT_STEP_HOUR' ? 3600_000 : 86400_000;
  const keysFor = (d) =>
    ({ REPORT_DIMENSION_PROJECT: ['llm-pretrain', 'vision', 'nlp'], REPORT_DIMENSION_TENANT: ['acme', 'globex'], REPORT_DIMENSION_QUEUE: ['default', 'research', 'batch'], REPORT_DIMENSION_USER: ['users/alice', 'users/bob'], REPORT_DIMENSION_FLAVOR: ['od-h100', 'spot-h100'], REPORT_DIMENSION_CLUSTER: ['sim-a', 'slurm-b'] })[d] ?? [''];
  const keys = keysFor(dims[0]);
  const rows = [];
  let total = 0n;
  let lost = 0n;
  let k = 0;
  for (let t = start; t < end && rows.length < 2000; t += stepMs) {
    keys.forEach((key, j) => {
      const cost = BigInt(Math.round((50 + 40 * Math.sin(k / 3 + j) + 20 * j) * (stepMs / 86400_000) * 1e6 * (tenant === 'globex' ? 0.5 : 1)));
      const lw = (k + j) % 5 === 0 ? cost / 10n : 0n;
      total += cost;
      lost += lw;
      rows.push({ keys: [key], periodStart: iso(t), periodEnd: iso(t + stepMs), cost: usd(cost), tenantCost: usd(cost - lw / 2n), lostWorkCost: usd(lw), gpuSeconds: String(Number(cost / 1000n)), lostGpuSeconds: String(Number(lw / 1000n)), attempts: String(1 + j) });
    });
    k++;
  }
  return { groupBy: dims, rows, total: { cost: usd(total), tenantCost: usd(total - lost / 2n), lostWorkCost: usd(lost), gpuHours: String(Number(total / 4000000n)), effectiveGpuHourPrice: usd(4_000_000), lostGpuSeconds: String(Number(lost / 1000n)) }, currency: 'USD', generateTime: iso(now) };
}

const server = createServer(async (req, res) => {
  const url = new URL(req.url, 'http://x');
  const p = url.pathname;
  const q = url.searchParams;
  if (!p.startsWith('/v1/')) return fail(res, 404, 'NOT_FOUND', 'not found');
  const token = (req.headers.authorization ?? '').replace(/^Bearer /, '');
  const caller = callers[token];
  if (!caller) return fail(res, 401, 'UNAUTHENTICATED', 'unknown token');
  const visible = tenantsOf(caller);
  let m;
  if (p === '/v1/whoami') return send(res, 200, caller);
  if (p === '/v1/tenants') return send(res, 200, { tenants: visible.map((t) => ({ name: `tenants/${t}` })) });
  if (p === '/v1/cohorts') return send(res, 200, { cohorts });
  if (p === '/v1/priorityClasses') return send(res, 200, { priorityClasses: [{ name: 'priorityClasses/high', value: 100 }, { name: 'priorityClasses/default', value: 0, preemptible: true }] });
  if (p === '/v1/flavors') return send(res, 200, { flavors });
  if (p === '/v1/clusters') return send(res, 200, { clusters });
  if (p === '/v1/clusters/-/pools') return send(res, 200, { pools });
  if (p === '/v1/clusters/-/nodes') return send(res, 200, { nodes });
  if (p === '/v1/priceBook') return send(res, 200, { currency: 'USD' });
  if ((m = /^\/v1\/tenants\/([^/]+)\/(.*)$/.exec(p))) {
    const tenant = decodeURIComponent(m[1]);
    const rest = m[2];
    if (tenant !== '-' && !visible.includes(tenant)) return fail(res, 404, 'NOT_FOUND', `tenants/${tenant} not found`);
    const mine = (j) => (tenant === '-' ? visible.includes(j.tenant) : j.tenant === tenant);
    if (rest === 'projects') return send(res, 200, { projects: ['llm-pretrain', 'vision', 'nlp'].map((x) => ({ name: `tenants/${tenant}/projects/${x}` })) });
    if (rest === 'queues') return send(res, 200, { queues: queues.filter((x) => tenant === '-' ? visible.some((t) => x.name.startsWith(`tenants/${t}/`)) : x.name.startsWith(`tenants/${tenant}/`)) });
    if ((m = /^queues\/([^/:]+):status$/.exec(rest))) {
      const qid = m[1];
      const inQ = jobs.filter((j) => j.tenant === tenant && j.spec.queue === qid);
      const by = {};
      for (const j of inQ) by[j.state] = String(Number(by[j.state] ?? 0) + 1);
      const used = qid === 'default' ? 44 : qid === 'research' ? 20 : 8;
      return send(res, 200, { queue: `tenants/${tenant}/queues/${qid}`, jobsByState: by, weightedShare: qid === 'default' ? 0.375 : 0, usage: [{ flavor: 'od-h100', resource: 'RESOURCE_NAME_GPU', used: String(used), nominal: String(qid === 'default' ? 32 : qid === 'research' ? 48 : 64), borrowed: String(qid === 'default' ? 12 : 0) }, { flavor: 'spot-h100', resource: 'RESOURCE_NAME_GPU', used: '4', nominal: '16' }] });
    }
    if (rest === 'jobs' && req.method === 'GET') {
      if (q.get('user') && process.env.MOCK_OLD_GATEWAY) return fail(res, 400, 'INVALID_ARGUMENT', 'user: unknown query parameter', { field: 'user' });
      let list = jobs.filter(mine);
      const states = q.getAll('states');
      if (states.length) list = list.filter((j) => states.includes(j.state));
      for (const k of ['queue', 'project', 'jobSet']) if (q.get(k)) list = list.filter((j) => j.spec[k] === q.get(k));
      if (q.get('user')) list = list.filter((j) => j.creator === q.get('user'));
      for (const [k, v] of q) if (k.startsWith('labels[')) list = list.filter((j) => j.labels?.[k.slice(7, -1)] === v);
      if (q.get('createdAfter')) list = list.filter((j) => j.createTime >= q.get('createdAfter'));
      if (q.get('createdBefore')) list = list.filter((j) => j.createTime < q.get('createdBefore'));
      if (q.get('orderBy') === 'create_time asc') list = [...list].reverse();
      const size = Number(q.get('pageSize') || 100);
      const from = Number(q.get('pageToken') || 0);
      const page = list.slice(from, from + size).map((j) => ({ ...j, attempts: undefined }));
      return send(res, 200, { jobs: page, nextPageToken: from + size < list.length ? String(from + size) : undefined });
    }
    if (rest === 'jobs' && req.method === 'POST') {
      const body = await readBody(req);
      const w = body.job?.spec?.workers ?? 1;
      if (w < 1 || w > 4096) return fail(res, 400, 'INVALID_ARGUMENT', 'job.spec.workers: must be between 1 and 4096', { field: 'job.spec.workers', reason: 'OUT_OF_RANGE' });
      if (body.job?.spec?.queue === 'nope') return fail(res, 400, 'INVALID_ARGUMENT', 'job.spec.queue: unknown queue "nope"', { field: 'job.spec.queue', reason: 'UNKNOWN_QUEUE' });
      const id = jobs.length + 1;
      const job = { ...body.job, name: `tenants/${tenant}/jobs/${id}`, tenant, state: 'JOB_STATE_QUEUED', stateReason: 'SUBMITTED', creator: caller.principal, createTime: iso(Date.now()), updateTime: iso(Date.now()), clientRequestId: body.clientRequestId };
      jobs.unshift(job);
      return send(res, 200, { job });
    }
    if (rest === 'jobs:watch') {
      res.writeHead(200, { 'Content-Type': 'text/event-stream', 'Cache-Control': 'no-store' });
      const jobFilter = q.get('job');
      const timer = setInterval(() => {
        const candidates = jobs.filter((j) => mine(j) && (!jobFilter || j.name === jobFilter) && (!q.get('queue') || j.spec.queue === q.get('queue')));
        const j = candidates[Math.floor(Math.random() * Math.min(40, candidates.length))];
        if (!j) return res.write(': keepalive\n\n');
        sequence++;
        const event = { sequence: String(sequence), type: 'JOB_EVENT_TYPE_COST_UPDATED', job: j.name, tenant: j.tenant, queue: j.spec.queue, time: iso(Date.now()), cost: { spent: usd(Number(j.cost?.spent?.micros ?? 0) + 1_000_000) } };
        if (j.cost) j.cost.spent = event.cost.spent;
        res.write(`id: ${sequence}\ndata: ${JSON.stringify({ event })}\n\n`);
      }, 2000);
      req.on('close', () => clearInterval(timer));
      if (q.get('fromStart') === 'true' && jobFilter) {
        const j = jobs.find((x) => x.name === jobFilter);
        if (j) {
          sequence++;
          res.write(`id: ${sequence}\ndata: ${JSON.stringify({ event: { sequence: String(sequence), type: 'JOB_EVENT_TYPE_SUBMITTED', job: j.name, toState: 'JOB_STATE_QUEUED', reason: 'SUBMITTED', time: j.createTime } })}\n\n`);
        }
      }
      return;
    }
    if ((m = /^jobs\/([^/:]+)(:(\w+)|\/checkpoints)?$/.exec(rest))) {
      const j = jobs.find((x) => x.name === `tenants/${tenant}/jobs/${m[1]}`);
      if (!j) return fail(res, 404, 'NOT_FOUND', `job ${m[1]} not found`);
      if (m[2] === '/checkpoints') return send(res, 200, { checkpoints: j.spec.checkpoint ? [{ job: j.name, attempt: 1, step: '1200', uri: `/ckpt/${m[1]}/step-1200`, time: iso(now - 3600_000), metadata: { loss: '1.92' } }] : [] });
      if (m[3] === 'explain') {
        if (!['JOB_STATE_QUEUED', 'JOB_STATE_HELD'].includes(j.state)) return send(res, 200, { state: j.state, reason: 'NOT_PENDING' });
        return send(res, 200, { state: j.state, reason: 'QUOTA_EXHAUSTED', message: `QUOTA_EXHAUSTED: queue ${j.spec.queue} gpu 32/32, cohort lends 0, job needs 8 (flavor od-h100): the rest of cohort tree research is in use`, positionInQueue: '3', queueLength: '17', evaluateTime: iso(now - 42_000) });
      }
      if (req.method === 'POST' && m[3]) {
        if (caller === callers.viewer) return fail(res, 403, 'PERMISSION_DENIED', 'needs role member');
        if (m[3] === 'cancel') j.state = 'JOB_STATE_CANCELLED';
        if (m[3] === 'hold') j.state = 'JOB_STATE_HELD';
        if (m[3] === 'release') j.state = 'JOB_STATE_QUEUED';
        return send(res, 200, j);
      }
      return send(res, 200, j);
    }
    if (rest === 'report') return send(res, 200, reportFor(tenant, q));
    if (rest === 'report:export') {
      res.writeHead(200, { 'Content-Type': 'text/csv' });
      return res.end('BilledCost,ChargePeriodStart\n1.00,2026-11-01T00:00:00Z\n');
    }
    if (rest === 'budgets') return send(res, 200, { budgets: [{ name: `tenants/${tenant}/budgets/monthly`, monthlyAmount: usd(10_000_000_000), spent: usd(6_200_000_000), forecast: usd(9_400_000_000), thresholds: [{ percent: 50, action: 'BUDGET_ACTION_WARN' }, { percent: 90, action: 'BUDGET_ACTION_RESTRICT_TO_SPOT' }, { percent: 100, action: 'BUDGET_ACTION_HOLD' }], activeAction: 'BUDGET_ACTION_RESTRICT_TO_SPOT' }, { name: `tenants/${tenant}/budgets/vision`, project: 'vision', monthlyAmount: usd(2_000_000_000), spent: usd(300_000_000), forecast: usd(700_000_000), thresholds: [{ percent: 80, action: 'BUDGET_ACTION_WARN' }] }] });
    if ((m = /^invoices\/(\d{4}-\d{2})$/.exec(rest))) return send(res, 200, { name: `tenants/${tenant}/invoices/${m[1]}`, invoiceNumber: `INV-${tenant}-${m[1].replace('-', '')}`, currency: 'USD', status: 'INVOICE_STATUS_DRAFT', total: usd(6_200_000_000), platformCost: usd(40_000_000), lines: [{ project: 'llm-pretrain', sku: 'od-h100/GPU', quantity: '1200.5', unit: 'GPU-Hours', cost: usd(4_802_000_000), listCost: usd(4_802_000_000) }, { project: 'vision', sku: 'spot-h100/GPU', quantity: '900', unit: 'GPU-Hours', cost: usd(1_350_000_000), listCost: usd(3_600_000_000), lostWorkCost: usd(80_000_000) }] });
  }
  return fail(res, 404, 'NOT_FOUND', `no route ${p}`);
});
server.listen(port, '127.0.0.1', () => console.log(`mock gateway on http://127.0.0.1:${port}`));
