import { screen, waitFor, within } from "@testing-library/react";
import userEvent from "@testing-library/user-event";
import { describe, expect, it, vi } from "vitest";
import { confusionOption, paretoOption } from "../lib/charts";
import { fromEvent } from "../lib/candidates";
import { renderApp } from "./utils";
import { stored, trial } from "./fixtures";

vi.mock("../components/Chart", () => ({ Chart: ({ label }: { label: string }) => <div role="img" aria-label={label} /> }));

function job(id: string, fields: Record<string, unknown> = {}) {
  return {
    id, dataset_id: "dddddddd-dddd-dddd-dddd-dddddddddddd", budget_tier: "low", budget_seconds: 7200, budget_epochs: null, seed: 0,
    constraints: {}, tolerance: 0.005, queue: "cpu", state: "succeeded", stage: "done", progress: 1, device_seconds: 7000, error: null,
    attempts: 1, cancel_requested: false, created_at: "2026-12-05T10:00:00Z", started_at: "2026-12-05T10:00:01Z",
    finished_at: "2026-12-05T12:00:00Z", model_ids: [], models: [], ...fields,
  };
}
const DATASETS = [{ id: "dddddddd-dddd-dddd-dddd-dddddddddddd", name: "mnist", modality: "image", format: "npz", filename: "m.npz", status: "ready", classes: [], class_counts: {}, sample_count: 0, size_bytes: 0, checksum: "", profile: {}, created_at: "2026-12-05T10:00:00Z" }];
const A = "aaaaaaaa-0000-0000-0000-000000000001";
const B = "bbbbbbbb-0000-0000-0000-000000000002";
const MA = "aaaaaaaa-1111-1111-1111-111111111111";

describe("jobs list", () => {
  it("lists state, stage, dataset and budget, each job linked to its page", async () => {
    renderApp("/jobs", {
      "GET /api/v1/jobs": { json: [job(A, { state: "running", stage: "search", progress: 0.4, finished_at: null }), job(B, { budget_tier: "custom", budget_seconds: 60 })] },
      "GET /api/v1/datasets": { json: DATASETS },
    });
    const link = await screen.findByRole("link", { name: "Job aaaaaaaa" });
    expect(link).toHaveAttribute("href", `/jobs/${A}`);
    const rows = within(screen.getByRole("table")).getAllByRole("row");
    expect(rows[1]).toHaveTextContent(/running.*search.*40 %.*mnist.*low · 2 h 00 min/);
    expect(rows[2]).toHaveTextContent(/succeeded.*1 min 00 s/);
  });
});

describe("compare", () => {
  it("puts the jobs named in the address side by side, and adds a job when its box is ticked", async () => {
    const dense = {
      id: MA, job_id: A, dataset_id: null, variant: "dense", created_at: "2026-12-05T10:00:00Z", classes: ["a", "b"],
      metrics: { test_accuracy: 0.975, val_accuracy: 0.98, latency_ms: 0.25, trials: 31 }, param_count: 54321, weights_bytes: 217284,
      onnx_bytes: 220000, input: {}, preprocessing: "image", compression: null,
    };
    renderApp(`/compare?jobs=${A}`, {
      "GET /api/v1/jobs": { json: [job(A, { model_ids: [MA], models: [{ id: MA, variant: "dense" }] }), job(B)] },
      "GET /api/v1/datasets": { json: DATASETS },
      [`GET /api/v1/models/${MA}`]: { json: dense },
      [`GET /api/v1/jobs/${A}/candidates`]: { json: [stored(0), stored(1)] },
      [`GET /api/v1/jobs/${B}/candidates`]: { json: [stored(0)] },
    });
    const user = userEvent.setup();
    const table = await screen.findByRole("table");
    await waitFor(() => expect(within(table).getByRole("row", { name: /Test accuracy/ })).toHaveTextContent("97.50 %"));
    expect(within(table).getByRole("row", { name: /Parameters/ })).toHaveTextContent("54,321");
    await user.click(screen.getByRole("checkbox", { name: /Job bbbbbbbb/ }));
    await waitFor(() => expect(within(screen.getByRole("table")).getAllByRole("columnheader")).toHaveLength(3));
    expect(screen.getByRole("img", { name: /Best validation accuracy so far of 2 jobs/ })).toBeInTheDocument();
  });
});

describe("chart options", () => {
  it("marks the delivered models apart from the front, on the axis asked for", () => {
    const points = [
      { candidate: "c1", accuracy: 0.9, params: 1000, latency_ms: 0.5, delivered: false },
      { candidate: "c2", accuracy: 0.95, params: 5000, latency_ms: 0.8, delivered: true, variant: "dense" },
      { candidate: "c2", accuracy: 0.94, params: 900, latency_ms: 0.4, delivered: true, variant: "compressed" },
    ];
    const option = paretoOption(points, [fromEvent(trial(0))], "latency_ms");
    const series = option.series as { name: string; data: { name: string; value: number[] }[] }[];
    expect(series.map((s) => s.name)).toEqual(["candidates", "Pareto front", "delivered"]);
    expect(series[2]?.data.map((d) => [d.name, d.value[0]])).toEqual([["dense model", 0.8], ["compressed model", 0.4]]);
    expect(series[1]?.data.map((d) => d.value)).toEqual([[0.5, 0.9]]);
    expect((option.xAxis as { type: string }).type).toBe("value");
    expect((paretoOption(points, [], "params").xAxis as { type: string }).type).toBe("log");
  });

  it("lays the confusion matrix out with the true class as rows", () => {
    const option = confusionOption([[5, 1], [0, 4]], ["cat", "dog"]);
    const data = (option.series as { data: { value: number[] }[] }[])[0]?.data.map((d) => d.value);
    expect(data).toEqual([[0, 0, 5], [1, 0, 1], [0, 1, 0], [1, 1, 4]]);
  });
});
