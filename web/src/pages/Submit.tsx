import { cloneElement, useState } from 'react';
import { Link, useNavigate, useParams, useSearchParams } from 'react-router';
import { useQuery } from '@tanstack/react-query';
import { getJob, listFlavors, listPriorityClasses, listProjects, listQueues, submitJob } from '../api/client';
import { ApiError, errorText } from '../api/errors';
import type { Job } from '../gen/trainyard/v1/job';
import { useSession } from '../session';
import { capabilities } from '../lib/roles';
import {
  formatBytes,
  formatHumanDuration,
  lastSegment,
  parseBytes,
  parseCpuMillis,
  parseHumanDuration,
  parseProtoDuration,
  toProtoDuration,
} from '../lib/format';
import {
  controlForField,
  deepMerge,
  jobToYaml,
  jobToYamlObject,
  stripUndefined,
  yamlToJob,
} from '../lib/jobYaml';
import { formatLabels, parseLabels } from '../lib/viewState';
import { Empty, ErrorBox, Loading } from '../components/States';
import { stringify } from 'yaml';

interface FormState {
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

const EMPTY: FormState = {
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
const CONTROLS: Record<string, keyof FormState> = {
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
const CONTROL_PATHS = Object.keys(CONTROLS);

/** Splits a shell-ish command line: one argument per line, or a single line run by /bin/sh -c. */
function commandToArgv(text: string): string[] | undefined {
  const lines = text.split('\n').map((l) => l.trim()).filter(Boolean);
  if (lines.length === 0) return undefined;
  if (lines.length === 1) return ['/bin/sh', '-c', lines[0] as string];
  return lines;
}
function argvToCommand(argv: string[] | undefined): string {
  if (!argv?.length) return '';
  if (argv.length === 3 && argv[0] === '/bin/sh' && argv[1] === '-c') return argv[2] ?? '';
  return argv.join('\n');
}

type Errors = Partial<Record<keyof FormState | 'top', string>>;

/** The form (plus its extra YAML) as a Job; problems keyed by control. */
export function formToJob(f: FormState): { job: Job; errors: Errors } {
  const errors: Errors = {};
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
  for (const p of extra.problems) {
    const key = CONTROLS[controlForField(p.field, CONTROL_PATHS)] ?? 'extraYaml';
    errors[key === 'extraYaml' ? 'extraYaml' : key] = p.message;
  }
  const job = stripUndefined(deepMerge(base, extra.job));
  if (!job.spec?.queue) errors.queue = errors.queue ?? 'required';
  return { job, errors };
}

/** Prefills the form from a job (resubmit): what the form has no control for goes to the YAML. */
function jobToForm(job: Job): FormState {
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

function newRequestId(): string {
  return typeof crypto !== 'undefined' && 'randomUUID' in crypto
    ? crypto.randomUUID()
    : `console-${Date.now()}-${Math.random().toString(36).slice(2)}`;
}

export function SubmitPage() {
  const { tenant = '' } = useParams();
  const [search] = useSearchParams();
  const from = search.get('from');
  const s = useSession();
  const caps = capabilities(s.caller, tenant);
  const sourceQ = useQuery({
    queryKey: ['job', `tenants/${tenant}/jobs/${from}`],
    queryFn: () => getJob(`tenants/${tenant}/jobs/${from}`),
    enabled: !!from && caps.mutateJobs,
  });
  if (!caps.mutateJobs || tenant === '-') {
    return (
      <>
        <h1>Submit a job</h1>
        <Empty>
          {tenant === '-' ? 'Pick one tenant to submit into.' : `Your roles in ${tenant} do not include submitting jobs (member or above).`}
        </Empty>
      </>
    );
  }
  if (from && sourceQ.isPending) return <Loading label={`Loading job ${from} to copy…`} />;
  return (
    <>
      <h1>{from ? `Resubmit a copy of job ${from}` : 'Submit a job'}</h1>
      {from && sourceQ.error && <ErrorBox error={sourceQ.error} title={`Could not load job ${from}`} />}
      <SubmitForm
        key={`${tenant}/${from ?? ''}`}
        tenant={tenant}
        copy={!!from}
        initial={sourceQ.data ? jobToForm(sourceQ.data) : EMPTY}
      />
    </>
  );
}

function SubmitForm({ tenant, initial, copy }: { tenant: string; initial: FormState; copy: boolean }) {
  const nav = useNavigate();
  const [rawForm, setForm] = useState<FormState>(initial);
  const [serverErrors, setServerErrors] = useState<Errors>({});
  const [topError, setTopError] = useState<unknown>(null);
  const [busy, setBusy] = useState(false);
  const [requestId, setRequestId] = useState(newRequestId);
  const [triedSubmit, setTriedSubmit] = useState(false);

  const queuesQ = useQuery({ queryKey: ['queues', tenant], queryFn: () => listQueues(tenant), staleTime: 60_000 });
  const projectsQ = useQuery({ queryKey: ['projects', tenant], queryFn: () => listProjects(tenant), staleTime: 60_000 });
  const classesQ = useQuery({ queryKey: ['priorityClasses'], queryFn: listPriorityClasses, staleTime: 300_000 });
  const flavorsQ = useQuery({ queryKey: ['flavors'], queryFn: listFlavors, staleTime: 300_000 });
  // A new job defaults to the queue "default" (else the first one) until one is chosen.
  const queueIds = (queuesQ.data?.queues ?? []).map((q) => lastSegment(q.name));
  const defaultQueue = queueIds.includes('default') ? 'default' : (queueIds[0] ?? '');
  const form = rawForm.queue || copy ? rawForm : { ...rawForm, queue: defaultQueue };
  // Cheap enough to recompute on each keystroke.
  const { job, errors: localErrors } = formToJob(form);
  const preview = jobToYaml(job);
  const gpuModels = [...new Set((flavorsQ.data?.flavors ?? []).map((f) => f.gpuModel).filter(Boolean))] as string[];

  const set = <K extends keyof FormState>(k: K, v: FormState[K]) => {
    setForm({ ...form, [k]: v });
    setServerErrors((e) => ({ ...e, [k]: undefined }));
  };
  const errorOf = (k: keyof FormState) => serverErrors[k] ?? (triedSubmit ? localErrors[k] : undefined);

  const submit = async (e: React.FormEvent) => {
    e.preventDefault();
    setTriedSubmit(true);
    setTopError(null);
    if (Object.values(localErrors).some(Boolean)) {
      const first = Object.keys(localErrors)[0];
      if (first) document.getElementById(`f-${first}`)?.focus();
      return;
    }
    setBusy(true);
    try {
      const r = await submitJob(tenant, job, requestId);
      setRequestId(newRequestId());
      const id = lastSegment(r.job?.name);
      nav(`/t/${encodeURIComponent(tenant)}/jobs/${encodeURIComponent(id)}`);
    } catch (err) {
      if (err instanceof ApiError && err.field) {
        const control = CONTROLS[controlForField(err.field, CONTROL_PATHS)];
        if (control) {
          setServerErrors({ [control]: err.message });
          document.getElementById(`f-${control}`)?.focus();
        } else setTopError(err);
      } else setTopError(err);
    } finally {
      setBusy(false);
    }
  };

  const field = (
    k: keyof FormState,
    label: string,
    input: React.ReactElement<React.InputHTMLAttributes<HTMLInputElement>>,
    hint?: string,
  ) => {
    const err = errorOf(k);
    const id = `f-${k}`;
    return (
      <div className={`field${err ? ' has-error' : ''}`}>
        <label htmlFor={id}>{label}</label>
        {cloneElement(input, {
          id,
          'aria-invalid': err ? true : undefined,
          'aria-describedby': [err ? `${id}-err` : '', hint ? `${id}-hint` : ''].filter(Boolean).join(' ') || undefined,
          'data-testid': `submit-${k}`,
        } as React.InputHTMLAttributes<HTMLInputElement>)}
        {hint && (
          <small id={`${id}-hint`} className="muted">
            {hint}
          </small>
        )}
        {err && (
          <small id={`${id}-err`} className="field-error" data-testid={`error-${k}`}>
            {err}
          </small>
        )}
      </div>
    );
  };
  const projectIds = (projectsQ.data?.projects ?? []).map((p) => lastSegment(p.name));

  return (
    <>
      <p className="muted">
        Into tenant <strong>{tenant}</strong>. The common fields are below; anything else of the job YAML format
        (env, retry, topology, backend, working_dir…) goes in the YAML box and wins over the form.
      </p>
      {topError !== null && (
        <div className="state state-error" role="alert" data-testid="submit-error">
          <strong>The server refused the job</strong>
          <p className="mono">{errorText(topError)}</p>
        </div>
      )}
      <form className="submit-form" onSubmit={submit} noValidate aria-label="Submit a job">
        <fieldset>
          <legend>Job</legend>
          {field('name', 'Name', <input value={form.name} maxLength={256} onChange={(e) => set('name', e.target.value)} />)}
          {field(
            'project',
            'Project',
            <input list="submit-projects" value={form.project} onChange={(e) => set('project', e.target.value)} />,
          )}
          <datalist id="submit-projects">
            {projectIds.map((p) => (
              <option key={p} value={p} />
            ))}
          </datalist>
          {field(
            'queue',
            'Queue',
            <select value={form.queue} onChange={(e) => set('queue', e.target.value)}>
              <option value="">Choose…</option>
              {form.queue && !queueIds.includes(form.queue) && <option value={form.queue}>{form.queue}</option>}
              {queueIds.map((q) => (
                <option key={q} value={q}>
                  {q}
                </option>
              ))}
            </select>,
          )}
          {field(
            'priorityClass',
            'Priority class',
            <select value={form.priorityClass} onChange={(e) => set('priorityClass', e.target.value)}>
              <option value="">Tenant default</option>
              {(classesQ.data?.priorityClasses ?? []).map((c) => (
                <option key={c.name} value={lastSegment(c.name)}>
                  {lastSegment(c.name)} ({c.value ?? 0}
                  {c.preemptible ? ', preemptible' : ''})
                </option>
              ))}
              {form.priorityClass &&
                !(classesQ.data?.priorityClasses ?? []).some((c) => lastSegment(c.name) === form.priorityClass) && (
                  <option value={form.priorityClass}>{form.priorityClass}</option>
                )}
            </select>,
          )}
          {field('jobSet', 'Job set', <input value={form.jobSet} onChange={(e) => set('jobSet', e.target.value)} />, 'Group name for watching and cancelling together.')}
          {field('labels', 'Labels', <input value={form.labels} onChange={(e) => set('labels', e.target.value)} placeholder="team=vision, env=prod" />)}
        </fieldset>
        <fieldset>
          <legend>What to run</legend>
          {field('image', 'Container image', <input value={form.image} onChange={(e) => set('image', e.target.value)} />)}
          {field(
            'command',
            'Command',
            <textarea rows={3} value={form.command} onChange={(e) => set('command', e.target.value)} spellCheck={false} />,
            'One line runs with /bin/sh -c; several lines are one argument each.',
          )}
          {field('timeLimit', 'Time limit', <input value={form.timeLimit} onChange={(e) => set('timeLimit', e.target.value)} />, 'e.g. 90m, 4h, 2d')}
        </fieldset>
        <fieldset>
          <legend>Resources</legend>
          {field('workers', 'Workers (gang size)', <input inputMode="numeric" value={form.workers} onChange={(e) => set('workers', e.target.value)} />)}
          {field('gpus', 'GPUs per worker', <input inputMode="numeric" value={form.gpus} onChange={(e) => set('gpus', e.target.value)} />)}
          {field(
            'gpuModel',
            'GPU model',
            <select value={form.gpuModel} onChange={(e) => set('gpuModel', e.target.value)}>
              <option value="">Any</option>
              {[...new Set([...gpuModels, ...(form.gpuModel ? [form.gpuModel] : [])])].map((m) => (
                <option key={m} value={m}>
                  {m}
                </option>
              ))}
            </select>,
          )}
          {field('cpus', 'CPUs per worker', <input value={form.cpus} onChange={(e) => set('cpus', e.target.value)} />, '8, 0.5 or 500m')}
          {field('memory', 'Memory per worker', <input value={form.memory} onChange={(e) => set('memory', e.target.value)} />, '64Gi, 512Mi')}
          {field(
            'spot',
            'Spot capacity',
            <select value={form.spot} onChange={(e) => set('spot', e.target.value)}>
              <option value="">Default (allowed if resumable, else never)</option>
              <option value="SPOT_POLICY_NEVER">Never</option>
              <option value="SPOT_POLICY_ALLOWED">Allowed (cheapest expected cost)</option>
              <option value="SPOT_POLICY_PREFERRED">Preferred</option>
              <option value="SPOT_POLICY_REQUIRED">Required (spot only)</option>
            </select>,
          )}
        </fieldset>
        <fieldset>
          <legend>Checkpoints</legend>
          {field('ckDirectory', 'Checkpoint directory', <input value={form.ckDirectory} onChange={(e) => set('ckDirectory', e.target.value)} />)}
          {field('ckInterval', 'Checkpoint interval', <input value={form.ckInterval} onChange={(e) => set('ckInterval', e.target.value)} />, 'Drives expected lost work on preemption.')}
          <div className="field check">
            <input
              id="f-ckResumable"
              type="checkbox"
              checked={form.ckResumable}
              onChange={(e) => set('ckResumable', e.target.checked)}
              data-testid="submit-ckResumable"
            />
            <label htmlFor="f-ckResumable">Resumable (reads TRAINYARD_RESUME_FROM)</label>
          </div>
        </fieldset>
        <fieldset className="wide">
          <legend>More (job YAML)</legend>
          {field(
            'extraYaml',
            'Extra fields as job YAML',
            <textarea
              rows={8}
              className="code"
              spellCheck={false}
              value={form.extraYaml}
              onChange={(e) => set('extraYaml', e.target.value)}
              placeholder={'env:\n  HF_HOME: /scratch/hf\nretry:\n  max_attempts: 5\ntopology:\n  preferred: block'}
            />,
          )}
          <details>
            <summary>The whole job as YAML</summary>
            <pre className="code" data-testid="submit-preview" tabIndex={0}>
              {preview}
            </pre>
          </details>
        </fieldset>
        <div className="form-actions">
          <button type="submit" className="primary" disabled={busy} data-testid="submit-job">
            {busy ? 'Submitting…' : 'Submit'}
          </button>
          <Link to={`/t/${encodeURIComponent(tenant)}/jobs`}>Cancel</Link>
        </div>
      </form>
    </>
  );
}
