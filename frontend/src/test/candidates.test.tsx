import { render, screen, within } from "@testing-library/react";
import userEvent from "@testing-library/user-event";
import { describe, expect, it, vi } from "vitest";
import { CandidatesTable } from "../components/CandidatesTable";
import { candidatesCsv, fromEvent } from "../lib/candidates";
import { trial } from "./fixtures";

const ROWS = [
  fromEvent(trial(0, { params: 5000 })),
  fromEvent(trial(1, { params: 1000, status: "stopped", curve: [0.4], accuracy: 0.6, predicted: 0.66 })),
  fromEvent(trial(2, { params: 3000, status: "failed", reason: "out of memory: RESOURCE_EXHAUSTED", curve: [], accuracy: 0, predicted: 0 })),
  fromEvent(trial(3, { params: 2000, arch: { kind: "text", encoder: "cnn", embed: 64, kernels: [2, 3], filters: 100, pool: "max", hidden: 0 } })),
];

/** The "#" cell of every body row, in the order shown. */
function shownIndices(): string[] {
  const table = screen.getByRole("table");
  return within(table)
    .getAllByRole("row")
    .slice(1)
    .map((row) => within(row).getAllByRole("cell")[0]?.textContent ?? "");
}

describe("candidates table", () => {
  it("sorts by a column when its header is clicked, both ways", async () => {
    const user = userEvent.setup();
    render(<CandidatesTable rows={ROWS} />);
    expect(shownIndices()).toEqual(["0", "1", "2", "3"]);
    const header = screen.getByRole("button", { name: /^Parameters/ });
    await user.click(header);
    const first = shownIndices();
    await user.click(header);
    const second = shownIndices();
    expect([first, second]).toContainEqual(["1", "3", "2", "0"]); // ascending by parameters
    expect([first, second]).toContainEqual(["0", "2", "3", "1"]); // descending
    expect(screen.getByRole("columnheader", { name: /Parameters/ })).toHaveAttribute("aria-sort", second[0] === "1" ? "ascending" : "descending");
  });

  it("filters by text and by status", async () => {
    const user = userEvent.setup();
    render(<CandidatesTable rows={ROWS} />);
    await user.type(screen.getByLabelText("Filter candidates"), "memory");
    expect(shownIndices()).toEqual(["2"]);
    expect(screen.getByText("1 of 4 candidates")).toBeInTheDocument();
    await user.clear(screen.getByLabelText("Filter candidates"));
    await user.type(screen.getByLabelText("Filter candidates"), "cnn e64");
    expect(shownIndices()).toEqual(["3"]);
    await user.clear(screen.getByLabelText("Filter candidates"));
    await user.selectOptions(screen.getByLabelText("Status"), "stopped");
    expect(shownIndices()).toEqual(["1"]);
    await user.selectOptions(screen.getByLabelText("Status"), "");
    expect(shownIndices()).toEqual(["0", "1", "2", "3"]);
  });

  it("exports the rows shown, in their order, as CSV", async () => {
    const user = userEvent.setup();
    const blobs: Blob[] = [];
    vi.spyOn(URL, "createObjectURL").mockImplementation((blob) => {
      blobs.push(blob as Blob);
      return "blob:csv";
    });
    vi.spyOn(URL, "revokeObjectURL").mockImplementation(() => undefined);
    const click = vi.spyOn(HTMLAnchorElement.prototype, "click").mockImplementation(() => undefined);
    render(<CandidatesTable rows={ROWS} filename="job.csv" />);
    await user.selectOptions(screen.getByLabelText("Status"), "completed");
    await user.click(screen.getByRole("button", { name: /^Parameters/ }));
    await user.click(screen.getByRole("button", { name: "Export CSV" }));

    expect(click).toHaveBeenCalledOnce();
    expect(blobs).toHaveLength(1);
    const text = await new Promise<string>((resolve) => {
      const reader = new FileReader();
      reader.onload = () => resolve(reader.result as string);
      reader.readAsText(blobs[0] as Blob);
    });
    const lines = text.trim().split("\r\n");
    expect(lines[0]).toBe("index,id,origin,architecture,params,macs,latency_ms,epochs,predicted,final_accuracy,best_measured,status,reason,seconds,curve");
    expect(lines.slice(1).map((l) => l.split(",")[0])).toEqual(shownIndices());
    expect(lines).toHaveLength(3);
  });

  it("quotes CSV cells with commas, quotes and line breaks", () => {
    const row = fromEvent(trial(7, { status: "failed", reason: 'bad "shape", at\nlayer 2' }));
    const csv = candidatesCsv([row]);
    expect(csv).toContain('"bad ""shape"", at\nlayer 2"');
    expect(csv.split("\r\n")[1]?.startsWith("7,genome7,random,plain 2×256,")).toBe(true);
  });
});
