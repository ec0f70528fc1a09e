import { act, screen, within } from "@testing-library/react";
import userEvent from "@testing-library/user-event";
import { describe, expect, it, vi } from "vitest";
import { CSRF, renderApp } from "./utils";

vi.mock("../components/Chart", () => ({ Chart: ({ label }: { label: string }) => <div role="img" aria-label={label} /> }));

/** A stand-in for XMLHttpRequest that the test drives: progress events, then the answer. */
class FakeXhr {
  static last: FakeXhr | null = null;
  method = "";
  url = "";
  headers: Record<string, string> = {};
  body: FormData | null = null;
  status = 0;
  responseText = "";
  withCredentials = false;
  responseHeaders: Record<string, string> = {};
  upload: { onprogress: ((e: ProgressEvent) => void) | null; onload: (() => void) | null } = { onprogress: null, onload: null };
  onload: (() => void) | null = null;
  onerror: (() => void) | null = null;
  onabort: (() => void) | null = null;

  constructor() {
    FakeXhr.last = this;
  }
  open(method: string, url: string) {
    this.method = method;
    this.url = url;
  }
  setRequestHeader(name: string, value: string) {
    this.headers[name] = value;
  }
  getResponseHeader(name: string) {
    return this.responseHeaders[name] ?? null;
  }
  send(body: FormData) {
    this.body = body;
  }
  abort() {
    this.onabort?.();
  }
  progress(loaded: number, total: number) {
    this.upload.onprogress?.({ loaded, total, lengthComputable: true } as ProgressEvent);
  }
  answer(status: number, json: unknown) {
    this.upload.onload?.();
    this.status = status;
    this.responseText = JSON.stringify(json);
    this.onload?.();
  }
}

const ROUTES = { "GET /api/v1/datasets": { json: [] } };

async function chooseAndUpload() {
  const user = userEvent.setup();
  const input = await screen.findByLabelText("Dataset file");
  const file = new File([new Uint8Array(1000)], "digits.zip", { type: "application/zip" });
  await user.upload(input, file);
  await user.click(screen.getByRole("button", { name: "Upload" }));
  const xhr = FakeXhr.last;
  if (!xhr) throw new Error("no upload was sent");
  return { xhr, file };
}

describe("dataset upload", () => {
  it("shows real progress, sends the CSRF token, and shows a refusal's reason and detail", async () => {
    vi.stubGlobal("XMLHttpRequest", FakeXhr);
    renderApp("/datasets", ROUTES);
    const { xhr, file } = await chooseAndUpload();
    expect(xhr.method).toBe("POST");
    expect(xhr.url).toBe("/api/v1/datasets");
    expect(xhr.headers["X-CSRF-Token"]).toBe(CSRF);
    expect(xhr.body?.get("file")).toBeInstanceOf(File);
    expect((xhr.body?.get("file") as File).name).toBe(file.name);

    act(() => xhr.progress(250, 1000));
    const bar = await screen.findByRole("progressbar", { name: "Upload progress" });
    await vi.waitFor(() => expect(bar).toHaveAttribute("aria-valuenow", "25"));
    act(() => xhr.progress(1000, 1000));
    await vi.waitFor(() => expect(screen.getByRole("progressbar", { name: "Upload progress" })).toHaveAttribute("aria-valuenow", "100"));

    act(() => xhr.answer(422, {
      type: "urn:netsynth:problem:dataset-rejected",
      title: "Unprocessable Content",
      status: 422,
      detail: "member a.png expands 500 times its compressed size",
      reason: "zip-bomb",
    }));
    const alert = await screen.findByRole("alert");
    expect(alert).toHaveTextContent("zip bomb");
    expect(alert).toHaveTextContent("member a.png expands 500 times its compressed size");
    expect(alert).toHaveTextContent("zip-bomb");
    expect(screen.queryByRole("progressbar")).not.toBeInTheDocument();
  });

  it("opens the new dataset's profile once the upload is accepted, and lists it", async () => {
    vi.stubGlobal("XMLHttpRequest", FakeXhr);
    const dataset = {
      id: "11111111-1111-1111-1111-111111111111", name: "digits", modality: "image", format: "image_zip",
      filename: "digits.zip", status: "ready", classes: ["0", "1"], class_counts: { "0": 5, "1": 5 }, sample_count: 10,
      size_bytes: 1000, checksum: "ab".repeat(32), profile: {}, created_at: "2026-12-05T10:00:00Z",
    };
    let listed: unknown[] = [];
    renderApp("/datasets", {
      "GET /api/v1/datasets": () => ({ json: listed }),
      [`GET /api/v1/datasets/${dataset.id}/samples`]: { json: { modality: "image", samples: [] } },
    });
    expect(await screen.findByText(/No datasets yet/)).toBeInTheDocument();
    const { xhr } = await chooseAndUpload();
    listed = [dataset];
    act(() => xhr.answer(201, dataset));
    expect(await screen.findByRole("heading", { name: "Dataset digits" })).toBeInTheDocument();
    expect(screen.getByText("Samples", { selector: "dt" }).nextSibling).toHaveTextContent("10");
    const user = userEvent.setup();
    await user.click(screen.getByRole("navigation", { name: "Main" }).querySelector("a[href='/datasets']") as HTMLElement);
    const table = await screen.findByRole("table");
    expect(within(table).getByRole("link", { name: "digits" })).toHaveAttribute("href", `/datasets/${dataset.id}`);
  });
});
