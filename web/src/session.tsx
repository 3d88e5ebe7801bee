// The signed-in caller: token in sessionStorage, the Caller from GET /v1/whoami.
import { createContext, useCallback, useContext, useEffect, useMemo, useState, type ReactNode } from 'react';
import { useQuery, useQueryClient } from '@tanstack/react-query';
import type { Caller } from './gen/trainyard/v1/admin';
import { clearToken, getToken, listTenants, setToken, setUnauthenticatedHandler, whoami } from './api/client';
import { boundTenants, isPlatformAdmin, isPlatformWide } from './lib/roles';

interface Session {
  token: string | null;
  caller: Caller | undefined;
  loading: boolean;
  error: unknown;
  /** Tenants the caller can pick; "-" (every tenant) first for platform-wide callers. */
  tenants: string[];
  signIn: (token: string, caller: Caller) => void;
  signOut: () => void;
}

const SessionContext = createContext<Session | undefined>(undefined);

export function SessionProvider({ children }: { children: ReactNode }) {
  const [token, setTok] = useState<string | null>(() => getToken());
  const qc = useQueryClient();
  const who = useQuery({
    queryKey: ['whoami', token],
    queryFn: () => whoami(),
    enabled: !!token,
    staleTime: 60_000,
    retry: false,
  });
  const admin = isPlatformAdmin(who.data);
  const tenantsQ = useQuery({
    queryKey: ['tenants'],
    queryFn: listTenants,
    enabled: !!token && admin,
    staleTime: 60_000,
  });

  const signOut = useCallback(() => {
    clearToken();
    setTok(null);
    qc.clear();
  }, [qc]);

  useEffect(() => {
    setUnauthenticatedHandler(signOut);
    return () => setUnauthenticatedHandler(undefined);
  }, [signOut]);

  const signIn = useCallback(
    (t: string, caller: Caller) => {
      setToken(t);
      qc.setQueryData(['whoami', t], caller);
      setTok(t);
    },
    [qc],
  );

  const tenants = useMemo(() => {
    const set = new Set(boundTenants(who.data));
    for (const t of tenantsQ.data?.tenants ?? []) {
      const id = t.name?.replace(/^tenants\//, '');
      if (id) set.add(id);
    }
    const list = [...set].sort();
    return isPlatformWide(who.data) ? ['-', ...list] : list;
  }, [who.data, tenantsQ.data]);

  const value: Session = {
    token,
    caller: who.data,
    loading: !!token && who.isPending,
    error: who.error,
    tenants,
    signIn,
    signOut,
  };
  return <SessionContext.Provider value={value}>{children}</SessionContext.Provider>;
}

export function useSession(): Session {
  const s = useContext(SessionContext);
  if (!s) throw new Error('useSession outside SessionProvider');
  return s;
}
