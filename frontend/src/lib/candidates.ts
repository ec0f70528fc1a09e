/** The search log as one kind of row, whether it comes from `GET /jobs/{id}/candidates` (stored when the job ends)
 * or from live `candidate` events (`synthesis/trial.py` `Trial.to_dict`); merging, summaries and CSV. */

import type { CandidateOut } from "../api/types";
import { arr, num, numbers, obj, str } from "./json";
import type { JsonObject } from "./json";

export interface CandidateRow {
  index: number;
  id: string;
  origin: string;
  arch: JsonObject;
  summary: string;
  params: number | null;
  macs: number | null;
  latencyMs: number | null;
  status: string;
  reason: string;
  curve: number[];
  predicted: number | null;
  /** The search's score: best validation accuracy of a fully trained candidate, else its predicted final one. */
  accuracy: number | null;
  /** Best validation accuracy measured (the curve's maximum); null before an epoch. */
  measured: number | null;
  /** Final accuracy: the measured best of a candidate that trained fully; null for stopped or failed ones. */
  final: number | null;
  epochs: number;
  seconds: number | null;
  /** Fraction of the budget spent when it started. */
  startedAt: number | null;
}

const FULLY_TRAINED = new Set(["completed", "deadline", "trained"]);

function best(curve: number[]): number | null {
  return curve.length > 0 ? Math.max(...curve) : null;
}

function row(index: number, id: string, origin: string, arch: JsonObject, status: string, fields: JsonObject,
  cost: JsonObject): CandidateRow {
  const curve = numbers(fields.curve);
  const measured = best(curve);
  return {
    index,
    id,
    origin,
    arch,
    summary: archSummary(arch),
    params: num(cost.params),
    macs: num(cost.macs),
    latencyMs: num(cost.latency_ms),
    status,
    reason: str(cost.reason) ?? "",
    curve,
    predicted: num(fields.predicted),
    accuracy: num(fields.accuracy),
    measured,
    final: FULLY_TRAINED.has(status) ? measured ?? num(fields.accuracy) : null,
    epochs: num(fields.epochs) ?? curve.length,
    seconds: num(cost.seconds),
    startedAt: num(cost.started_at),
  };
}

/** A row of `GET /jobs/{id}/candidates`. */
export function fromStored(candidate: CandidateOut): CandidateRow {
  const genome = obj(candidate.genome);
  const cost = obj(candidate.cost);
  return row(num(cost.index) ?? 0, str(genome.id) ?? candidate.id, str(genome.origin) ?? "", obj(genome.arch),
    candidate.status, obj(candidate.metrics), cost);
}

/** The payload of a live `candidate` event. */
export function fromEvent(payload: JsonObject): CandidateRow {
  return row(num(payload.index) ?? 0, str(payload.id) ?? "", str(payload.origin) ?? "", obj(payload.arch),
    str(payload.status) ?? "proposed", payload, payload);
}

/** One row per candidate index: the stored log where it has the row, else the latest event about it. */
export function mergeCandidates(stored: CandidateRow[], live: CandidateRow[]): CandidateRow[] {
  const byIndex = new Map<number, CandidateRow>();
  for (const r of live) byIndex.set(r.index, r);
  for (const r of stored) {
    // logs stored before start times were kept have none: keep the one its live event carried
    const seen = byIndex.get(r.index);
    byIndex.set(r.index, r.startedAt === null && seen ? { ...r, startedAt: seen.startedAt } : r);
  }
  return [...byIndex.values()].sort((a, b) => a.index - b.index);
}

function stageSummary(stage: JsonObject): string {
  const block = str(stage.block) ?? "?";
  const depth = num(stage.depth) ?? 1;
  const width = num(stage.width);
  const kernel = num(stage.kernel);
  let text = `${block} ${depth}×${width ?? "?"}`;
  if (kernel !== null && kernel !== 3) text += ` k${kernel}`;
  const expand = num(stage.expand);
  if (block === "inverted" && expand !== null) text += ` e${expand}`;
  const growth = num(stage.growth);
  if (block === "dense" && growth !== null) text += ` g${growth}`;
  return text;
}

/** A genome in one line: image stages ("plain 2×32 → residual 1×64 · fc128"), or a text encoder. */
export function archSummary(arch: JsonObject): string {
  const kind = str(arch.kind);
  const hidden = num(arch.hidden);
  const head = hidden ? ` · fc${hidden}` : "";
  if (kind === "image") {
    const stages = arr(arch.stages).map((s) => stageSummary(obj(s)));
    const down = str(arch.downsample) === "conv" ? " (strided)" : "";
    return `${stages.join(" → ") || "no stages"}${down}${head}`;
  }
  if (kind === "text") {
    const encoder = str(arch.encoder) ?? "?";
    if (encoder === "linear") return "linear (TF-IDF)";
    if (encoder === "ensemble") {
      const members = arr(arch.members).map((m) => archSummary(obj(m)));
      return `ensemble of ${members.join(" + ")}`;
    }
    const parts = [encoder];
    const embed = num(arch.embed);
    if (embed !== null) parts.push(`e${embed}`);
    if (encoder === "bag" && num(arch.ngram) !== null) parts.push(`${num(arch.ngram) ?? 1}-gram`);
    if (encoder === "cnn") parts.push(`k[${numbers(arch.kernels).join(",")}]`);
    if (encoder === "transformer") parts.push(`${num(arch.blocks) ?? "?"} blocks × ${num(arch.heads) ?? "?"} heads`);
    const filters = num(arch.filters);
    if (filters !== null && encoder !== "transformer") parts.push(`f${filters}`);
    const pool = str(arch.pool);
    if (pool && encoder !== "ngrams") parts.push(`${pool} pool`);
    if (arch.wide === true) parts.push("wide");
    return parts.join(" ") + head;
  }
  const text = JSON.stringify(arch);
  return text.length > 80 ? `${text.slice(0, 77)}…` : text;
}

function csvCell(value: string | number | null): string {
  if (value === null) return "";
  const text = String(value);
  return /[",\n\r]/.test(text) ? `"${text.replace(/"/g, '""')}"` : text;
}

export const CSV_COLUMNS = ["index", "id", "origin", "architecture", "params", "macs", "latency_ms", "epochs",
  "predicted", "final_accuracy", "best_measured", "status", "reason", "seconds", "curve"] as const;

/** The rows as CSV (RFC 4180), one line per candidate, in the given order. */
export function candidatesCsv(rows: CandidateRow[]): string {
  const lines = [CSV_COLUMNS.join(",")];
  for (const r of rows) {
    lines.push([r.index, r.id, r.origin, r.summary, r.params, r.macs, r.latencyMs, r.epochs, r.predicted, r.final,
      r.measured, r.status, r.reason, r.seconds, r.curve.join(" ")].map(csvCell).join(","));
  }
  return lines.join("\r\n") + "\r\n";
}

/** [seconds into the budget, best accuracy so far] at the end of each candidate that measured something. A row
 * without its start time (the stored log has none) is taken to start when the one before it ended. */
export function bestSoFar(rows: CandidateRow[], budgetSeconds: number): [number, number][] {
  let cursor = 0;
  const ends: { at: number; value: number }[] = [];
  for (const r of [...rows].sort((a, b) => a.index - b.index)) {
    const start = r.startedAt !== null ? r.startedAt * budgetSeconds : cursor;
    const at = start + (r.seconds ?? 0);
    cursor = Math.max(cursor, at);
    if (r.measured !== null) ends.push({ at, value: r.measured });
  }
  ends.sort((a, b) => a.at - b.at);
  const points: [number, number][] = [];
  let top = -Infinity;
  for (const e of ends) {
    top = Math.max(top, e.value);
    points.push([Math.round(e.at * 10) / 10, top]);
  }
  return points;
}
