import type { ReactNode } from 'react';
import { ApiError, errorText } from '../api/errors';

export function Loading({ label = 'Loading…' }: { label?: string }) {
  return (
    <div className="state state-loading" role="status" aria-live="polite">
      <span className="spinner" aria-hidden="true" />
      {label}
    </div>
  );
}

export function ErrorBox({ error, retry, title }: { error: unknown; retry?: () => void; title?: string }) {
  let hint = '';
  if (error instanceof ApiError) {
    if (error.permissionDenied) hint = 'Your roles do not allow this. Ask a tenant admin for access.';
    else if (error.notFound) hint = 'It does not exist, or you have no role in its tenant.';
    else if (error.httpStatus === 0) hint = 'Check that the gateway is running.';
    else if (error.httpStatus === 501 || error.status === 'UNIMPLEMENTED')
      hint = 'This server does not offer it.';
  }
  return (
    <div className="state state-error" role="alert" data-testid="error">
      <strong>{title ?? 'Something went wrong'}</strong>
      <p className="mono">{errorText(error)}</p>
      {hint && <p>{hint}</p>}
      {retry && (
        <button type="button" onClick={retry}>
          Try again
        </button>
      )}
    </div>
  );
}

export function Empty({ children }: { children: ReactNode }) {
  return (
    <div className="state state-empty" data-testid="empty">
      {children}
    </div>
  );
}
