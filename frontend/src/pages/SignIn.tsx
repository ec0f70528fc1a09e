/** Signing in with an API key, which opens a cookie session (`POST /api/v1/session`). The key goes to the API once
 * and is then dropped: it is never written to storage, and the field is cleared. */

import { useId, useState } from "react";
import type { SubmitEvent } from "react";
import { errorMessage } from "../api/problem";
import { useAuth } from "../auth/session";
import { useTitle } from "../lib/useTitle";

export function SignIn({ notice }: { notice: string | null }) {
  useTitle("Sign in");
  const { signIn } = useAuth();
  const [apiKey, setApiKey] = useState("");
  const [error, setError] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);
  const id = useId();

  async function submit(event: SubmitEvent<HTMLFormElement>) {
    event.preventDefault();
    if (!apiKey.trim()) {
      setError("Enter an API key.");
      return;
    }
    setBusy(true);
    setError(null);
    try {
      await signIn(apiKey.trim());
      setApiKey("");
    } catch (caught) {
      setError(errorMessage(caught));
    } finally {
      setBusy(false);
    }
  }

  return (
    <main id="main" className="page signin">
      <h1>netsynth</h1>
      <p className="muted">Upload a labelled dataset, get a trained, compressed, explained network.</p>
      <form onSubmit={(event) => void submit(event)} className="panel stack" noValidate>
        <h2>Sign in</h2>
        {notice ? <p role="status">{notice}</p> : null}
        <label htmlFor={`${id}-key`}>API key</label>
        <input id={`${id}-key`} name="api-key" type="password" autoComplete="off" spellCheck={false} value={apiKey}
          onChange={(event) => setApiKey(event.target.value)} aria-describedby={`${id}-hint`} aria-invalid={error !== null} />
        <p id={`${id}-hint`} className="hint">
          The key <code>make run</code> printed, or one from <code>netsynth user create</code>. It is sent once to open
          a session and is not stored in this browser.
        </p>
        {error ? (
          <p role="alert" className="error">
            {error}
          </p>
        ) : null}
        <button type="submit" disabled={busy}>
          {busy ? "Signing in…" : "Sign in"}
        </button>
      </form>
    </main>
  );
}
