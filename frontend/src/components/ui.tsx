/** Small building blocks shared by the pages. */

import { useEffect, useRef, useState } from "react";
import type { ReactNode } from "react";
import { errorMessage } from "../api/problem";

/** An error in words, announced to screen readers. */
export function ErrorNote({ error, prefix }: { error: unknown; prefix?: string }) {
  if (error === null || error === undefined) return null;
  return (
    <p role="alert" className="error">
      {prefix ? <strong>{prefix} </strong> : null}
      {errorMessage(error)}
    </p>
  );
}

export function Loading({ what = "Loading" }: { what?: string }) {
  return (
    <p className="muted" role="status">
      {what}…
    </p>
  );
}

/** A job's (or candidate's) state as a coloured label. */
export function StateBadge({ state }: { state: string | null | undefined }) {
  const value = state ?? "unknown";
  return <span className={`badge badge-${value.replace(/[^a-z_-]/gi, "")}`}>{value}</span>;
}

interface ConfirmButtonProps {
  /** The button's name ("Delete", "Cancel", "Revoke"). */
  label: string;
  /** What confirming does, asked in words. */
  question: string;
  /** The confirming button's name ("Yes, delete dataset"). */
  confirmLabel: string;
  keepLabel?: string;
  onConfirm: () => void;
  disabled?: boolean;
  danger?: boolean;
}

/** A button that asks before it acts: its click shows the question with a confirming and a keeping button (focus
 * moves to the confirming one; Escape keeps). */
export function ConfirmButton({ label, question, confirmLabel, keepLabel = "No, keep it", onConfirm, disabled,
  danger = true }: ConfirmButtonProps) {
  const [asking, setAsking] = useState(false);
  const confirm = useRef<HTMLButtonElement>(null);
  const opener = useRef<HTMLButtonElement>(null);
  const reopened = useRef(false);

  useEffect(() => {
    if (asking) confirm.current?.focus();
    else if (reopened.current) opener.current?.focus();
  }, [asking]);

  if (!asking) {
    return (
      <button type="button" ref={opener} className={danger ? "danger" : undefined} disabled={disabled}
        onClick={() => setAsking(true)}>
        {label}
      </button>
    );
  }
  const keep = () => {
    reopened.current = true;
    setAsking(false);
  };
  return (
    <span className="confirm" role="group" aria-label={question}
      onKeyDown={(event) => {
        if (event.key === "Escape") keep();
      }}>
      <span>{question}</span>
      <button type="button" ref={confirm} className={danger ? "danger" : undefined}
        onClick={() => {
          setAsking(false);
          onConfirm();
        }}>
        {confirmLabel}
      </button>
      <button type="button" onClick={keep}>
        {keepLabel}
      </button>
    </span>
  );
}

/** A term and its value in a description list. */
export function Fact({ term, children }: { term: string; children: ReactNode }) {
  return (
    <div className="fact">
      <dt>{term}</dt>
      <dd>{children}</dd>
    </div>
  );
}

/** A panel with a heading. */
export function Section({ title, children, actions, id }: { title: string; children: ReactNode; actions?: ReactNode; id?: string }) {
  return (
    <section className="panel" aria-labelledby={id ? `${id}-title` : undefined}>
      <div className="panel-head">
        <h2 id={id ? `${id}-title` : undefined}>{title}</h2>
        {actions ? <div className="actions">{actions}</div> : null}
      </div>
      {children}
    </section>
  );
}
