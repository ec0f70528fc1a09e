import { act, screen, waitFor, within } from "@testing-library/react";
import userEvent from "@testing-library/user-event";
import { describe, expect, it, vi } from "vitest";
import { jobTiming } from "../pages/Job";
import { CSRF, FakeEventSource, renderApp } from "./utils";
import type { Routes } from "./utils";
import { stored, trial } from "./fixtures";

vi.mock("../components/Chart", () => ({ Chart: ({ label }: { label: string }) => <div role="img" aria-label={label} /> }));

const JOB_ID = "22222222-2222-2222-2222-222222222222";

function job(fields: Record<string, unknown> = {}) {
  return {
    id: JOB_ID, dataset_id: null, budget_tier: "custom", budget_seconds: 600, budget_epochs: null, seed: 0, constraints: {},
    tolerance: 0.005, queue: "cpu", state: "running", stage: "search", progress: 0.25, device_seconds: 150, error: null,
    attempts: 1, cancel_requested: false, created_at: "2026-12-05T10:00:00Z", started_at: "2026-12-05T10:00:01Z",
    finished_at: null, model_ids: [], models: [], ...fields,
  };
}

function routes(current: () => Record<string, unknown>, candidates: () => unknown[] = () => []): Routes {
  return {
    "GET /api/v1/jobs/22222222-2222-2222-2222-222222222222": () => ({ json: current() }),
    "GET /api/v1/jobs/22222222-2222-2222-2222-222222222222/candidates": () => ({ json: candidates() }),
    "GET /api/v1/jobs/22222222-2222-2222-2222-222222222222/pareto": { json: [] },
    "POST /api/v1/jobs/22222222-2222-2222-2222-222222222222/cancel": { json: job({ cancel_requested: true }) },
    "GET /api/v1/datasets": { json: [] },
    "GET /api/v1/jobs": { json: [] },
  };
}

function bodyRows(): HTMLElement[] {
  const table = screen.getByRole("table", { name: /Candidates of the search/ });
  return within(table).getAllByRole("row").slice(1);
}

async function stream(): Promise<FakeEventSource> {
  await waitFor(() => expect(FakeEventSource.instances.length).toBeGreaterThan(0));
  const source = FakeEventSource.instances.at(-1);
  if (!source) throw new Error("no EventSource");
  return source;
}

describe("job page, live", () => {
  it("merges live candidate events into the table, once per candidate, and follows the stream to its end", async () => {
    FakeEventSource.install();
    let current = job();
    let storedRows: unknown[] = [];
    const { calls } = renderApp(`/jobs/${JOB_ID}`, routes(() => current, () => storedRows));
    expect(await screen.findByRole("heading", { name: /Job 22222222/ })).toBeInTheDocument();
    const source = await stream();
    expect(source.url).toBe(`/api/v1/jobs/${JOB_ID}/events`);
    act(() => source.open());
    expect(await screen.findByText("No candidates yet.")).toBeInTheDocument();

    act(() => {
      source.emit("stage", 3, { stage: "search" });
      source.emit("candidate", 4, trial(0));
      source.emit("candidate", 5, trial(1, { status: "stopped", curve: [0.41], accuracy: 0.5, predicted: 0.55 }));
    });
    await waitFor(() => expect(bodyRows()).toHaveLength(2));
    expect(screen.getByText("2 candidates")).toBeInTheDocument();

    // a later event about candidate 1 replaces its row; a repeated seq (a reconnect's replay) is ignored
    act(() => {
      source.emit("candidate", 6, trial(1, { status: "completed", curve: [0.41, 0.9], accuracy: 0.9 }));
      source.emit("candidate", 5, trial(1, { status: "failed", reason: "should be ignored" }));
      source.emit("warning", 7, { message: "validation accuracy is at chance level" });
    });
    await waitFor(() => expect(within(bodyRows()[1] as HTMLElement).getByText("completed")).toBeInTheDocument());
    expect(bodyRows()).toHaveLength(2);
    expect(screen.queryByText("should be ignored")).not.toBeInTheDocument();
    expect(within(bodyRows()[1] as HTMLElement).getByText("90.00 %")).toBeInTheDocument();
    expect(screen.getAllByText(/chance level/).length).toBeGreaterThan(0);
    expect(screen.getByRole("img", { name: /Best validation accuracy so far: 90.00 % over 2 candidates/ })).toBeInTheDocument();

    // the job ends: the stream closes, the job and its stored log are read again, stored rows win
    current = job({ state: "succeeded", stage: "done", progress: 1, finished_at: "2026-12-05T10:10:00Z", model_ids: ["m1"], models: [{ id: "33333333-3333-3333-3333-333333333333", variant: "dense" }] });
    storedRows = [stored(0), stored(1, { curve: [0.41, 0.92], accuracy: 0.92 }), stored(2)];
    const before = calls.filter((c) => c.path.endsWith("/candidates")).length;
    act(() => source.emit("end", 0, { state: "succeeded" }));
    expect(source.readyState).toBe(FakeEventSource.CLOSED);
    await waitFor(() => expect(bodyRows()).toHaveLength(3));
    expect(calls.filter((c) => c.path.endsWith("/candidates")).length).toBeGreaterThan(before);
    expect(await screen.findByRole("link", { name: "Dense model" })).toHaveAttribute("href", "/models/33333333-3333-3333-3333-333333333333");
    expect(screen.getByRole("button", { name: "Cancel" })).toBeDisabled();
    expect(screen.getByText("log complete")).toBeInTheDocument();
  });

  it("resumes after the last seq when the stream gives up", async () => {
    vi.useFakeTimers({ shouldAdvanceTime: true });
    try {
      FakeEventSource.install();
      renderApp(`/jobs/${JOB_ID}`, routes(() => job()));
      const source = await stream();
      act(() => {
        source.open();
        source.emit("candidate", 9, trial(0));
      });
      act(() => {
        source.readyState = FakeEventSource.CLOSED;
        source.onerror?.(new Event("error"));
      });
      expect(await screen.findByText("reconnecting…")).toBeInTheDocument();
      await act(async () => {
        await vi.advanceTimersByTimeAsync(5100);
      });
      expect(FakeEventSource.instances).toHaveLength(2);
      expect(FakeEventSource.instances[1]?.url).toBe(`/api/v1/jobs/${JOB_ID}/events?after=9`);
    } finally {
      vi.useRealTimers();
    }
  });

  it("cancels with confirmation, sending the CSRF token", async () => {
    FakeEventSource.install();
    const { calls } = renderApp(`/jobs/${JOB_ID}`, routes(() => job()));
    const user = userEvent.setup();
    await user.click(await screen.findByRole("button", { name: "Cancel" }));
    expect(calls.some((c) => c.method === "POST")).toBe(false);
    await user.click(screen.getByRole("button", { name: "Yes, cancel job" }));
    await waitFor(() => expect(calls.some((c) => c.method === "POST" && c.path.endsWith("/cancel"))).toBe(true));
    const post = calls.find((c) => c.method === "POST" && c.path.endsWith("/cancel"));
    expect(post?.headers.get("X-CSRF-Token")).toBe(CSRF);
    await waitFor(() => expect(screen.getByRole("button", { name: "Cancel" })).toBeDisabled());
  });
});

describe("job timing", () => {
  const read = Date.parse("2026-12-05T10:02:31Z");
  it("extrapolates the elapsed device time of a running job and estimates the time left from its progress", () => {
    const t = jobTiming(job({ progress: 0.4 }) as never, read + 10_000, read);
    expect(t.elapsed).toBeCloseTo(160);
    expect(t.budget).toBe(600);
    expect(t.eta).toBeCloseTo(240); // 40 % done in 160 s: 240 s more, within the budget's 440 s left
  });
  it("never estimates past the budget, and has no ETA once the job ended", () => {
    expect(jobTiming(job({ progress: 0.25 }) as never, read, read).eta).toBeCloseTo(450); // 450 by progress, 450 left
    expect(jobTiming(job({ progress: 0.1 }) as never, read, read).eta).toBeCloseTo(450); // 1350 by progress
    expect(jobTiming(job({ state: "succeeded" }) as never, read, read).eta).toBeNull();
  });
});
