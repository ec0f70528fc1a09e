/** A job's live event log over Server-Sent Events (`GET /api/v1/jobs/{id}/events`, cookie-authenticated).
 *
 * Each SSE event has `id` = the event's seq, `event` = its kind and `data` = the event as JSON (`{seq, at, kind,
 * payload}`; a bare payload is accepted too). EventSource reconnects by itself with `Last-Event-ID`; when it gives
 * up (the stream answered an error), a new one resumes with `?after=<last seq>`. The stream's `end` event closes it.
 */

import { useEffect, useRef, useState } from "react";
import type { JobEvent } from "../api/types";
import { isObject, num, obj, str } from "./json";

/** The kinds a job's log holds (EventSource only hands over the kinds it listens to). */
export const EVENT_KINDS = [
  "queued", "attempt", "requeued", "stage", "split", "candidate", "leader_ahead", "search_done", "augmentation",
  "final", "final_fallback", "ensemble", "refit", "warning", "compress_round", "compress_filters", "compress_buckets",
  "compress_retrain", "compress_prune", "compress_skipped", "compress_failed", "compressed", "report", "time_limit",
  "cancel_requested", "cancelled", "succeeded", "failed", "message",
] as const;

export type Connection = "connecting" | "open" | "reconnecting" | "ended";
export const RETRY_MS = 5000;
const FLUSH_MS = 60;

/** The event an SSE message carries, or null when its data is not JSON. */
export function parseEvent(message: MessageEvent<unknown>): JobEvent | null {
  let data: unknown;
  try {
    data = typeof message.data === "string" ? JSON.parse(message.data) : message.data;
  } catch {
    return null;
  }
  const seq = Number(message.lastEventId);
  if (isObject(data) && typeof data.kind === "string" && isObject(data.payload)) {
    return { seq: num(data.seq) ?? seq, at: str(data.at), kind: data.kind, payload: data.payload };
  }
  return { seq: Number.isFinite(seq) ? seq : 0, at: null, kind: message.type, payload: obj(data) };
}

export interface JobEventsHandlers {
  /** Called once per new event (after de-duplication), in order. */
  onEvents?: (events: JobEvent[]) => void;
  /** The stream ended: the job is over (its final state, or null once it is deleted). */
  onEnd?: (state: string | null) => void;
}

export function useJobEvents(jobId: string, handlers: JobEventsHandlers = {}): {
  events: JobEvent[];
  connection: Connection;
} {
  const [events, setEvents] = useState<JobEvent[]>([]);
  const [connection, setConnection] = useState<Connection>("connecting");
  const handlersRef = useRef(handlers);
  useEffect(() => {
    handlersRef.current = handlers;
  });

  useEffect(() => {
    let source: EventSource | null = null;
    let retry: ReturnType<typeof setTimeout> | undefined;
    let flush: ReturnType<typeof setTimeout> | undefined;
    let pending: JobEvent[] = [];
    let lastSeq = 0;
    let stopped = false;
    const seen = new Set<number>();

    const deliver = () => {
      flush = undefined;
      const batch = pending;
      pending = [];
      if (batch.length === 0) return;
      setEvents((current) => [...current, ...batch]);
      handlersRef.current.onEvents?.(batch);
    };
    const take = (message: MessageEvent<unknown>) => {
      const event = parseEvent(message);
      if (event === null) return;
      if (event.seq > 0) {
        if (seen.has(event.seq)) return;
        seen.add(event.seq);
        lastSeq = Math.max(lastSeq, event.seq);
      }
      pending.push(event);
      flush ??= setTimeout(deliver, FLUSH_MS);
    };
    const end = (message: MessageEvent<unknown>) => {
      stopped = true;
      source?.close();
      if (flush !== undefined) clearTimeout(flush);
      deliver();
      setConnection("ended");
      let state: string | null = null;
      try {
        state = str(obj(JSON.parse(String(message.data))).state);
      } catch {
        // an end without a state
      }
      handlersRef.current.onEnd?.(state);
    };
    const connect = () => {
      retry = undefined;
      const after = lastSeq > 0 ? `?after=${lastSeq}` : "";
      const stream = new EventSource(`/api/v1/jobs/${encodeURIComponent(jobId)}/events${after}`);
      source = stream;
      stream.onopen = () => setConnection("open");
      stream.onerror = () => {
        if (stopped) return;
        setConnection("reconnecting");
        if (stream.readyState === EventSource.CLOSED && retry === undefined) retry = setTimeout(connect, RETRY_MS);
      };
      for (const kind of EVENT_KINDS) stream.addEventListener(kind, take as EventListener);
      stream.addEventListener("end", end as EventListener);
    };
    connect();
    return () => {
      stopped = true;
      source?.close();
      if (retry !== undefined) clearTimeout(retry);
      if (flush !== undefined) clearTimeout(flush);
    };
  }, [jobId]);

  return { events, connection };
}
