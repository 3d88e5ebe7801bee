import { useState } from 'react';
import { useLocation, useNavigate } from 'react-router';
import { whoami } from '../api/client';
import { ApiError, errorText } from '../api/errors';
import { useSession } from '../session';
import { describeBindings } from '../lib/roles';

export function SignInPage() {
  const s = useSession();
  const nav = useNavigate();
  const loc = useLocation();
  const [token, setToken] = useState('');
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState('');
  const from = (loc.state as { from?: string } | null)?.from;

  const submit = async (e: React.FormEvent) => {
    e.preventDefault();
    const t = token.trim();
    if (!t) {
      setError('Paste an API token.');
      return;
    }
    setBusy(true);
    setError('');
    try {
      const caller = await whoami(t);
      s.signIn(t, caller);
      setToken('');
      nav(from && from.startsWith('/') ? from : '/', { replace: true });
    } catch (err) {
      setError(
        err instanceof ApiError && err.unauthenticated
          ? 'The server does not accept this token (unknown, expired or revoked).'
          : errorText(err),
      );
    } finally {
      setBusy(false);
    }
  };

  return (
    <main className="signin" id="main">
      <form className="card signin-card" onSubmit={submit} aria-labelledby="signin-title">
        <h1 id="signin-title">Sign in to Trainyard</h1>
        <p>
          Use an API token (<span className="mono">yard token create</span>). It is kept in this browser tab only and
          is forgotten when the tab closes.
        </p>
        {s.caller && (
          <p className="muted">
            Signed in as {s.caller.principal} ({describeBindings(s.caller)}).
          </p>
        )}
        <label className="field">
          <span>API token</span>
          <input
            type="password"
            autoComplete="off"
            spellCheck={false}
            value={token}
            onChange={(e) => setToken(e.target.value)}
            aria-invalid={error ? true : undefined}
            aria-describedby={error ? 'signin-error' : undefined}
            data-testid="token-input"
          />
        </label>
        {error && (
          <p id="signin-error" className="field-error" role="alert">
            {error}
          </p>
        )}
        <button type="submit" className="primary" disabled={busy} data-testid="sign-in">
          {busy ? 'Checking…' : 'Sign in'}
        </button>
      </form>
    </main>
  );
}
