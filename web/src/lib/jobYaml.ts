// A job <-> the job YAML of docs/job-yaml.md (the format `yard submit -f` reads): snake_case
// keys of JobSpec with friendlier units (durations "1h30m", memory "64Gi", cpus "8" / "500m").
import { parse, stringify } from 'yaml';
import type { Job, JobSpec } from '../gen/trainyard/v1/job';
import {
  formatBytes,
  formatHumanDuration,
  parseBytes,
  parseCpuMillis,
  parseHumanDuration,
  parseProtoDuration,
  toProtoDuration,
} from './format';

type Y = Record<string, unknown>;

const SPOT = ['never', 'allowed', 'preferred', 'required'] as const;
const BACKEND = ['any', 'slurm', 'kubernetes', 'sim'] as const;
const LEVEL = ['block', 'rack'] as const;

function enumToYaml(value: string | undefined, prefix: string): string | undefined {
  if (!value || value.endsWith('_UNSPECIFIED') || value === 'UNRECOGNIZED') return undefined;
  return value.startsWith(prefix) ? value.slice(prefix.length).toLowerCase() : value.toLowerCase();
}

function dur(d: string | undefined): string | undefined {
  const s = parseProtoDuration(d);
  return s === undefined ? undefined : formatHumanDuration(s);
}

function prune(o: Y): Y | undefined {
  const out: Y = {};
  for (const [k, v] of Object.entries(o)) {
    if (v === undefined || v === '' || v === false) continue;
    if (Array.isArray(v) && v.length === 0) continue;
    if (v && typeof v === 'object' && !Array.isArray(v) && Object.keys(v).length === 0) continue;
    out[k] = v;
  }
  return Object.keys(out).length ? out : undefined;
}

/** The job YAML of a job (its display name, labels and spec). */
export function jobToYamlObject(job: Job): Y {
  const s: JobSpec = job.spec ?? {};
  const r = s.resources ?? {};
  return (
    prune({
      name: job.displayName,
      project: s.project,
      queue: s.queue,
      priority_class: s.priorityClass,
      workers: s.workers,
      resources: prune({
        gpus: r.gpus,
        gpu_model: r.gpuModel,
        cpus: r.cpuMillis ? Number(r.cpuMillis) / 1000 : undefined,
        memory: r.memoryBytes && r.memoryBytes !== '0' ? formatBytes(r.memoryBytes) : undefined,
      }),
      image: s.image,
      command: s.command,
      env: s.env,
      working_dir: s.workingDir,
      time_limit: dur(s.timeLimit),
      expected_runtime: dur(s.expectedRuntime),
      spot: enumToYaml(s.spotPolicy, 'SPOT_POLICY_'),
      checkpoint: prune({
        directory: s.checkpoint?.directory,
        interval: dur(s.checkpoint?.interval),
        resumable: s.checkpoint?.resumable,
        grace_period: dur(s.checkpoint?.gracePeriod),
      }),
      retry: prune({
        max_attempts: s.retry?.maxAttempts,
        initial_backoff: dur(s.retry?.initialBackoff),
        max_backoff: dur(s.retry?.maxBackoff),
        retryable_exit_codes: s.retry?.retryableExitCodes,
      }),
      backend: enumToYaml(s.backend, 'BACKEND_PREFERENCE_'),
      topology: prune({
        required: enumToYaml(s.topology?.requiredLevel, 'TOPOLOGY_LEVEL_'),
        preferred: enumToYaml(s.topology?.preferredLevel, 'TOPOLOGY_LEVEL_'),
      }),
      job_set: s.jobSet,
      labels: job.labels,
    }) ?? {}
  );
}

export function jobToYaml(job: Job): string {
  const o = jobToYamlObject(job);
  return Object.keys(o).length ? stringify(o, { lineWidth: 0 }) : '';
}

export interface YamlProblem {
  /** Proto field path, e.g. "job.spec.resources.gpus" (the server's naming). */
  field: string;
  message: string;
}

export interface ParsedJobYaml {
  job: Job;
  clientRequestId?: string;
  problems: YamlProblem[];
}

const KNOWN: Record<string, string[]> = {
  '': [
    'name',
    'display_name',
    'labels',
    'project',
    'queue',
    'priority_class',
    'workers',
    'resources',
    'image',
    'command',
    'env',
    'working_dir',
    'time_limit',
    'expected_runtime',
    'spot',
    'spot_policy',
    'checkpoint',
    'retry',
    'backend',
    'topology',
    'job_set',
    'client_request_id',
  ],
  resources: ['gpus', 'gpu_model', 'cpus', 'cpu_millis', 'memory', 'memory_bytes'],
  checkpoint: ['directory', 'interval', 'resumable', 'grace_period'],
  retry: ['max_attempts', 'initial_backoff', 'max_backoff', 'retryable_exit_codes'],
  topology: ['required', 'preferred', 'required_level', 'preferred_level'],
};

const FIELD: Record<string, string> = {
  name: 'job.display_name',
  display_name: 'job.display_name',
  labels: 'job.labels',
  client_request_id: 'client_request_id',
  spot: 'job.spec.spot_policy',
  backend: 'job.spec.backend',
  'resources.cpus': 'job.spec.resources.cpu_millis',
  'resources.memory': 'job.spec.resources.memory_bytes',
  'topology.required': 'job.spec.topology.required_level',
  'topology.preferred': 'job.spec.topology.preferred_level',
};

function fieldOf(path: string): string {
  return FIELD[path] ?? `job.spec.${path}`;
}

/**
 * Parses one job YAML document. Problems name the proto field (as the server would), so the
 * form shows them next to the same control as the server's errors.
 */
export function yamlToJob(text: string): ParsedJobYaml {
  const problems: YamlProblem[] = [];
  const job: Job = { spec: {} };
  let doc: unknown;
  try {
    doc = text.trim() === '' ? {} : parse(text, { uniqueKeys: true });
  } catch (e) {
    return { job, problems: [{ field: 'yaml', message: `invalid YAML: ${(e as Error).message}` }] };
  }
  if (doc === null || doc === undefined) doc = {};
  if (typeof doc !== 'object' || Array.isArray(doc)) {
    return { job, problems: [{ field: 'yaml', message: 'the job YAML must be a mapping' }] };
  }
  const y = doc as Y;
  const spec = job.spec as JobSpec;

  const checkKeys = (obj: Y, section: string) => {
    const known = KNOWN[section] ?? [];
    for (const k of Object.keys(obj)) {
      if (!known.includes(k)) {
        const path = section ? `${section}.${k}` : k;
        problems.push({
          field: fieldOf(path),
          message: `${path}: unknown field '${k}' (known fields: ${[...known].sort().join(', ')})`,
        });
      }
    }
  };
  const str = (v: unknown, path: string): string | undefined => {
    if (v === undefined || v === null) return undefined;
    if (typeof v === 'string') return v;
    if (typeof v === 'number' || typeof v === 'boolean') return String(v);
    problems.push({ field: fieldOf(path), message: `${path}: must be a string` });
    return undefined;
  };
  const int = (v: unknown, path: string): number | undefined => {
    if (v === undefined || v === null) return undefined;
    if (typeof v === 'number' && Number.isInteger(v)) return v;
    if (typeof v === 'string' && /^-?\d+$/.test(v.trim())) return Number(v);
    problems.push({ field: fieldOf(path), message: `${path}: must be an integer` });
    return undefined;
  };
  const durField = (v: unknown, path: string): string | undefined => {
    if (v === undefined || v === null) return undefined;
    const s = parseHumanDuration(v as string | number);
    if (s === undefined) {
      problems.push({
        field: fieldOf(path),
        message: `${path}: not a duration (use 90s, 10m, 1h30m, 2d or seconds)`,
      });
      return undefined;
    }
    return toProtoDuration(s);
  };
  const map = (v: unknown, path: string): Record<string, string> | undefined => {
    if (v === undefined || v === null) return undefined;
    if (typeof v !== 'object' || Array.isArray(v)) {
      problems.push({ field: fieldOf(path), message: `${path}: must be a mapping` });
      return undefined;
    }
    const out: Record<string, string> = {};
    for (const [k, val] of Object.entries(v as Y)) out[k] = String(val);
    return out;
  };
  const section = (v: unknown, path: string): Y | undefined => {
    if (v === undefined || v === null) return undefined;
    if (typeof v !== 'object' || Array.isArray(v)) {
      problems.push({ field: fieldOf(path), message: `${path}: must be a mapping` });
      return undefined;
    }
    checkKeys(v as Y, path);
    return v as Y;
  };
  const oneOf = <T extends string>(v: unknown, path: string, values: readonly T[]): T | undefined => {
    const s = str(v, path);
    if (s === undefined) return undefined;
    const low = s.toLowerCase() as T;
    if (values.includes(low)) return low;
    problems.push({ field: fieldOf(path), message: `${path}: must be one of ${values.join(', ')}` });
    return undefined;
  };

  checkKeys(y, '');
  job.displayName = str(y.name ?? y.display_name, 'name');
  job.labels = map(y.labels, 'labels');
  spec.project = str(y.project, 'project');
  spec.queue = str(y.queue, 'queue');
  spec.priorityClass = str(y.priority_class, 'priority_class');
  spec.workers = int(y.workers, 'workers');
  const res = section(y.resources, 'resources');
  if (res) {
    spec.resources = {
      gpus: int(res.gpus, 'resources.gpus'),
      gpuModel: str(res.gpu_model, 'resources.gpu_model'),
    };
    const cpu = res.cpus ?? (res.cpu_millis !== undefined ? `${String(res.cpu_millis)}m` : undefined);
    if (cpu !== undefined) {
      const m = parseCpuMillis(cpu as string | number);
      if (m === undefined) {
        problems.push({ field: fieldOf('resources.cpus'), message: 'resources.cpus: use 8, 0.5 or 500m' });
      } else spec.resources.cpuMillis = String(m);
    }
    const mem = res.memory ?? res.memory_bytes;
    if (mem !== undefined) {
      const b = parseBytes(mem as string | number);
      if (b === undefined) {
        problems.push({
          field: fieldOf('resources.memory'),
          message: 'resources.memory: use bytes or 64Gi, 512Mi, 1T',
        });
      } else spec.resources.memoryBytes = String(b);
    }
  }
  spec.image = str(y.image, 'image');
  if (y.command !== undefined && y.command !== null) {
    if (typeof y.command === 'string') spec.command = ['/bin/sh', '-c', y.command];
    else if (Array.isArray(y.command)) spec.command = y.command.map((c) => String(c));
    else problems.push({ field: fieldOf('command'), message: 'command: must be a list or a string' });
  }
  spec.env = map(y.env, 'env');
  spec.workingDir = str(y.working_dir, 'working_dir');
  spec.timeLimit = durField(y.time_limit, 'time_limit');
  spec.expectedRuntime = durField(y.expected_runtime, 'expected_runtime');
  const spot = oneOf(y.spot ?? y.spot_policy, 'spot', SPOT);
  if (spot) spec.spotPolicy = `SPOT_POLICY_${spot.toUpperCase()}` as JobSpec['spotPolicy'];
  const ck = section(y.checkpoint, 'checkpoint');
  if (ck) {
    spec.checkpoint = {
      directory: str(ck.directory, 'checkpoint.directory'),
      interval: durField(ck.interval, 'checkpoint.interval'),
      resumable: ck.resumable === undefined ? undefined : Boolean(ck.resumable),
      gracePeriod: durField(ck.grace_period, 'checkpoint.grace_period'),
    };
  }
  const rt = section(y.retry, 'retry');
  if (rt) {
    let codes: number[] | undefined;
    if (Array.isArray(rt.retryable_exit_codes)) {
      codes = rt.retryable_exit_codes.map((c, i) => int(c, `retry.retryable_exit_codes[${i}]`) ?? 0);
    }
    spec.retry = {
      maxAttempts: int(rt.max_attempts, 'retry.max_attempts'),
      initialBackoff: durField(rt.initial_backoff, 'retry.initial_backoff'),
      maxBackoff: durField(rt.max_backoff, 'retry.max_backoff'),
      retryableExitCodes: codes,
    };
  }
  const backend = oneOf(y.backend, 'backend', BACKEND);
  if (backend) spec.backend = `BACKEND_PREFERENCE_${backend.toUpperCase()}` as JobSpec['backend'];
  const topo = section(y.topology, 'topology');
  if (topo) {
    const req = oneOf(topo.required ?? topo.required_level, 'topology.required', LEVEL);
    const pref = oneOf(topo.preferred ?? topo.preferred_level, 'topology.preferred', LEVEL);
    spec.topology = {
      requiredLevel: req ? (`TOPOLOGY_LEVEL_${req.toUpperCase()}` as never) : undefined,
      preferredLevel: pref ? (`TOPOLOGY_LEVEL_${pref.toUpperCase()}` as never) : undefined,
    };
  }
  spec.jobSet = str(y.job_set, 'job_set');
  const clientRequestId = str(y.client_request_id, 'client_request_id');
  return { job: stripUndefined(job), clientRequestId, problems };
}

/** Deep copy without undefined values (what JSON.stringify leaves out anyway). */
export function stripUndefined<T>(v: T): T {
  return JSON.parse(JSON.stringify(v)) as T;
}

/** Merges `over` onto `base` (objects deeply, everything else replaced). */
export function deepMerge<T extends object>(base: T, over: Partial<T>): T {
  const out: Record<string, unknown> = { ...(base as Record<string, unknown>) };
  for (const [k, v] of Object.entries(over)) {
    if (v === undefined) continue;
    const b = out[k];
    if (v && typeof v === 'object' && !Array.isArray(v) && b && typeof b === 'object' && !Array.isArray(b)) {
      out[k] = deepMerge(b as object, v as object);
    } else out[k] = v;
  }
  return out as T;
}

/** The proto path of an API error's field, normalized to snake_case: "job.spec.gpuModel" -> "job.spec.gpu_model". */
export function normalizeFieldPath(field: string): string {
  return field
    .split('.')
    .map((seg) => seg.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`))
    .join('.')
    .replace(/^requests\[\d+\]\./, '');
}

/**
 * The form control that shows an error about `field`: the longest known prefix wins; fields of
 * the spec the form has no control for go to the YAML editor; others to the form's top.
 */
export function controlForField(field: string, controls: readonly string[]): string {
  const f = normalizeFieldPath(field);
  let best = '';
  for (const c of controls) {
    if ((f === c || f.startsWith(`${c}.`) || f.startsWith(`${c}[`)) && c.length > best.length) best = c;
  }
  if (best) return best;
  if (f.startsWith('job.')) return 'yaml';
  return '';
}
