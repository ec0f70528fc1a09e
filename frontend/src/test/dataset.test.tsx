import { screen, waitFor } from "@testing-library/react";
import userEvent from "@testing-library/user-event";
import { describe, expect, it, vi } from "vitest";
import { CSRF, renderApp } from "./utils";

vi.mock("../components/Chart", () => ({ Chart: ({ label }: { label: string }) => <div role="img" aria-label={label} /> }));

const ID = "88888888-8888-8888-8888-888888888888";
const DATASET = {
  id: ID, name: "photos", modality: "image", format: "image_zip", filename: "photos.zip", status: "ready",
  classes: ["cat", "dog"], class_counts: { cat: 40, dog: 60 }, sample_count: 100, size_bytes: 2_500_000,
  checksum: "cd".repeat(32), created_at: "2026-12-05T10:00:00Z",
  profile: {
    format: "image_zip", modality: "image", class_counts: { cat: 40, dog: 60 }, sample_count: 100,
    duplicates: { count: 3, conflicting: 1 },
    image: {
      height: 64, width: 48, channels: 3, dtype: "uint8", mean: [120.5, 110.2, 100.9], std: [50.1, 49.2, 48.3], resized: true,
      resize: { policy: "centre-crop", reason: "too-large", max_native_side: 64, native_sizes: 7, smallest: [120, 90], largest: [480, 360], most_common: [240, 180] },
    },
  },
};

describe("dataset page", () => {
  it("shows the profile, the class histogram and sample thumbnails, and deletes after confirmation", async () => {
    const { calls } = renderApp(`/datasets/${ID}`, {
      [`GET /api/v1/datasets/${ID}`]: { json: DATASET },
      [`GET /api/v1/datasets/${ID}/samples`]: {
        json: { modality: "image", samples: [{ index: 0, label: "cat", text: null, image_url: `/api/v1/datasets/${ID}/samples/0.png` }] },
      },
      [`DELETE /api/v1/datasets/${ID}`]: { status: 204 },
      "GET /api/v1/datasets": { json: [] },
    });
    const user = userEvent.setup();
    expect(await screen.findByRole("heading", { name: /Dataset photos/ })).toBeInTheDocument();
    expect(screen.getByText(/64×48 px, 3 channels/)).toBeInTheDocument();
    expect(screen.getByText(/scaled down, as they were larger/)).toBeInTheDocument();
    expect(screen.getByText(/3 repeated inputs, 1 with conflicting labels/)).toBeInTheDocument();
    expect(screen.getByRole("img", { name: /Samples per class: 2 classes, from 40 to 60 samples/ })).toBeInTheDocument();
    expect(await screen.findByRole("img", { name: "Sample 0, labelled cat" })).toHaveAttribute("src", `/api/v1/datasets/${ID}/samples/0.png`);
    expect(calls.find((c) => c.path.endsWith("/samples"))?.search).toBe("?limit=12");

    await user.click(screen.getByRole("button", { name: "Delete" }));
    expect(calls.some((c) => c.method === "DELETE")).toBe(false);
    await user.click(screen.getByRole("button", { name: "Yes, delete dataset" }));
    await waitFor(() => expect(calls.some((c) => c.method === "DELETE")).toBe(true));
    expect(calls.find((c) => c.method === "DELETE")?.headers.get("X-CSRF-Token")).toBe(CSRF);
    expect(await screen.findByRole("heading", { name: "Datasets" })).toBeInTheDocument();
  });

  it("says why a delete was refused", async () => {
    renderApp(`/datasets/${ID}`, {
      [`GET /api/v1/datasets/${ID}`]: { json: { ...DATASET, modality: "text", profile: { duplicates: { count: 0, conflicting: 0 }, text: { chars: { min: 1, median: 40, mean: 50, p95: 120, max: 300 }, words: { min: 0, median: 8, mean: 9, p95: 20, max: 60 }, empty: 2 } } } },
      [`GET /api/v1/datasets/${ID}/samples`]: { json: { modality: "text", samples: [{ index: 4, label: "spam", text: "win cash now", image_url: null }] } },
      [`DELETE /api/v1/datasets/${ID}`]: { status: 409, json: { title: "Conflict", status: 409, detail: "1 queued or running job(s) use this dataset; cancel them first" } },
    });
    const user = userEvent.setup();
    expect(await screen.findByText("win cash now")).toBeInTheDocument();
    expect(screen.getByText(/2 \(kept: a blank text still has a label\)/)).toBeInTheDocument();
    await user.click(await screen.findByRole("button", { name: "Delete" }));
    await user.click(screen.getByRole("button", { name: "Yes, delete dataset" }));
    expect(await screen.findByRole("alert")).toHaveTextContent("1 queued or running job(s) use this dataset; cancel them first");
  });
});
