/** Uploading a dataset: a file input and a drop zone, optional name and resize, a real progress bar (XMLHttpRequest
 * upload events), and the service's refusal in words. */

import { useEffect, useId, useRef, useState } from "react";
import type { DragEvent, SubmitEvent } from "react";
import { Link } from "react-router";
import { ApiError, errorMessage, reasonInWords } from "../api/problem";
import type { Dataset } from "../api/types";
import { uploadDataset } from "../api/upload";
import type { Upload } from "../api/upload";
import { useAuth } from "../auth/session";
import { formatBytes } from "../lib/format";

type Phase =
  | { kind: "idle" }
  | { kind: "sending"; loaded: number; total: number | null }
  | { kind: "checking" }
  | { kind: "refused"; error: unknown }
  | { kind: "done"; dataset: Dataset };

export function UploadForm({ onUploaded }: { onUploaded: (dataset: Dataset) => void }) {
  const { csrfToken, expire } = useAuth();
  const [file, setFile] = useState<File | null>(null);
  const [name, setName] = useState("");
  const [resize, setResize] = useState("");
  const [phase, setPhase] = useState<Phase>({ kind: "idle" });
  const [dragging, setDragging] = useState(false);
  const input = useRef<HTMLInputElement>(null);
  const upload = useRef<Upload | null>(null);
  const id = useId();

  useEffect(() => () => upload.current?.abort(), []);

  function choose(files: FileList | null) {
    const chosen = files?.[0] ?? null;
    setFile(chosen);
    if (chosen) setPhase({ kind: "idle" });
  }

  function drop(event: DragEvent<HTMLDivElement>) {
    event.preventDefault();
    setDragging(false);
    const files = event.dataTransfer.files;
    if (files.length > 0) {
      if (input.current) input.current.files = files;
      choose(files);
    }
  }

  async function submit(event: SubmitEvent<HTMLFormElement>) {
    event.preventDefault();
    if (!file) {
      setPhase({ kind: "refused", error: new Error("Choose a dataset file first.") });
      return;
    }
    setPhase({ kind: "sending", loaded: 0, total: file.size });
    const started = uploadDataset({
      file,
      name,
      resize,
      csrfToken,
      onProgress: (loaded, total) => setPhase({ kind: "sending", loaded, total }),
      onSent: () => setPhase({ kind: "checking" }),
      onUnauthorized: expire,
    });
    upload.current = started;
    try {
      const dataset = await started.done;
      setPhase({ kind: "done", dataset });
      setFile(null);
      setName("");
      setResize("");
      if (input.current) input.current.value = "";
      onUploaded(dataset);
    } catch (error) {
      setPhase({ kind: "refused", error });
    } finally {
      upload.current = null;
    }
  }

  const busy = phase.kind === "sending" || phase.kind === "checking";
  const percent =
    phase.kind === "sending" && phase.total ? Math.min(100, Math.round((phase.loaded / phase.total) * 100)) : phase.kind === "checking" ? 100 : 0;

  return (
    <form className="panel stack" onSubmit={(event) => void submit(event)} noValidate aria-labelledby={`${id}-title`}>
      <h2 id={`${id}-title`}>Upload a dataset</h2>
      <div
        className={`dropzone${dragging ? " dragging" : ""}`}
        onDragOver={(event) => {
          event.preventDefault();
          setDragging(true);
        }}
        onDragLeave={() => setDragging(false)}
        onDrop={drop}
        data-testid="dropzone"
      >
        <label htmlFor={`${id}-file`}>Dataset file</label>
        <input id={`${id}-file`} ref={input} type="file" name="file" accept=".zip,.npz,.csv,.tsv,.txt"
          aria-describedby={`${id}-formats`} onChange={(event) => choose(event.target.files)} disabled={busy} />
        <p id={`${id}-formats`} className="hint">
          Or drop a file here. A zip of class folders of PNG/JPEG images, an <code>.npz</code> with <code>x</code> and{" "}
          <code>y</code>, a CSV with a <code>text,label</code> header, or TSV <code>text⇥label</code> lines.
        </p>
        {file ? (
          <p>
            Chosen: <strong>{file.name}</strong> ({formatBytes(file.size)})
          </p>
        ) : null}
      </div>
      <div className="row top">
        <div className="field">
          <label htmlFor={`${id}-name`}>Name (optional)</label>
          <input id={`${id}-name`} value={name} maxLength={200} onChange={(event) => setName(event.target.value)}
            placeholder="the file name" disabled={busy} />
        </div>
        <div className="field">
          <label htmlFor={`${id}-resize`}>Resize images (optional)</label>
          <input id={`${id}-resize`} value={resize} onChange={(event) => setResize(event.target.value)}
            placeholder="HEIGHTxWIDTH, e.g. 32x32" pattern="\d+\s*[x,]\s*\d+" disabled={busy}
            aria-describedby={`${id}-resize-hint`} />
          <p id={`${id}-resize-hint`} className="hint">
            Default: native size up to 64 px, else the median size capped at 64 px (centre crop).
          </p>
        </div>
      </div>
      <div className="row">
        <button type="submit" className="primary" disabled={busy}>
          Upload
        </button>
        {busy ? (
          <button type="button" onClick={() => upload.current?.abort()}>
            Stop upload
          </button>
        ) : null}
      </div>
      {phase.kind === "sending" || phase.kind === "checking" ? (
        <div className="progress-line">
          <progress id={`${id}-progress`} max={100} value={percent} aria-label="Upload progress"
            aria-valuenow={percent} aria-valuemin={0} aria-valuemax={100} />
          <span role="status">
            {phase.kind === "sending"
              ? `${percent} % sent (${formatBytes(phase.loaded)}${phase.total ? ` of ${formatBytes(phase.total)}` : ""})`
              : "Sent; the service is validating and profiling the file…"}
          </span>
        </div>
      ) : null}
      {phase.kind === "refused" ? <Refusal error={phase.error} /> : null}
      {phase.kind === "done" ? (
        <p role="status" className="success">
          Uploaded <strong>{phase.dataset.name}</strong>: {phase.dataset.sample_count.toLocaleString("en-US")} samples in{" "}
          {phase.dataset.classes.length} classes. <Link to={`/datasets/${phase.dataset.id}`}>Open its profile</Link>
        </p>
      ) : null}
    </form>
  );
}

function Refusal({ error }: { error: unknown }) {
  if (error instanceof DOMException && error.name === "AbortError") {
    return <p role="alert" className="error">The upload was stopped; nothing was kept.</p>;
  }
  if (error instanceof ApiError && error.reason) {
    return (
      <div role="alert" className="error">
        <p>
          <strong>The dataset was refused: {reasonInWords(error.reason)}.</strong> <span className="muted">({error.reason})</span>
        </p>
        <p>{error.message}</p>
      </div>
    );
  }
  return (
    <p role="alert" className="error">
      {error instanceof ApiError ? "The upload was refused: " : ""}
      {errorMessage(error)}
    </p>
  );
}
