/** A job's events in words, for its activity log. */

import type { JobEvent } from "../api/types";
import { formatDuration, formatPercent } from "./format";
import { num, obj, str } from "./json";

function compact(payload: Record<string, unknown>): string {
  const text = JSON.stringify(payload);
  return text === "{}" ? "" : text.length > 160 ? `${text.slice(0, 157)}…` : text;
}

export function describeEvent(event: JobEvent): string {
  const p = obj(event.payload);
  switch (event.kind) {
    case "queued":
      return `Queued with a ${str(p.budget_tier) ?? ""} budget of ${formatDuration(num(p.budget_seconds))}.`;
    case "attempt":
      return `Attempt ${num(p.attempt) ?? "?"} started${str(p.worker) ? ` on ${str(p.worker)}` : ""}${p.restarted === true ? " (restarted)" : ""}.`;
    case "stage":
      return `Stage: ${str(p.stage) ?? "?"}.`;
    case "split":
      return `Split: ${num(p.train) ?? "?"} training, ${num(p.val) ?? "?"} validation and ${num(p.test) ?? "?"} test rows.`;
    case "leader_ahead":
      return `Candidate ${str(p.candidate) ?? "?"} leads the search by a clear margin.`;
    case "compress_round":
      return `Compression (${str(p.stage) ?? "?"}): ${p.kept === true ? "kept" : "not kept"}, validation accuracy ${formatPercent(num(p.val_accuracy))}.`;
    case "compress_prune":
    case "compress_filters":
      return `Compression pruned ${event.kind === "compress_filters" ? "filters" : "connections"}.`;
    case "compress_buckets":
      return "Compression chose its weight clusters.";
    case "compress_retrain":
      return `Compression retrained (${str(p.stage) ?? ""}${num(p.epochs) !== null ? `, ${num(p.epochs)} epochs` : ""}).`;
    case "augmentation":
      return `Augmentation checked on candidate ${str(p.candidate) ?? "?"}.`;
    case "ensemble":
      return "The winner was combined with the linear floor (an ensemble).";
    case "search_done":
      return `Search done after ${num(p.trials) ?? "?"} trials${str(p.reason) ? ` (${str(p.reason)})` : ""}.`;
    case "final":
      return `Final training of ${str(p.candidate) ?? "the winner"}: ${str(p.status) ?? "?"}${num(p.val_accuracy) !== null ? `, validation accuracy ${formatPercent(num(p.val_accuracy))}` : ""}.`;
    case "final_fallback":
      return `Kept candidate ${str(p.candidate) ?? "?"} from the search (validation accuracy ${formatPercent(num(p.val_accuracy))}).`;
    case "compressed":
      return `Compressed ${(num(p.ratio) ?? 0).toFixed(1)}× smaller; validation accuracy ${formatPercent(num(p.val_accuracy_before))} → ${formatPercent(num(p.val_accuracy_after))}.`;
    case "compress_skipped":
      return `Compression skipped: ${str(p.reason) ?? ""}.`;
    case "compress_failed":
      return `Compression failed: ${str(p.error) ?? ""}`;
    case "report":
      return p.built === true
        ? `Explainability report of the ${str(p.variant) ?? ""} model built in ${(num(p.seconds) ?? 0).toFixed(1)} s.`
        : `No explainability report for the ${str(p.variant) ?? ""} model: ${str(p.reason) ?? ""}.`;
    case "warning":
      return `Warning: ${str(p.message) ?? compact(p)}`;
    case "requeued":
      return `Requeued: ${str(p.reason) ?? ""}.`;
    case "cancel_requested":
      return "Cancel requested; the worker stops within seconds and keeps the best model so far.";
    case "cancelled":
      return p.before_start === true ? "Cancelled before it started." : "Cancelled.";
    case "failed":
      return `Failed: ${str(p.error) ?? compact(p)}`;
    case "succeeded":
      return `Succeeded${str(p.note) ? `: ${str(p.note)}` : "."}`;
    case "time_limit":
      return `Time limit: ${str(p.note) ?? ""}`;
    default:
      return `${event.kind.replace(/_/g, " ")}${compact(p) ? `: ${compact(p)}` : ""}`;
  }
}
