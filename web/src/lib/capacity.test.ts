import { describe, expect, it } from 'vitest';
import { gpuRows } from './capacity';

describe('GPU rows', () => {
  it('sums GPUs per flavor and model by node state, with the pool mapping per cluster', () => {
    const rows = gpuRows(
      [
        { name: 'clusters/a/nodes/n1', pool: 'p', capacity: { gpus: 8, gpuModel: 'H100' }, state: 'NODE_STATE_READY' as never },
        { name: 'clusters/a/nodes/n2', pool: 'p', capacity: { gpus: 8, gpuModel: 'H100' }, state: 'NODE_STATE_DOWN' as never },
        { name: 'clusters/a/nodes/n3', pool: 'p', capacity: { gpus: 8, gpuModel: 'H100' }, state: 'NODE_STATE_DRAINING' as never },
        { name: 'clusters/b/nodes/n1', pool: 'p', capacity: { gpus: 4 }, state: 'NODE_STATE_READY' as never },
      ],
      [
        { name: 'clusters/a/pools/p', flavor: 'spot-h100' },
        { name: 'clusters/b/pools/p', flavor: 'od-a100' },
      ],
      [
        { name: 'flavors/spot-h100', kind: 'FLAVOR_KIND_SPOT' as never, gpuModel: 'H100' },
        { name: 'flavors/od-a100', kind: 'FLAVOR_KIND_ON_DEMAND' as never, gpuModel: 'A100' },
      ],
      new Map([['spot-h100', 6]]),
    );
    expect(rows).toEqual([
      { flavor: 'od-a100', kind: 'FLAVOR_KIND_ON_DEMAND', gpuModel: 'A100', nodes: 1, total: 4, ready: 4, draining: 0, down: 0, used: 0 },
      { flavor: 'spot-h100', kind: 'FLAVOR_KIND_SPOT', gpuModel: 'H100', nodes: 3, total: 24, ready: 8, draining: 8, down: 8, used: 6 },
    ]);
  });
});
