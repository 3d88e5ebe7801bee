// GPUs of the platform by model and flavor, and by node state (pure; unit-tested).
import type { Flavor, Node, Pool } from '../gen/trainyard/v1/cluster';

export interface GpuRow {
  flavor: string;
  kind: string;
  gpuModel: string;
  nodes: number;
  total: number;
  ready: number;
  draining: number;
  down: number;
  /** In use by the queues the caller can see (undefined when unknown). */
  used?: number;
}

function lastSegment(n: string | undefined): string {
  return n ? n.slice(n.lastIndexOf('/') + 1) : '';
}

/** "clusters/c/nodes/n" + pool id -> pool key "c/pool". */
function poolKey(node: Node): string {
  const cluster = node.name?.split('/')[1] ?? '';
  return `${cluster}/${node.pool ?? ''}`;
}

export function gpuRows(
  nodes: Node[],
  pools: Pool[],
  flavors: Flavor[],
  usedByFlavor?: Map<string, number>,
): GpuRow[] {
  const flavorOfPool = new Map<string, string>();
  for (const p of pools) {
    const cluster = p.name?.split('/')[1] ?? '';
    flavorOfPool.set(`${cluster}/${lastSegment(p.name)}`, p.flavor ?? '');
  }
  const flavorById = new Map(flavors.map((f) => [lastSegment(f.name), f]));
  const rows = new Map<string, GpuRow>();
  for (const n of nodes) {
    const flavor = flavorOfPool.get(poolKey(n)) ?? '';
    const f = flavorById.get(flavor);
    const model = n.capacity?.gpuModel || f?.gpuModel || '';
    const key = `${flavor}|${model}`;
    const row =
      rows.get(key) ??
      ({
        flavor,
        kind: f?.kind ?? 'FLAVOR_KIND_UNSPECIFIED',
        gpuModel: model,
        nodes: 0,
        total: 0,
        ready: 0,
        draining: 0,
        down: 0,
        used: usedByFlavor ? (usedByFlavor.get(flavor) ?? 0) : undefined,
      } satisfies GpuRow);
    const g = n.capacity?.gpus ?? 0;
    row.nodes += 1;
    row.total += g;
    if (n.state === 'NODE_STATE_READY') row.ready += g;
    else if (n.state === 'NODE_STATE_DRAINING') row.draining += g;
    else if (n.state === 'NODE_STATE_DOWN') row.down += g;
    rows.set(key, row);
  }
  return [...rows.values()].sort((a, b) => a.gpuModel.localeCompare(b.gpuModel) || a.flavor.localeCompare(b.flavor));
}
