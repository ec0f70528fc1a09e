import { describe, expect, it } from "vitest";
import { archSummary, bestSoFar, fromEvent, fromStored, mergeCandidates } from "../lib/candidates";
import { describeEvent } from "../lib/events";
import { formatBytes, formatDuration, formatPercent } from "../lib/format";
import { parseEvent } from "../lib/useJobEvents";
import { jobRequest } from "../pages/NewJob";
import { stored, trial } from "./fixtures";

describe("search log rows", () => {
  it("reads a live event and a stored candidate alike", () => {
    const live = fromEvent(trial(2));
    const kept = fromStored(stored(2));
    for (const row of [live, kept]) {
      expect(row.index).toBe(2);
      expect(row.id).toBe("genome2");
      expect(row.params).toBe(3000);
      expect(row.curve).toEqual([0.5, 0.72]);
      expect(row.final).toBe(0.72);
      expect(row.summary).toBe("plain 2×96");
    }
    expect(live.startedAt).toBe(0.2);
    expect(kept.startedAt).toBeNull();
  });

  it("has no final accuracy for a stopped or failed candidate", () => {
    expect(fromEvent(trial(0, { status: "stopped" })).final).toBeNull();
    expect(fromEvent(trial(0, { status: "failed", curve: [] })).measured).toBeNull();
  });

  it("merges by index: stored rows win but keep the start time their event carried", () => {
    const merged = mergeCandidates([fromStored(stored(1))], [fromEvent(trial(0)), fromEvent(trial(1, { status: "stopped" }))]);
    expect(merged.map((r) => [r.index, r.status, r.startedAt])).toEqual([
      [0, "completed", 0],
      [1, "trained", 0.1],
    ]);
  });

  it("tracks the best accuracy so far over the budget's seconds", () => {
    const rows = [fromEvent(trial(0, { curve: [0.6], started_at: 0, seconds: 10 })), fromEvent(trial(1, { curve: [0.5], started_at: 0.1, seconds: 10 })),
      fromEvent(trial(2, { curve: [0.8], started_at: 0.2, seconds: 5 }))];
    expect(bestSoFar(rows, 100)).toEqual([[10, 0.6], [20, 0.6], [25, 0.8]]);
    // stored rows have no start: each starts when the one before it ended
    expect(bestSoFar([fromStored(stored(0, { seconds: 4 })), fromStored(stored(1, { seconds: 6 }))], 100)).toEqual([[4, 0.7], [10, 0.71]]);
  });

  it("summarises genomes in one line", () => {
    expect(archSummary({ kind: "image", stages: [{ block: "inverted", depth: 1, width: 16, kernel: 5, expand: 6 }, { block: "residual", depth: 2, width: 32, kernel: 3 }], downsample: "conv", hidden: 128 }))
      .toBe("inverted 1×16 k5 e6 → residual 2×32 (strided) · fc128");
    expect(archSummary({ kind: "text", encoder: "transformer", embed: 64, blocks: 2, heads: 4, pool: "avg", hidden: 0 })).toBe("transformer e64 2 blocks × 4 heads avg pool");
    expect(archSummary({ kind: "text", encoder: "linear" })).toBe("linear (TF-IDF)");
  });
});

describe("job events", () => {
  it("parses the SSE data as the API sends it, and a bare payload", () => {
    const full = parseEvent(new MessageEvent("stage", { data: JSON.stringify({ seq: 4, at: "2026-12-05T10:00:00Z", kind: "stage", payload: { stage: "search" } }), lastEventId: "4" }));
    expect(full).toEqual({ seq: 4, at: "2026-12-05T10:00:00Z", kind: "stage", payload: { stage: "search" } });
    const bare = parseEvent(new MessageEvent("warning", { data: JSON.stringify({ message: "low" }), lastEventId: "9" }));
    expect(bare).toEqual({ seq: 9, at: null, kind: "warning", payload: { message: "low" } });
    expect(parseEvent(new MessageEvent("stage", { data: "not json" }))).toBeNull();
  });

  it("describes events in words", () => {
    expect(describeEvent({ seq: 1, at: null, kind: "compressed", payload: { ratio: 7.26, val_accuracy_before: 0.98, val_accuracy_after: 0.975 } }))
      .toBe("Compressed 7.3× smaller; validation accuracy 98.00 % → 97.50 %.");
    expect(describeEvent({ seq: 2, at: null, kind: "report", payload: { variant: "dense", built: false, reason: "no time" } }))
      .toBe("No explainability report for the dense model: no time.");
  });
});

describe("formatting", () => {
  it("formats sizes, durations and percentages", () => {
    expect(formatBytes(999)).toBe("999 B");
    expect(formatBytes(1_234_567)).toBe("1.23 MB");
    expect(formatDuration(3725)).toBe("1 h 02 min");
    expect(formatDuration(65)).toBe("1 min 05 s");
    expect(formatPercent(0.97254)).toBe("97.25 %");
    expect(formatPercent(null)).toBe("—");
  });
});

describe("job request", () => {
  const base = { datasetId: "d", budget: { choice: "auto" as const, seconds: "" }, maxParams: "", maxBytes: "", maxLatency: "", tolerancePp: "0.5" };
  it("sends the tolerance as a fraction and leaves out what was not given", () => {
    expect(jobRequest(base)).toEqual({ dataset_id: "d", seed: 0, tolerance: 0.005 });
    expect(jobRequest({ ...base, tolerancePp: "0.3", maxBytes: "50000" })).toEqual({ dataset_id: "d", seed: 0, tolerance: 0.003, constraints: { max_model_bytes: 50000 } });
  });
  it("refuses what the API would refuse, saying which field", () => {
    expect(() => jobRequest({ ...base, tolerancePp: "25" })).toThrow(/Compression tolerance/);
    expect(() => jobRequest({ ...base, maxParams: "1.5" })).toThrow(/Max parameters/);
    expect(() => jobRequest({ ...base, datasetId: "" })).toThrow(/dataset/);
  });
});
