import { describe, expect, it } from 'vitest';
import { CONTROLS, CONTROL_PATHS, EMPTY_FORM, formToJob, jobToForm } from './submitForm';
import { controlForField } from './jobYaml';

describe('submit form', () => {
  it('builds the proto JSON job from the form', () => {
    const { job, errors } = formToJob({
      ...EMPTY_FORM,
      name: 'bert',
      queue: 'default',
      project: 'nlp',
      command: 'python3 train.py --epochs 3',
      workers: '2',
      gpus: '8',
      gpuModel: 'H100',
      cpus: '0.5',
      memory: '64Gi',
      timeLimit: '1h30m',
      spot: 'SPOT_POLICY_PREFERRED',
      ckDirectory: '/ckpt',
      ckInterval: '15m',
      ckResumable: true,
      labels: 'team=nlp',
    });
    expect(errors).toEqual({});
    expect(job).toEqual({
      displayName: 'bert',
      labels: { team: 'nlp' },
      spec: {
        project: 'nlp',
        queue: 'default',
        command: ['/bin/sh', '-c', 'python3 train.py --epochs 3'],
        workers: 2,
        resources: { gpus: 8, gpuModel: 'H100', cpuMillis: '500', memoryBytes: String(64 * 1024 ** 3) },
        timeLimit: '5400s',
        spotPolicy: 'SPOT_POLICY_PREFERRED',
        checkpoint: { directory: '/ckpt', interval: '900s', resumable: true },
      },
    });
  });
  it('lets the extra YAML override and extend the form', () => {
    const { job, errors } = formToJob({
      ...EMPTY_FORM,
      queue: 'default',
      extraYaml: 'queue: research\nenv: {A: "1"}\nretry: {max_attempts: 5}\nresources: {gpu_model: A100}\n',
    });
    expect(errors).toEqual({});
    expect(job.spec?.queue).toBe('research');
    expect(job.spec?.env).toEqual({ A: '1' });
    expect(job.spec?.retry).toEqual({ maxAttempts: 5 });
    expect(job.spec?.resources).toEqual({ gpus: 1, gpuModel: 'A100', cpuMillis: '8000', memoryBytes: String(64 * 1024 ** 3) });
  });
  it('reports bad values against their control', () => {
    const { errors } = formToJob({ ...EMPTY_FORM, queue: '', workers: '0', memory: 'lots', extraYaml: 'time_limit: soon' });
    expect(Object.keys(errors).sort()).toEqual(['extraYaml', 'memory', 'queue', 'workers']);
    const y = formToJob({ ...EMPTY_FORM, queue: 'q', extraYaml: 'workers: many\nspot: maybe' }).errors;
    expect(y).toEqual({ extraYaml: 'workers: must be an integer; spot: must be one of never, allowed, preferred, required' });
  });
  it('maps the server error fields to controls', () => {
    expect(CONTROLS[controlForField('job.spec.resources.gpus', CONTROL_PATHS)]).toBe('gpus');
    expect(CONTROLS[controlForField('job.spec.checkpoint.gracePeriod', CONTROL_PATHS)]).toBe('extraYaml');
    expect(CONTROLS[controlForField('job.spec.resources.cpuMillis', CONTROL_PATHS)]).toBe('cpus');
    expect(CONTROLS[controlForField('job.labels', CONTROL_PATHS)]).toBe('labels');
  });
  it('prefills a resubmit from a job, with what the form lacks as YAML', () => {
    const { job } = formToJob({
      ...EMPTY_FORM,
      name: 'x',
      queue: 'q',
      command: 'a\nb',
      extraYaml: 'env: {A: "1"}\ncheckpoint: {grace_period: 2m}\n',
    });
    const f = jobToForm(job);
    expect(f.command).toBe('a\nb');
    expect(f.extraYaml).toBe('env:\n  A: "1"\ncheckpoint:\n  grace_period: 2m\n');
    expect(formToJob(f).job).toEqual(job);
  });
});
