/** Trying a model: an image (file input or drop) or a text, sent to `POST /models/{id}/predict`; the class
 * probabilities come back sorted, each with a bar. */

import { useMutation } from "@tanstack/react-query";
import { useEffect, useId, useRef, useState } from "react";
import type { DragEvent, SubmitEvent } from "react";
import { request, unwrap } from "../api/client";
import type { Model, PredictOut } from "../api/types";
import { useAuth } from "../auth/session";
import { formatPercent } from "../lib/format";
import { ErrorNote, Section } from "./ui";

function Probabilities({ result }: { result: PredictOut }) {
  const prediction = result.predictions[0];
  if (!prediction) return null;
  const ranked = result.classes
    .map((name, i) => ({ name, p: prediction.probabilities[i] ?? 0 }))
    .sort((a, b) => b.p - a.p);
  return (
    <div className="stack" aria-live="polite">
      <p>
        Predicted: <strong>{prediction.label}</strong> ({formatPercent(ranked[0]?.p ?? null, 1)})
      </p>
      <ol className="probabilities" aria-label="Class probabilities">
        {ranked.slice(0, 20).map((c) => (
          <li key={c.name}>
            <span className="prob-name">{c.name}</span>
            <span className="prob-bar" aria-hidden="true">
              <span style={{ width: `${Math.max(0.5, c.p * 100)}%` }} />
            </span>
            <span className="prob-value">{formatPercent(c.p, 1)}</span>
          </li>
        ))}
      </ol>
      {ranked.length > 20 ? <p className="muted">and {ranked.length - 20} more classes</p> : null}
    </div>
  );
}

export function TryIt({ model }: { model: Model }) {
  const { api, csrfToken, expire } = useAuth();
  const id = useId();
  const [chosen, setChosen] = useState<{ file: File; url: string } | null>(null);
  const preview = useRef<string | null>(null);
  const [text, setText] = useState("");
  const [dragging, setDragging] = useState(false);
  const image = model.preprocessing === "image";

  useEffect(
    () => () => {
      if (preview.current) URL.revokeObjectURL(preview.current);
    },
    [],
  );

  /** Take `next` as the image to send, with an object URL to show it (the previous one is released). */
  function pick(next: File | null) {
    if (preview.current) URL.revokeObjectURL(preview.current);
    preview.current = next ? URL.createObjectURL(next) : null;
    setChosen(next && preview.current ? { file: next, url: preview.current } : null);
    predict.reset();
  }

  const predict = useMutation({
    mutationFn: async (): Promise<PredictOut> => {
      if (image) {
        if (!chosen) throw new Error("Choose an image first.");
        const form = new FormData();
        form.append("files", chosen.file, chosen.file.name);
        return request<PredictOut>(`/api/v1/models/${encodeURIComponent(model.id)}/predict`, {
          method: "POST",
          body: form,
          csrfToken,
          onUnauthorized: expire,
        });
      }
      if (!text.trim()) throw new Error("Type a text first.");
      return unwrap(api.POST("/api/v1/models/{model_id}/predict", { params: { path: { model_id: model.id } }, body: { texts: [text] } }));
    },
  });

  function submit(event: SubmitEvent<HTMLFormElement>) {
    event.preventDefault();
    predict.mutate();
  }

  function drop(event: DragEvent<HTMLDivElement>) {
    event.preventDefault();
    setDragging(false);
    const dropped = event.dataTransfer.files[0];
    if (dropped) pick(dropped);
  }

  return (
    <Section title="Try it">
      <form className="stack" onSubmit={submit} noValidate>
        {image ? (
          <div className={`dropzone${dragging ? " dragging" : ""}`}
            onDragOver={(event) => {
              event.preventDefault();
              setDragging(true);
            }}
            onDragLeave={() => setDragging(false)}
            onDrop={drop}>
            <label htmlFor={`${id}-image`}>Image</label>
            <input id={`${id}-image`} type="file" accept="image/png,image/jpeg"
              onChange={(event) => pick(event.target.files?.[0] ?? null)} aria-describedby={`${id}-image-hint`} />
            <p id={`${id}-image-hint`} className="hint">
              A PNG or JPEG (or drop one here); it is brought to the model's input size the way training did.
            </p>
            {chosen ? <img className="preview" src={chosen.url} alt={`The chosen image, ${chosen.file.name}`} /> : null}
          </div>
        ) : (
          <div className="field">
            <label htmlFor={`${id}-text`}>Text</label>
            <textarea id={`${id}-text`} rows={4} value={text} maxLength={10000}
              onChange={(event) => {
                setText(event.target.value);
                predict.reset();
              }} />
          </div>
        )}
        <div className="row">
          <button type="submit" className="primary" disabled={predict.isPending}>
            Predict
          </button>
        </div>
      </form>
      <ErrorNote error={predict.error} />
      {predict.data ? <Probabilities result={predict.data} /> : null}
    </Section>
  );
}
