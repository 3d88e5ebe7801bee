// What the caller may see and do, from its role bindings (the server enforces it anyway).
import type { Caller } from '../gen/trainyard/v1/admin';

export type RoleName =
  | 'ROLE_VIEWER'
  | 'ROLE_MEMBER'
  | 'ROLE_TENANT_ADMIN'
  | 'ROLE_FINANCE'
  | 'ROLE_PLATFORM_ADMIN';

export interface Capabilities {
  /** Jobs, queues, projects of the tenant. */
  readJobs: boolean;
  /** Submit, cancel, hold, release. */
  mutateJobs: boolean;
  /** Reports, budgets, invoices, exports. */
  readCosts: boolean;
  /** Every tenant at once ("tenants/-"). */
  platform: boolean;
}

function rolesOn(caller: Caller | undefined, tenant: string): Set<string> {
  const roles = new Set<string>();
  for (const b of caller?.bindings ?? []) {
    const role = String(b.role ?? '');
    if (!b.tenant) {
      // Platform-wide bindings (platform-admin; platform finance).
      roles.add(`platform:${role}`);
    } else if (b.tenant === tenant || tenant === '-') {
      roles.add(role);
    }
  }
  return roles;
}

export function capabilities(caller: Caller | undefined, tenant: string): Capabilities {
  const r = rolesOn(caller, tenant);
  const admin = r.has('platform:ROLE_PLATFORM_ADMIN') || r.has('ROLE_PLATFORM_ADMIN');
  const platformFinance = r.has('platform:ROLE_FINANCE');
  const tenantRead =
    r.has('ROLE_VIEWER') || r.has('ROLE_MEMBER') || r.has('ROLE_TENANT_ADMIN') || r.has('ROLE_FINANCE');
  return {
    readJobs: admin || tenantRead,
    mutateJobs: admin || r.has('ROLE_MEMBER') || r.has('ROLE_TENANT_ADMIN'),
    readCosts: admin || platformFinance || r.has('ROLE_FINANCE') || r.has('ROLE_TENANT_ADMIN'),
    platform: admin || platformFinance,
  };
}

/** Tenants the caller is bound in, sorted; platform-wide callers also see "-" (all). */
export function boundTenants(caller: Caller | undefined): string[] {
  const set = new Set<string>();
  for (const b of caller?.bindings ?? []) if (b.tenant) set.add(b.tenant);
  return [...set].sort();
}

export function isPlatformAdmin(caller: Caller | undefined): boolean {
  return (caller?.bindings ?? []).some((b) => String(b.role) === 'ROLE_PLATFORM_ADMIN');
}

export function isPlatformWide(caller: Caller | undefined): boolean {
  return (caller?.bindings ?? []).some(
    (b) => !b.tenant && (String(b.role) === 'ROLE_PLATFORM_ADMIN' || String(b.role) === 'ROLE_FINANCE'),
  );
}

/** Short role list for the header: "member@acme, finance (platform)". */
export function describeBindings(caller: Caller | undefined): string {
  return (caller?.bindings ?? [])
    .map((b) => {
      const role = String(b.role ?? '')
        .replace(/^ROLE_/, '')
        .toLowerCase()
        .replace(/_/g, '-');
      return b.tenant ? `${role}@${b.tenant}` : `${role} (platform)`;
    })
    .join(', ');
}
