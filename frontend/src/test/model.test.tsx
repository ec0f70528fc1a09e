import { screen, waitFor, within } from "@testing-library/react";
import userEvent from "@testing-library/user-event";
import { describe, expect, it, vi } from "vitest";
import { CSRF, renderApp, jsonBody } from "./utils";

vi.mock("../components/Chart", () => ({ Chart: ({ label }: { label: string }) => <div role="img" aria-label={label} /> }));

const MODEL_ID = "66666666-6666-6666-6666-666666666666";
const BASE = `/api/v1/models/${MODEL_ID}`;

function model(fields: Record<string, unknown> = {}) {
  return {
    id: MODEL_ID, job_id: "77777777-7777-7777-7777-777777777777", dataset_id: null, variant: "dense",
    created_at: "2026-12-05T10:00:00Z", classes: ["ham", "spam"], param_count: 12000, weights_bytes: 48000, onnx_bytes: 50000,
    metrics: { test_accuracy: 0.98, val_accuracy: 0.97, latency_ms: 0.12, params: 12000, trials: 14 },
    input: { shape: [64], dtype: "int32" }, preprocessing: "text", compression: null, ...fields,
  };
}

const REPORT = {
  model_id: MODEL_ID, created_at: "2026-12-05T10:00:00Z", html: `${BASE}/report.html`,
  images: { "confusion.png": `${BASE}/report/images/confusion.png`, "row3_gradcam.png": `${BASE}/report/images/row3_gradcam.png` },
  report: {
    version: 1, variant: "dense", modality: "image", classes: ["cat", "dog"], seconds: 3.2, omitted: [],
    global: { test_rows: 10, accuracy: 0.9, confusion_matrix: [[5, 0], [1, 4]], per_class: [{ class: "cat", precision: 0.83, recall: 1, f1: 0.9, support: 5 }], calibration: { ece: 0.05, bins: [] } },
    methods: { gradcam: { layers: ["conv2"], seconds_per_input: 0.01 } }, faithfulness: { gradcam: { deletion_auc: 0.6, random_deletion_auc: 0.5, insertion_auc: 0.4, random_insertion_auc: 0.45, better_than_random: false } },
    examples: [{ row: 3, given: "dog", predicted: "cat", probability: 0.8, images: { gradcam: "row3_gradcam.png" } }],
    suspect_labels: [{ row: 7, given: "cat", suggested: "dog", given_share: 0.05, suggested_share: 0.95 }],
    suspects: { method: "out-of-fold probabilities of the cross-validated linear floor", threshold: 0.2, found: 1, rows_checked: 40 },
  },
};

describe("model page", () => {
  it("predicts a text's classes, sending the CSRF token, and says when there is no report", async () => {
    const { calls } = renderApp(`/models/${MODEL_ID}`, {
      [`GET ${BASE}`]: { json: model() },
      [`GET ${BASE}/report`]: { status: 404, json: { title: "Not Found", status: 404, detail: "no report", reason: "report-absent" } },
      [`POST ${BASE}/predict`]: { json: { classes: ["ham", "spam"], predictions: [{ label: "spam", probabilities: [0.1, 0.9] }] } },
    });
    const user = userEvent.setup();
    expect(await screen.findByText(/No report yet/)).toBeInTheDocument();
    expect(screen.getByRole("link", { name: "Download ONNX" })).toHaveAttribute("href", `${BASE}/download?format=onnx`);
    expect(screen.getByRole("link", { name: "Download native" })).toHaveAttribute("href", `${BASE}/download?format=native`);
    await user.type(screen.getByLabelText("Text"), "win cash now");
    await user.click(screen.getByRole("button", { name: "Predict" }));
    const list = await screen.findByRole("list", { name: "Class probabilities" });
    const items = within(list).getAllByRole("listitem");
    expect(items[0]).toHaveTextContent("spam");
    expect(items[0]).toHaveTextContent("90.0 %");
    expect(items[1]).toHaveTextContent("ham");
    const post = calls.find((c) => c.method === "POST");
    expect(post?.headers.get("X-CSRF-Token")).toBe(CSRF);
    expect(jsonBody(post)).toEqual({ texts: ["win cash now"] });
  });

  it("draws the architecture, the compression and the report of an image model, and predicts an image", async () => {
    vi.spyOn(URL, "createObjectURL").mockReturnValue("blob:preview");
    vi.spyOn(URL, "revokeObjectURL").mockImplementation(() => undefined);
    const architecture = {
      input_shape: [28, 28, 1],
      layers: [
        { name: "conv1", op: "conv2d", output_shape: [28, 28, 16], params: 160, inputs: ["input"] },
        { name: "pool", op: "global_avg_pool", output_shape: [16], params: 0, inputs: ["conv1"] },
        { name: "logits", op: "dense", output_shape: [2], params: 34, inputs: ["pool"] },
      ],
    };
    const compression = {
      tolerance: 0.005, val_accuracy_before: 0.9, val_accuracy_after: 0.895, ratio: 7.5, stop_reason: "done",
      before: { params: 194, dense_bytes: 776, compressed_bytes: 776, accuracy: 0.9 },
      after: { params: 194, dense_bytes: 776, compressed_bytes: 104, accuracy: 0.895 },
    };
    const { calls } = renderApp(`/models/${MODEL_ID}`, {
      [`GET ${BASE}`]: { json: model({ classes: ["cat", "dog"], preprocessing: "image", variant: "compressed", architecture, compression, input: { shape: [28, 28, 1] } }) },
      [`GET ${BASE}/report`]: { json: REPORT },
      [`POST ${BASE}/predict`]: { json: { classes: ["cat", "dog"], predictions: [{ label: "cat", probabilities: [0.7, 0.3] }] } },
    });
    const user = userEvent.setup();
    const flow = await screen.findByRole("list", { name: "Layers from input to output" });
    expect(within(flow).getAllByRole("listitem")).toHaveLength(4);
    expect(within(flow).getByText("conv2d")).toBeInTheDocument();
    expect(within(flow).getByText("→ [28 × 28 × 16]")).toBeInTheDocument();
    expect(screen.getByText(/7.5× smaller/)).toBeInTheDocument();
    expect(await screen.findByRole("img", { name: /Confusion matrix of 2 classes/ })).toBeInTheDocument();
    expect(screen.getByRole("img", { name: /Grad-CAM of Row 3: given dog, predicted cat/ })).toHaveAttribute("src", `${BASE}/report/images/row3_gradcam.png`);
    expect(screen.getByRole("link", { name: "Open report page" })).toHaveAttribute("href", `${BASE}/report.html`);
    expect(screen.getByRole("cell", { name: "7" })).toBeInTheDocument();
    expect(screen.getByRole("cell", { name: "0.95" })).toBeInTheDocument();
    expect(screen.getByText(/1 of 40 training rows: their label has under 20 %/)).toBeInTheDocument();
    const csv = screen.getByRole("link", { name: "Download all 1 as CSV" });
    expect(csv).toHaveAttribute("download", "suspect_labels.csv");
    expect(decodeURIComponent(csv.getAttribute("href") ?? "")).toBe(
      'data:text/csv;charset=utf-8,row,given,suggested,given_share,suggested_share\n7,"cat","dog",0.05,0.95\n',
    );
    expect(screen.getByRole("alert")).toHaveTextContent("Grad-CAM failed its check on this model");

    await user.upload(screen.getByLabelText("Image"), new File([new Uint8Array(10)], "seven.png", { type: "image/png" }));
    await user.click(screen.getByRole("button", { name: "Predict" }));
    await waitFor(() => expect(screen.getByText(/Predicted:/)).toHaveTextContent("Predicted: cat (70.0 %)"));
    const post = calls.find((c) => c.method === "POST");
    expect(post?.headers.get("X-CSRF-Token")).toBe(CSRF);
    expect(post?.body).toBeInstanceOf(FormData);
    expect(((post?.body as FormData).get("files") as File).name).toBe("seven.png");
  });
});
