import { Suspense, useState } from 'react';
import { NavLink, Outlet, useLocation, useNavigate, useParams } from 'react-router';
import { useSession } from '../session';
import { capabilities, describeBindings } from '../lib/roles';
import { applyTheme, storedTheme, type Theme } from '../theme';
import { Loading } from './States';

export function tenantLabel(t: string): string {
  return t === '-' ? 'All tenants' : t;
}

export function Layout() {
  const s = useSession();
  const params = useParams();
  const nav = useNavigate();
  const loc = useLocation();
  const [theme, setTheme] = useState<Theme>(() => storedTheme());
  const tenant = params.tenant ?? s.tenants.find((t) => t !== '-') ?? s.tenants[0] ?? '';
  const caps = capabilities(s.caller, tenant);
  const base = `/t/${encodeURIComponent(tenant)}`;
  const tenantChoices = s.tenants.includes(tenant) || !tenant ? s.tenants : [tenant, ...s.tenants];

  const switchTenant = (t: string) => {
    // Keep the page (jobs, queues...), drop what belongs to the old tenant (a job id, filters).
    const section = loc.pathname.split('/')[3] ?? 'jobs';
    nav(`/t/${encodeURIComponent(t)}/${section}`);
  };

  return (
    <div className="app">
      <a className="skip-link" href="#main">
        Skip to content
      </a>
      <header className="topbar">
        <span className="brand">Trainyard</span>
        <nav aria-label="Main">
          {tenant && (
            <ul>
              {caps.readJobs && (
                <li>
                  <NavLink to={`${base}/jobs`}>Jobs</NavLink>
                </li>
              )}
              {caps.mutateJobs && tenant !== '-' && (
                <li>
                  <NavLink to={`${base}/submit`}>Submit</NavLink>
                </li>
              )}
              {caps.readJobs && (
                <li>
                  <NavLink to={`${base}/queues`}>Queues</NavLink>
                </li>
              )}
              <li>
                <NavLink to={`${base}/clusters`}>Clusters</NavLink>
              </li>
              {caps.readCosts && (
                <li>
                  <NavLink to={`${base}/costs`}>Costs</NavLink>
                </li>
              )}
            </ul>
          )}
        </nav>
        <div className="topbar-right">
          {tenantChoices.length > 0 && (
            <label className="inline-field">
              <span>Tenant</span>
              <select
                value={tenant}
                onChange={(e) => switchTenant(e.target.value)}
                data-testid="tenant-switcher"
              >
                {tenantChoices.map((t) => (
                  <option key={t} value={t}>
                    {tenantLabel(t)}
                  </option>
                ))}
              </select>
            </label>
          )}
          <span className="principal" title={describeBindings(s.caller)} data-testid="principal">
            {s.caller?.principal}
          </span>
          <button
            type="button"
            onClick={() => {
              const next = theme === 'dark' ? 'light' : 'dark';
              applyTheme(next);
              setTheme(next);
            }}
            aria-pressed={theme === 'dark'}
            data-testid="theme-toggle"
          >
            {theme === 'dark' ? 'Light theme' : 'Dark theme'}
          </button>
          <button
            type="button"
            onClick={() => {
              s.signOut();
              nav('/signin');
            }}
            data-testid="sign-out"
          >
            Sign out
          </button>
        </div>
      </header>
      <main id="main" className="page" tabIndex={-1}>
        <Suspense fallback={<Loading label="Loading the page…" />}>
          <Outlet />
        </Suspense>
      </main>
    </div>
  );
}
