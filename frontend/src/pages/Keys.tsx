/** The caller's API keys: list, create (its secret shown this once), revoke. */

import { useMutation, useQueryClient } from "@tanstack/react-query";
import { useId, useState } from "react";
import type { SubmitEvent } from "react";
import { unwrap } from "../api/client";
import { keys, useApiKeys } from "../api/queries";
import type { ApiKeyCreated } from "../api/types";
import { useAuth } from "../auth/session";
import { ConfirmButton, ErrorNote, Loading, Section } from "../components/ui";
import { formatDate } from "../lib/format";
import { useTitle } from "../lib/useTitle";

function Secret({ created, onDone }: { created: ApiKeyCreated; onDone: () => void }) {
  const [copied, setCopied] = useState(false);
  return (
    <div className="panel secret" role="status">
      <p>
        <strong>The key {created.name}</strong> — copy it now: it is shown this once and never again.
      </p>
      <p>
        <code className="secret-value">{created.key}</code>
      </p>
      <div className="row">
        <button type="button"
          onClick={() => {
            void navigator.clipboard.writeText(created.key).then(() => setCopied(true));
          }}>
          {copied ? "Copied" : "Copy key"}
        </button>
        <button type="button" onClick={onDone}>
          Done
        </button>
      </div>
    </div>
  );
}

export default function KeysPage() {
  useTitle("API keys");
  const list = useApiKeys();
  const { api } = useAuth();
  const queryClient = useQueryClient();
  const id = useId();
  const [name, setName] = useState("");
  const [created, setCreated] = useState<ApiKeyCreated | null>(null);

  const create = useMutation({
    mutationFn: (keyName: string) => unwrap(api.POST("/api/v1/me/keys", { body: { name: keyName } })),
    onSuccess: (key) => {
      setCreated(key);
      setName("");
      void queryClient.invalidateQueries({ queryKey: keys.apiKeys });
    },
  });
  const revoke = useMutation({
    mutationFn: (keyId: string) => unwrap(api.DELETE("/api/v1/me/keys/{key_id}", { params: { path: { key_id: keyId } } })),
    onSuccess: () => queryClient.invalidateQueries({ queryKey: keys.apiKeys }),
  });

  function submit(event: SubmitEvent<HTMLFormElement>) {
    event.preventDefault();
    if (name.trim()) create.mutate(name.trim());
  }

  return (
    <>
      <h1>API keys</h1>
      <p className="muted">
        Keys authenticate scripts and the command line (<code>Authorization: Bearer …</code>). Revoking a key stops it at
        once, and ends the browser sessions signed in with it (this one too, if it is the key you signed in with).
      </p>
      <form className="panel row" onSubmit={submit} noValidate>
        <div className="field">
          <label htmlFor={`${id}-name`}>Key name</label>
          <input id={`${id}-name`} value={name} maxLength={200} required placeholder="what or who uses it"
            onChange={(event) => setName(event.target.value)} />
        </div>
        <button type="submit" className="primary" disabled={create.isPending || !name.trim()}>
          Create key
        </button>
      </form>
      <ErrorNote error={create.error} prefix="Not created:" />
      {created ? <Secret created={created} onDone={() => setCreated(null)} /> : null}
      <Section title="Your keys">
        {list.isPending ? <Loading what="Loading keys" /> : null}
        <ErrorNote error={list.error} />
        <ErrorNote error={revoke.error} prefix="Not revoked:" />
        {list.data?.length === 0 ? <p>No keys.</p> : null}
        {list.data && list.data.length > 0 ? (
          <div className="table-scroll">
            <table>
              <thead>
                <tr>
                  <th scope="col">Name</th>
                  <th scope="col">Starts with</th>
                  <th scope="col">Created</th>
                  <th scope="col">Last used</th>
                  <th scope="col"><span className="visually-hidden">Actions</span></th>
                </tr>
              </thead>
              <tbody>
                {list.data.map((key) => (
                  <tr key={key.id}>
                    <td>{key.name}</td>
                    <td>
                      <code>{key.prefix}…</code>
                    </td>
                    <td>{formatDate(key.created_at)}</td>
                    <td>{key.last_used_at ? formatDate(key.last_used_at) : "never"}</td>
                    <td>
                      <ConfirmButton label="Revoke" question={`Revoke the key ${key.name}? Scripts using it stop working.`}
                        confirmLabel="Yes, revoke" onConfirm={() => revoke.mutate(key.id)} disabled={revoke.isPending} />
                    </td>
                  </tr>
                ))}
              </tbody>
            </table>
          </div>
        ) : null}
      </Section>
    </>
  );
}
