// The submit form <-> a Job: the form's common fields plus extra job YAML merged over them,
// and the map from the server's error field paths to the form's controls (pure; unit-tested).
import { stringify } from 'yaml';
import type { Job } from '../gen/trainyard/v1/job';
import {
  formatBytes,
  formatHumanDuration,
  parseBytes,
  parseCpuMillis,
  parseHumanDuration,
  parseProtoDuration,
  toProtoDuration,
} from './format';
import { deepMerge, jobToYamlObject, stripUndefined, yamlToJob } from './jobYaml';
import { formatLabels, parseLabels } from './viewState';

export interface FormState {
  name: string;
  project: string;
  queue: string;
  priorityClass: string;
  image: string;
  command: string;
  workers: string;
  gpus: string;
  gpuModel: string;
  cpus: string;
  memory: string;
  timeLimit: string;
  spot: string;
  ckDirectory: string;
  ckInterval: string;
  ckResumable: boolean;
  labels: string;
  jobSet: string;
  extraYaml: string;
}

export const EMPTY_FORM: FormState = {
  name: '',
  project: '',
  queue: '',
  priorityClass: '',
  image: '',
  command: '',
  workers: '1',
  gpus: '1',
  gpuModel: '',
  cpus: '8',
  memory: '64Gi',
  timeLimit: '4h',
  spot: '',
  ckDirectory: '',
  ckInterval: '',
  ckResumable: false,
  labels: '',
  jobSet: '',
  extraYaml: '',
};

/** Form control id -> the proto field path the server names in errors. */
export const CONTROLS: Record<string, keyof FormState> = {
  'job.display_name': 'name',
  'job.spec.project': 'project',
  'job.spec.queue': 'queue',
  'job.spec.priority_class': 'priorityClass',
  'job.spec.image': 'image',
  'job.spec.command': 'command',
  'job.spec.workers': 'workers',
  'job.spec.resources.gpus': 'gpus',
  'job.spec.resources.gpu_model': 'gpuModel',
  'job.spec.resources.cpu_millis': 'cpus',
  'job.spec.resources.memory_bytes': 'memory',
  'job.spec.time_limit': 'timeLimit',
  'job.spec.spot_policy': 'spot',
  'job.spec.checkpoint.directory': 'ckDirectory',
  'job.spec.checkpoint.interval': 'ckInterval',
  'job.spec.checkpoint.resumable': 'ckResumable',
  'job.labels': 'labels',
  'job.spec.job_set': 'jobSet',
  yaml: 'extraYaml',
};
export const CONTROL_PATHS = Object.keys(CONTROLS);

/** Splits a shell-ish command line: one argument per line, or a single line run by /bin/sh -c. */
export function commandToArgv(text: string): string[] | undefined {
  const lines = text.split('\n').map((l) => l.trim()).filter(Boolean);
  if (lines.length === 0) return undefined;
  if (lines.length === 1) return ['/bin/sh', '-c', lines[0] as string];
  return lines;
}
export function argvToCommand(argv: string[] | undefined): string {
  if (!argv?.length) return '';
  if (argv.length === 3 && argv[0] === '/bin/sh' && argv[1] === '-c') return argv[2] ?? '';
  return argv.join('\n');
}

export type FormErrors = Partial<Record<keyof FormState | 'top', string>>;

/** The form (plus its extra YAML) as a Job; problems keyed by control. */
export function formToJob(f: FormState): { job: Job; errors: FormErrors } {
  const errors: FormErrors = {};
  const int = (v: string, key: keyof FormState, min: number) => {
    if (v.trim() === '') return undefined;
    const n = Number(v);
    if (!Number.isInteger(n) || n < min) {
      errors[key] = `must be a whole number ≥ ${min}`;
      return undefined;
    }
    return n;
  };
  const dur = (v: string, key: keyof FormState) => {
    if (v.trim() === '') return undefined;
    const s = parseHumanDuration(v);
    if (s === undefined) {
      errors[key] = 'use 90s, 10m, 1h30m, 2d or seconds';
      return undefined;
    }
    return toProtoDuration(s);
  };
  const cpu = f.cpus.trim() ? parseCpuMillis(f.cpus) : undefined;
  if (f.cpus.trim() && cpu === undefined) errors.cpus = 'use 8, 0.5 or 500m';
  const mem = f.memory.trim() ? parseBytes(f.memory) : undefined;
  if (f.memory.trim() && mem === undefined) errors.memory = 'use 64Gi, 512Mi, 1T or bytes';
  const base: Job = {
    displayName: f.name.trim() || undefined,
    labels: Object.keys(parseLabels(f.labels)).length ? parseLabels(f.labels) : undefined,
    spec: {
      project: f.project.trim() || undefined,
      queue: f.queue.trim() || undefined,
      priorityClass: f.priorityClass || undefined,
      image: f.image.trim() || undefined,
      command: commandToArgv(f.command),
      workers: int(f.workers, 'workers', 1),
      resources: {
        gpus: int(f.gpus, 'gpus', 0),
        gpuModel: f.gpuModel.trim() || undefined,
        cpuMillis: cpu === undefined ? undefined : String(cpu),
        memoryBytes: mem === undefined ? undefined : String(mem),
      },
      timeLimit: dur(f.timeLimit, 'timeLimit'),
      spotPolicy: (f.spot || undefined) as never,
      checkpoint:
        f.ckDirectory || f.ckInterval || f.ckResumable
          ? {
              directory: f.ckDirectory.trim() || undefined,
              interval: dur(f.ckInterval, 'ckInterval'),
              resumable: f.ckResumable || undefined,
            }
          : undefined,
      jobSet: f.jobSet.trim() || undefined,
    },
  };
  const extra = yamlToJob(f.extraYaml);
  // Problems of the YAML box are shown under it (that is where they were typed).
  if (extra.problems.length) errors.extraYaml = extra.problems.map((p) => p.message).join('; ');
  const job = stripUndefined(deepMerge(base, extra.job));
  if (!job.spec?.queue) errors.queue = errors.queue ?? 'required';
  return { job, errors };
}

/** Prefills the form from a job (resubmit): what the form has no control for goes to the YAML. */
export function jobToForm(job: Job): FormState {
  const s = job.spec ?? {};
  const r = s.resources ?? {};
  const y = jobToYamlObject(job);
  const formKeys = ['name', 'project', 'queue', 'priority_class', 'image', 'command', 'workers', 'time_limit', 'spot', 'labels', 'job_set'];
  for (const k of formKeys) delete y[k];
  const res = y.resources as Record<string, unknown> | undefined;
  if (res) {
    for (const k of ['gpus', 'gpu_model', 'cpus', 'memory']) delete res[k];
    if (Object.keys(res).length === 0) delete y.resources;
  }
  const ck = y.checkpoint as Record<string, unknown> | undefined;
  if (ck) {
    for (const k of ['directory', 'interval', 'resumable']) delete ck[k];
    if (Object.keys(ck).length === 0) delete y.checkpoint;
  }
  return {
    name: job.displayName ?? '',
    project: s.project ?? '',
    queue: s.queue ?? '',
    priorityClass: s.priorityClass ?? '',
    image: s.image ?? '',
    command: argvToCommand(s.command),
    workers: String(s.workers ?? 1),
    gpus: String(r.gpus ?? 0),
    gpuModel: r.gpuModel ?? '',
    cpus: r.cpuMillis ? String(Number(r.cpuMillis) / 1000) : '',
    memory: r.memoryBytes ? formatBytes(r.memoryBytes) : '',
    timeLimit: formatHumanDuration(parseProtoDuration(s.timeLimit)),
    spot: s.spotPolicy && s.spotPolicy !== 'SPOT_POLICY_UNSPECIFIED' ? s.spotPolicy : '',
    ckDirectory: s.checkpoint?.directory ?? '',
    ckInterval: formatHumanDuration(parseProtoDuration(s.checkpoint?.interval)),
    ckResumable: !!s.checkpoint?.resumable,
    labels: formatLabels(job.labels),
    jobSet: s.jobSet ?? '',
    extraYaml: Object.keys(y).length ? stringify(y, { lineWidth: 0 }) : '',
  };
}

