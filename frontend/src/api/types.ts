/** Names for the API's bodies: the generated OpenAPI schemas, and the shapes of the free-form JSON inside them
 * (a dataset's profile, a job's events, the Pareto front, a model's architecture, the explainability report). */

import type { components } from "./schema";

type Schemas = components["schemas"];
export type User = Schemas["UserOut"];
export type Dataset = Schemas["DatasetOut"];
export type Job = Schemas["JobOut"];
export type JobState = Schemas["JobState"];
export type JobCreate = Schemas["JobCreate"];
export type CandidateOut = Schemas["CandidateOut"];
export type Model = Schemas["ModelOut"];
export type PredictOut = Schemas["PredictOut"];
export type ReportOut = Schemas["ReportOut"];
export type ApiKey = Schemas["ApiKeyOut"];
export type ApiKeyCreated = Schemas["ApiKeyCreated"];
export type Me = Schemas["MeOut"];

/** `POST` / `GET /api/v1/session`: the signed-in user and the CSRF token every write must carry. */
export type SessionOut = Schemas["SessionOut"];
/** `GET /datasets/{id}/samples` and one of its samples. */
export type SamplesOut = Schemas["DatasetSamplesOut"];
export type Sample = Schemas["SampleOut"];
/** A model's `architecture` and one of its layers. */
export type Architecture = Schemas["ArchitectureOut"];
export type Layer = Schemas["LayerOut"];

/** One point of `GET /jobs/{id}/pareto` (`synthesis/pareto.py`). */
export interface ParetoPoint {
  candidate: string;
  accuracy: number;
  params: number;
  latency_ms: number;
  latency?: string;
  delivered: boolean;
  variant?: string;
  model_bytes?: number;
}

/** One entry of a job's event log, as `GET /jobs/{id}/events` sends it (`api/events.py`). */
export interface JobEvent {
  seq: number;
  at: string | null;
  kind: string;
  payload: Record<string, unknown>;
}

export const TERMINAL_STATES: readonly string[] = ["succeeded", "failed", "cancelled"];

export function isTerminal(state: string | null | undefined): boolean {
  return state !== null && state !== undefined && TERMINAL_STATES.includes(state);
}
