import { lazy } from 'react';
import { Navigate, Outlet, createBrowserRouter, useLocation } from 'react-router';
import { Layout } from './components/Layout';
import { Loading, ErrorBox } from './components/States';
import { useSession } from './session';
import { capabilities } from './lib/roles';
import { SignInPage } from './pages/SignIn';
// Pages load on first visit (the jobs table, the YAML library and the chart library are
// separate chunks).
const JobsPage = lazy(() => import('./pages/Jobs').then((m) => ({ default: m.JobsPage })));
const JobPage = lazy(() => import('./pages/Job').then((m) => ({ default: m.JobPage })));
const SubmitPage = lazy(() => import('./pages/Submit').then((m) => ({ default: m.SubmitPage })));
const QueuesPage = lazy(() => import('./pages/Queues').then((m) => ({ default: m.QueuesPage })));
const ClustersPage = lazy(() => import('./pages/Clusters').then((m) => ({ default: m.ClustersPage })));
const CostsPage = lazy(() => import('./pages/Costs').then((m) => ({ default: m.CostsPage })));
import { NotFoundPage } from './pages/NotFound';

function RequireSession() {
  const s = useSession();
  const loc = useLocation();
  if (!s.token) return <Navigate to="/signin" replace state={{ from: loc.pathname + loc.search }} />;
  if (s.loading) return <Loading label="Checking your token…" />;
  if (s.error || !s.caller)
    return (
      <main className="page">
        <ErrorBox error={s.error} title="Could not read who you are" retry={s.signOut} />
      </main>
    );
  return <Outlet />;
}

function Home() {
  const s = useSession();
  const first = s.tenants.find((t) => t !== '-') ?? s.tenants[0];
  if (!first) {
    return (
      <main className="page">
        <h1>No tenant</h1>
        <p>
          Signed in as <span className="mono">{s.caller?.principal}</span>, which holds no role in any tenant. Ask a
          tenant admin for a role binding.
        </p>
      </main>
    );
  }
  const caps = capabilities(s.caller, first);
  const page = caps.readJobs ? 'jobs' : caps.readCosts ? 'costs' : 'clusters';
  return <Navigate to={`/t/${encodeURIComponent(first)}/${page}`} replace />;
}

export const router = createBrowserRouter([
  { path: '/signin', element: <SignInPage /> },
  {
    element: <RequireSession />,
    children: [
      {
        element: <Layout />,
        children: [
          { path: '/', element: <Home /> },
          { path: '/t/:tenant/jobs', element: <JobsPage /> },
          { path: '/t/:tenant/jobs/:jobId', element: <JobPage /> },
          { path: '/t/:tenant/submit', element: <SubmitPage /> },
          { path: '/t/:tenant/queues', element: <QueuesPage /> },
          { path: '/t/:tenant/clusters', element: <ClustersPage /> },
          { path: '/t/:tenant/costs', element: <CostsPage /> },
          { path: '*', element: <NotFoundPage /> },
        ],
      },
    ],
  },
]);
