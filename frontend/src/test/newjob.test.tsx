import { render, screen, waitFor } from "@testing-library/react";
import userEvent from "@testing-library/user-event";
import { useState } from "react";
import { describe, expect, it, vi } from "vitest";
import { AUTO_BUDGET, BudgetField, budgetToRequest } from "../components/BudgetField";
import type { BudgetValue } from "../components/BudgetField";
import { CSRF, renderApp, jsonBody } from "./utils";

vi.mock("../components/Chart", () => ({ Chart: ({ label }: { label: string }) => <div role="img" aria-label={label} /> }));

const DATASET = {
  id: "44444444-4444-4444-4444-444444444444", name: "digits", modality: "image", format: "image_zip", filename: "digits.zip",
  status: "ready", classes: ["0", "1"], class_counts: { "0": 5, "1": 5 }, sample_count: 10, size_bytes: 1000,
  checksum: "ab".repeat(32), profile: {}, created_at: "2026-12-05T10:00:00Z",
};
const NEW_JOB = {
  id: "55555555-5555-5555-5555-555555555555", dataset_id: DATASET.id, budget_tier: "custom", budget_seconds: 60,
  budget_epochs: null, seed: 0, constraints: {}, tolerance: 0.01, queue: "cpu", state: "queued", stage: null, progress: 0,
  device_seconds: 0, error: null, attempts: 0, cancel_requested: false, created_at: "2026-12-05T10:00:00Z",
  started_at: null, finished_at: null, model_ids: [], models: [],
};

function Harness({ onValue }: { onValue: (v: BudgetValue) => void }) {
  const [value, setValue] = useState(AUTO_BUDGET);
  return (
    <BudgetField value={value} onChange={(v) => {
      setValue(v);
      onValue(v);
    }} />
  );
}

describe("budget input", () => {
  it("takes a number of seconds typed into the input labelled Budget, and a tier from its select", async () => {
    const user = userEvent.setup();
    const values: BudgetValue[] = [];
    render(<Harness onValue={(v) => values.push(v)} />);
    const budget = screen.getByLabelText("Budget");
    await user.type(budget, "60");
    expect(budget).toHaveValue(60);
    expect(screen.getByLabelText("Tier")).toHaveValue("custom");
    expect(budgetToRequest(values.at(-1) ?? AUTO_BUDGET)).toBe(60);
    expect(screen.getByText("1 min 00 s of device time.")).toBeInTheDocument();

    await user.selectOptions(screen.getByLabelText("Tier"), "medium");
    expect(screen.getByRole("option", { name: "Medium: 5 device-hours" })).toBeInTheDocument();
    expect(budget).toHaveValue(18000);
    expect(budgetToRequest(values.at(-1) ?? AUTO_BUDGET)).toBe("medium");

    await user.clear(budget);
    expect(screen.getByLabelText("Tier")).toHaveValue("auto");
    expect(budgetToRequest(values.at(-1) ?? AUTO_BUDGET)).toBeUndefined();
  });

  it("refuses seconds out of range or not whole", () => {
    expect(() => budgetToRequest({ choice: "custom", seconds: "5" })).toThrow(/from 10/);
    expect(() => budgetToRequest({ choice: "custom", seconds: "60.5" })).toThrow(/whole number/);
    expect(() => budgetToRequest({ choice: "custom", seconds: "" })).toThrow();
    expect(budgetToRequest({ choice: "high", seconds: "57600" })).toBe("high");
  });
});

describe("new job", () => {
  it("starts a job with the typed budget, constraints and tolerance, sends the CSRF token, and opens its page", async () => {
    const { calls } = renderApp("/jobs/new", {
      "GET /api/v1/datasets": { json: [DATASET] },
      "POST /api/v1/jobs": { status: 201, json: NEW_JOB },
      [`GET /api/v1/jobs/${NEW_JOB.id}`]: { json: NEW_JOB },
      [`GET /api/v1/jobs/${NEW_JOB.id}/candidates`]: { json: [] },
      [`GET /api/v1/jobs/${NEW_JOB.id}/pareto`]: { json: [] },
    });
    vi.stubGlobal("EventSource", class { addEventListener() {} close() {} });
    const user = userEvent.setup();
    await screen.findByRole("option", { name: /digits/ });
    expect(screen.getByLabelText("Dataset")).toHaveValue(DATASET.id);
    await user.type(screen.getByLabelText("Budget"), "60");
    await user.type(screen.getByLabelText("Max parameters"), "100000");
    await user.type(screen.getByLabelText("Max latency (ms)"), "2.5");
    await user.clear(screen.getByLabelText("Compression tolerance"));
    await user.type(screen.getByLabelText("Compression tolerance"), "1");
    await user.click(screen.getByRole("button", { name: "Start job" }));

    await waitFor(() => expect(calls.some((c) => c.method === "POST" && c.path === "/api/v1/jobs")).toBe(true));
    const post = calls.find((c) => c.method === "POST" && c.path === "/api/v1/jobs");
    expect(post?.headers.get("X-CSRF-Token")).toBe(CSRF);
    expect(jsonBody(post)).toEqual({
      dataset_id: DATASET.id, seed: 0, budget: 60, constraints: { max_params: 100000, max_latency_ms: 2.5 }, tolerance: 0.01,
    });
    expect(await screen.findByRole("heading", { name: /Job 55555555/ })).toBeInTheDocument();
  });

  it("says in words why the API refused the job", async () => {
    renderApp("/jobs/new", {
      "GET /api/v1/datasets": { json: [DATASET] },
      "POST /api/v1/jobs": {
        status: 429,
        headers: { "Retry-After": "30" },
        json: { title: "Too Many Requests", status: 429, detail: "you have 2 active jobs, the most your quota allows", reason: "quota-active-jobs" },
      },
    });
    const user = userEvent.setup();
    await screen.findByRole("option", { name: /digits/ });
    await user.click(screen.getByRole("button", { name: "Start job" }));
    const alert = await screen.findByRole("alert");
    expect(alert).toHaveTextContent("you have 2 active jobs, the most your quota allows");
    expect(alert).toHaveTextContent("Try again in 30 s.");
  });
});
