import { useMemo, useState } from 'react';
import { useParams } from 'react-router';
import { useQueries, useQuery } from '@tanstack/react-query';
import { getQueueStatus, listAllNodes, listClusters, listFlavors, listPools, listQueues } from '../api/client';
import { useSession } from '../session';
import { capabilities } from '../lib/roles';
import { enumLabel, formatBytes, formatCpu, formatMoney, formatRelative, lastSegment } from '../lib/format';
import { gpuRows } from '../lib/capacity';
import { Empty, ErrorBox, Loading } from '../components/States';
import { Badge } from '../components/StateBadge';

const NODE_TONE: Record<string, string> = {
  NODE_STATE_READY: 'ok',
  NODE_STATE_DRAINING: 'warn',
  NODE_STATE_DOWN: 'bad',
};

export function ClustersPage() {
  const { tenant = '' } = useParams();
  const s = useSession();
  const caps = capabilities(s.caller, tenant);
  const clustersQ = useQuery({ queryKey: ['clusters'], queryFn: listClusters, refetchInterval: 30_000 });
  const poolsQ = useQuery({ queryKey: ['pools'], queryFn: listPools, staleTime: 60_000 });
  const nodesQ = useQuery({ queryKey: ['nodes'], queryFn: listAllNodes, refetchInterval: 30_000 });
  const flavorsQ = useQuery({ queryKey: ['flavors'], queryFn: listFlavors, staleTime: 60_000 });
  // GPUs in use: the queues' usage, over the queues the caller can see.
  const usageTenant = caps.platform ? '-' : tenant;
  const queuesQ = useQuery({
    queryKey: ['queues', usageTenant],
    queryFn: () => listQueues(usageTenant),
    enabled: caps.readJobs,
  });
  const statuses = useQueries({
    queries: (queuesQ.data?.queues ?? []).map((q) => ({
      queryKey: ['queueStatus', q.name],
      queryFn: () => getQueueStatus(q.name as string),
      refetchInterval: 30_000,
    })),
  });
  const usedByFlavor = useMemo(() => {
    if (!caps.readJobs || statuses.some((q) => !q.data)) return undefined;
    const m = new Map<string, number>();
    for (const st of statuses)
      for (const u of st.data?.usage ?? [])
        if (u.resource === 'RESOURCE_NAME_GPU') m.set(u.flavor ?? '', (m.get(u.flavor ?? '') ?? 0) + Number(u.used ?? 0));
    return m;
  }, [caps.readJobs, statuses]);

  const [stateFilter, setStateFilter] = useState('');
  const [clusterFilter, setClusterFilter] = useState('');
  const nodes = useMemo(() => nodesQ.data?.nodes ?? [], [nodesQ.data]);
  const rows = useMemo(
    () => gpuRows(nodes, poolsQ.data?.pools ?? [], flavorsQ.data?.flavors ?? [], usedByFlavor),
    [nodes, poolsQ.data, flavorsQ.data, usedByFlavor],
  );
  const shownNodes = nodes.filter(
    (n) => (!stateFilter || n.state === stateFilter) && (!clusterFilter || n.name?.split('/')[1] === clusterFilter),
  );
  const flavorOfPool = new Map((poolsQ.data?.pools ?? []).map((p) => [`${p.name?.split('/')[1]}/${lastSegment(p.name)}`, p.flavor]));
  const clusters = clustersQ.data?.clusters ?? [];

  return (
    <>
      <h1>Clusters and capacity</h1>
      <section aria-labelledby="gpu-h">
        <h2 id="gpu-h">GPUs by model and flavor</h2>
        {nodesQ.isPending || poolsQ.isPending || flavorsQ.isPending ? (
          <Loading label="Loading capacity…" />
        ) : nodesQ.error || poolsQ.error || flavorsQ.error ? (
          <ErrorBox error={nodesQ.error ?? poolsQ.error ?? flavorsQ.error} />
        ) : rows.length === 0 ? (
          <Empty>No nodes reported yet.</Empty>
        ) : (
          <div className="table-wrap">
            <table className="grid" data-testid="gpu-summary">
              <thead>
                <tr>
                  <th>GPU model</th>
                  <th>Flavor</th>
                  <th>Bought as</th>
                  <th>Nodes</th>
                  <th>GPUs</th>
                  <th>Ready</th>
                  <th>In use</th>
                  <th>Free</th>
                  <th>Draining (cordoned)</th>
                  <th>Down</th>
                  <th>Price / GPU-h</th>
                </tr>
              </thead>
              <tbody>
                {rows.map((r) => {
                  const f = (flavorsQ.data?.flavors ?? []).find((x) => lastSegment(x.name) === r.flavor);
                  return (
                    <tr key={`${r.flavor}|${r.gpuModel}`}>
                      <td>{r.gpuModel || 'CPU only'}</td>
                      <td>{r.flavor || '—'}</td>
                      <td>
                        <Badge tone={r.kind === 'FLAVOR_KIND_SPOT' ? 'warn' : 'muted'}>
                          {enumLabel(r.kind, 'FLAVOR_KIND_')}
                        </Badge>
                        {f?.reclaimRatePerHour ? <span className="small muted"> {f.reclaimRatePerHour}/h reclaims</span> : null}
                      </td>
                      <td>{r.nodes}</td>
                      <td>{r.total}</td>
                      <td>{r.ready}</td>
                      <td>{r.used ?? '—'}</td>
                      <td>{r.used === undefined ? '—' : Math.max(0, r.ready - r.used)}</td>
                      <td>{r.draining}</td>
                      <td>{r.down}</td>
                      <td>{f?.gpuHourPrice ? formatMoney(f.gpuHourPrice) : '—'}</td>
                    </tr>
                  );
                })}
              </tbody>
            </table>
            <p className="small muted">
              In use: GPUs held by admitted and running jobs of the queues you can see
              {caps.platform ? ' (every tenant)' : caps.readJobs ? ` (tenant ${tenant} only)` : ' (none: no tenant role)'}.
            </p>
          </div>
        )}
      </section>

      <section aria-labelledby="cl-h">
        <h2 id="cl-h">Clusters</h2>
        {clustersQ.isPending ? (
          <Loading />
        ) : clustersQ.error ? (
          <ErrorBox error={clustersQ.error} />
        ) : clusters.length === 0 ? (
          <Empty>No clusters.</Empty>
        ) : (
          <div className="table-wrap">
            <table className="grid" data-testid="clusters">
              <thead>
                <tr>
                  <th>Cluster</th>
                  <th>Backend</th>
                  <th>Health</th>
                  <th>Last heartbeat</th>
                  <th>Pools</th>
                </tr>
              </thead>
              <tbody>
                {clusters.map((c) => {
                  const id = lastSegment(c.name);
                  return (
                    <tr key={c.name}>
                      <td>
                        {c.displayName || id} {c.cordoned && <Badge tone="warn">cordoned</Badge>}
                      </td>
                      <td>{enumLabel(c.backend, 'BACKEND_KIND_')}</td>
                      <td>
                        <Badge tone={c.health === 'CLUSTER_HEALTH_HEALTHY' ? 'ok' : c.health === 'CLUSTER_HEALTH_UNHEALTHY' ? 'bad' : 'muted'}>
                          {enumLabel(c.health ?? 'CLUSTER_HEALTH_UNSPECIFIED', 'CLUSTER_HEALTH_')}
                        </Badge>
                        {c.healthMessage && <div className="small">{c.healthMessage}</div>}
                      </td>
                      <td>{c.heartbeatTime ? formatRelative(c.heartbeatTime) : 'never'}</td>
                      <td className="small">
                        {(poolsQ.data?.pools ?? [])
                          .filter((p) => p.name?.split('/')[1] === id)
                          .map((p) => `${lastSegment(p.name)} (${p.flavor})`)
                          .join(', ') || '—'}
                      </td>
                    </tr>
                  );
                })}
              </tbody>
            </table>
          </div>
        )}
      </section>

      <section aria-labelledby="nodes-h">
        <h2 id="nodes-h">Nodes</h2>
        <div className="toolbar">
          <label className="inline-field">
            <span>Cluster</span>
            <select value={clusterFilter} onChange={(e) => setClusterFilter(e.target.value)} data-testid="node-cluster">
              <option value="">Any</option>
              {clusters.map((c) => (
                <option key={c.name} value={lastSegment(c.name)}>
                  {lastSegment(c.name)}
                </option>
              ))}
            </select>
          </label>
          <label className="inline-field">
            <span>State</span>
            <select value={stateFilter} onChange={(e) => setStateFilter(e.target.value)} data-testid="node-state">
              <option value="">Any</option>
              <option value="NODE_STATE_READY">Ready</option>
              <option value="NODE_STATE_DRAINING">Draining</option>
              <option value="NODE_STATE_DOWN">Down</option>
            </select>
          </label>
          <span className="muted small">
            {shownNodes.length} of {nodes.length} nodes
          </span>
        </div>
        {nodesQ.isPending ? (
          <Loading />
        ) : nodesQ.error ? (
          <ErrorBox error={nodesQ.error} />
        ) : shownNodes.length === 0 ? (
          <Empty>No node matches.</Empty>
        ) : (
          <div className="table-wrap table-tall">
            <table className="grid" data-testid="nodes">
              <thead>
                <tr>
                  <th>Node</th>
                  <th>Pool / flavor</th>
                  <th>GPUs</th>
                  <th>CPU / memory</th>
                  <th>Topology</th>
                  <th>State</th>
                  <th>Reported</th>
                </tr>
              </thead>
              <tbody>
                {shownNodes.slice(0, 2000).map((n) => (
                  <tr key={n.name}>
                    <td className="mono small">
                      {n.name?.split('/')[1]}/{lastSegment(n.name)}
                    </td>
                    <td>
                      {n.pool} / {flavorOfPool.get(`${n.name?.split('/')[1]}/${n.pool}`) ?? '—'}
                    </td>
                    <td>
                      {n.capacity?.gpus ?? 0} {n.capacity?.gpuModel}
                    </td>
                    <td>
                      {formatCpu(n.capacity?.cpuMillis)} / {formatBytes(n.capacity?.memoryBytes)}
                    </td>
                    <td className="small">{[n.topology?.block, n.topology?.rack].filter(Boolean).join(' / ') || '—'}</td>
                    <td>
                      <Badge tone={NODE_TONE[n.state ?? ''] ?? 'muted'}>{enumLabel(n.state ?? 'NODE_STATE_UNSPECIFIED', 'NODE_STATE_')}</Badge>
                      {n.stateMessage && <div className="small">{n.stateMessage}</div>}
                    </td>
                    <td className="small">{formatRelative(n.reportTime)}</td>
                  </tr>
                ))}
              </tbody>
            </table>
            {shownNodes.length > 2000 && <p className="muted small">First 2,000 shown; filter to see others.</p>}
          </div>
        )}
      </section>
    </>
  );
}
