import { describe, expect, it } from 'vitest';
import { controlForField, jobToYaml, normalizeFieldPath, yamlToJob, deepMerge } from './jobYaml';
import { capabilities } from './roles';
import type { Caller } from '../gen/trainyard/v1/admin';

const GANG = `name: llama-pretrain
project: llm-pretrain
queue: default
workers: 4
resources: {gpus: 8, gpu_model: H100, cpus: 96, memory: 1000Gi}
command: [torchrun, --nnodes=4, train.py]
spot: required
checkpoint:
  directory: /shared/ckpt/llama-pretrain
  interval: 15m
  resumable: true
  grace_period: 2m
topology:
  preferred: block
retry:
  max_attempts: 5
  retryable_exit_codes: [137]
time_limit: 3d
expected_runtime: 2d
job_set: llama-v2
labels:
  team: "<script>alert(1)</script>"
`;

describe('job YAML', () => {
  it('reads the docs example into the proto JSON job', () => {
    const { job, problems } = yamlToJob(GANG);
    expect(problems).toEqual([]);
    expect(job.displayName).toBe('llama-pretrain');
    expect(job.spec?.workers).toBe(4);
    expect(job.spec?.resources).toEqual({
      gpus: 8,
      gpuModel: 'H100',
      cpuMillis: '96000',
      memoryBytes: String(1000 * 1024 ** 3),
    });
    expect(job.spec?.spotPolicy).toBe('SPOT_POLICY_REQUIRED');
    expect(job.spec?.checkpoint).toEqual({
      directory: '/shared/ckpt/llama-pretrain',
      interval: '900s',
      resumable: true,
      gracePeriod: '120s',
    });
    expect(job.spec?.topology).toEqual({ preferredLevel: 'TOPOLOGY_LEVEL_BLOCK' });
    expect(job.spec?.timeLimit).toBe('259200s');
    expect(job.spec?.retry).toEqual({ maxAttempts: 5, retryableExitCodes: [137] });
    expect(job.labels).toEqual({ team: '<script>alert(1)</script>' });
  });
  it('writes a job back to the same YAML meaning', () => {
    const { job } = yamlToJob(GANG);
    const again = yamlToJob(jobToYaml(job));
    expect(again.problems).toEqual([]);
    expect(again.job).toEqual(job);
    expect(jobToYaml(job)).toContain('time_limit: 3d');
    expect(jobToYaml(job)).toContain('memory: 1000Gi');
  });
  it('runs a single string command with /bin/sh -c', () => {
    expect(yamlToJob('command: echo hi && sleep 1').job.spec?.command).toEqual([
      '/bin/sh',
      '-c',
      'echo hi && sleep 1',
    ]);
  });
  it('names the field of each problem', () => {
    const { problems } = yamlToJob('resources:\n  gpu_modle: H100\ntime_limit: soon\nspot: maybe\n');
    expect(problems.map((p) => p.field)).toEqual([
      'job.spec.resources.gpu_modle',
      'job.spec.time_limit',
      'job.spec.spot_policy',
    ]);
    expect(problems[0]?.message).toContain('known fields: cpu_millis, cpus, gpu_model');
    expect(yamlToJob('a: [').problems[0]?.field).toBe('yaml');
    expect(yamlToJob('x: 1\nx: 2').problems[0]?.message).toMatch(/invalid YAML/);
  });
  it('merges extra YAML over the form', () => {
    const merged = deepMerge(
      { spec: { queue: "a", resources: { gpus: 1 } } } as Record<string, unknown>,
      { spec: { resources: { gpuModel: 'H100' } } },
    );
    expect(merged).toEqual({ spec: { queue: 'a', resources: { gpus: 1, gpuModel: 'H100' } } });
  });
});

describe('error field -> form control', () => {
  const controls = ['job.display_name', 'job.spec.workers', 'job.spec.resources.gpus', 'job.spec.checkpoint'];
  it('maps camelCase or snake_case paths to the longest matching control', () => {
    expect(normalizeFieldPath('job.spec.resources.gpuModel')).toBe('job.spec.resources.gpu_model');
    expect(controlForField('job.spec.workers', controls)).toBe('job.spec.workers');
    expect(controlForField('job.displayName', controls)).toBe('job.display_name');
    expect(controlForField('job.spec.checkpoint.gracePeriod', controls)).toBe('job.spec.checkpoint');
    expect(controlForField('requests[0].job.spec.workers', controls)).toBe('job.spec.workers');
    expect(controlForField('job.spec.env', controls)).toBe('yaml');
    expect(controlForField('client_request_id', controls)).toBe('');
  });
});

describe('roles', () => {
  const caller = (bindings: Caller['bindings']): Caller => ({ principal: 'users/a', bindings });
  it('gives each role its pages and actions', () => {
    const viewer = capabilities(caller([{ role: 'ROLE_VIEWER' as never, tenant: 'acme' }]), 'acme');
    expect(viewer).toEqual({ readJobs: true, mutateJobs: false, readCosts: false, platform: false });
    const member = capabilities(caller([{ role: 'ROLE_MEMBER' as never, tenant: 'acme' }]), 'acme');
    expect(member.mutateJobs).toBe(true);
    expect(capabilities(caller([{ role: 'ROLE_MEMBER' as never, tenant: 'acme' }]), 'other').readJobs).toBe(false);
    const finance = capabilities(caller([{ role: 'ROLE_FINANCE' as never }]), 'acme');
    expect(finance).toEqual({ readJobs: false, mutateJobs: false, readCosts: true, platform: true });
    const admin = capabilities(caller([{ role: 'ROLE_PLATFORM_ADMIN' as never }]), 'any');
    expect(admin).toEqual({ readJobs: true, mutateJobs: true, readCosts: true, platform: true });
    const ta = capabilities(caller([{ role: 'ROLE_TENANT_ADMIN' as never, tenant: 'acme' }]), 'acme');
    expect(ta.readCosts && ta.mutateJobs && !ta.platform).toBe(true);
  });
});
