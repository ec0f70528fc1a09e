/** The search log as a table (TanStack Table): sortable by any column (click its header), filtered by text and by
 * status, exported as CSV in the order shown. */

import {
  createColumnHelper,
  flexRender,
  getCoreRowModel,
  getFilteredRowModel,
  getSortedRowModel,
  useReactTable,
} from "@tanstack/react-table";
import type { ColumnFiltersState, FilterFn, SortingState } from "@tanstack/react-table";
import { useId, useMemo, useState } from "react";
import { candidatesCsv } from "../lib/candidates";
import type { CandidateRow } from "../lib/candidates";
import { downloadText } from "../lib/download";
import { formatCount, formatDuration, formatNumber, formatPercent } from "../lib/format";
import { StateBadge } from "./ui";

const column = createColumnHelper<CandidateRow>();
/** Statuses whose reason says why the candidate failed (others may carry a note, shown muted). */
const FAILED = new Set(["failed", "rejected", "cancelled"]);

const matchesText: FilterFn<CandidateRow> = (row, _columnId, value: string) => {
  const needle = value.trim().toLowerCase();
  if (!needle) return true;
  const r = row.original;
  return [String(r.index), r.id, r.origin, r.summary, r.status, r.reason].some((field) => field.toLowerCase().includes(needle));
};

/** A numeric column whose missing values sort last whichever the direction. */
function numeric(id: "params" | "latencyMs" | "predicted" | "final" | "seconds", header: string,
  format: (value: number | null) => string) {
  return column.accessor((row) => row[id] ?? undefined, {
    id,
    header,
    cell: (c) => format(c.getValue() ?? null),
    sortUndefined: "last",
    sortingFn: "basic",
  });
}

const columns = [
  column.accessor("index", { header: "#", cell: (c) => c.getValue(), sortingFn: "basic" }),
  column.accessor("summary", {
    header: "Architecture",
    cell: (c) => (
      <span className="arch-summary" title={`${c.row.original.id} (${c.row.original.origin})`}>
        {c.getValue()}
      </span>
    ),
  }),
  numeric("params", "Parameters", formatCount),
  numeric("latencyMs", "Latency (ms)", (v) => formatNumber(v, 3)),
  column.accessor("epochs", { header: "Epochs", cell: (c) => c.getValue(), sortingFn: "basic" }),
  numeric("predicted", "Predicted", (v) => formatPercent(v)),
  numeric("final", "Final accuracy", (v) => formatPercent(v)),
  column.accessor("status", { header: "Status", cell: (c) => <StateBadge state={c.getValue()} />, filterFn: "equalsString" }),
  column.accessor("reason", {
    header: "Failure reason",
    cell: (c) => {
      const failed = FAILED.has(c.row.original.status);
      return <span className={failed ? "reason" : "reason muted"}>{c.getValue() || "—"}</span>;
    },
  }),
  numeric("seconds", "Time", formatDuration),
];

export function CandidatesTable({ rows, filename = "candidates.csv" }: { rows: CandidateRow[]; filename?: string }) {
  const id = useId();
  const [sorting, setSorting] = useState<SortingState>([]);
  const [globalFilter, setGlobalFilter] = useState("");
  const [columnFilters, setColumnFilters] = useState<ColumnFiltersState>([]);
  const statuses = useMemo(() => [...new Set(rows.map((r) => r.status))].sort(), [rows]);
  const status = (columnFilters.find((f) => f.id === "status")?.value as string | undefined) ?? "";

  // eslint-disable-next-line react-hooks/incompatible-library -- the table instance is used in this render only
  const table = useReactTable({
    data: rows,
    columns,
    state: { sorting, globalFilter, columnFilters },
    onSortingChange: setSorting,
    onGlobalFilterChange: setGlobalFilter,
    onColumnFiltersChange: setColumnFilters,
    globalFilterFn: matchesText,
    getCoreRowModel: getCoreRowModel(),
    getSortedRowModel: getSortedRowModel(),
    getFilteredRowModel: getFilteredRowModel(),
    getRowId: (row) => String(row.index),
  });
  const shown = table.getRowModel().rows;

  return (
    <div className="stack">
      <div className="row toolbar">
        <div className="field">
          <label htmlFor={`${id}-filter`}>Filter candidates</label>
          <input id={`${id}-filter`} type="search" value={globalFilter} placeholder="architecture, status, reason…"
            onChange={(event) => setGlobalFilter(event.target.value)} />
        </div>
        <div className="field">
          <label htmlFor={`${id}-status`}>Status</label>
          <select id={`${id}-status`} value={status}
            onChange={(event) => {
              const value = event.target.value;
              setColumnFilters(value ? [{ id: "status", value }] : []);
            }}>
            <option value="">All statuses</option>
            {statuses.map((s) => (
              <option key={s} value={s}>
                {s}
              </option>
            ))}
          </select>
        </div>
        <button type="button" onClick={() => downloadText(filename, candidatesCsv(shown.map((r) => r.original)))}
          disabled={shown.length === 0}>
          Export CSV
        </button>
      </div>
      <p className="muted" role="status" aria-live="polite">
        {shown.length === rows.length ? `${rows.length} candidates` : `${shown.length} of ${rows.length} candidates`}
      </p>
      <div className="table-scroll">
        <table className="candidates">
          <caption className="visually-hidden">Candidates of the search; column headers sort</caption>
          <thead>
            {table.getHeaderGroups().map((group) => (
              <tr key={group.id}>
                {group.headers.map((header) => {
                  const sorted = header.column.getIsSorted();
                  return (
                    <th key={header.id} scope="col"
                      aria-sort={sorted === "asc" ? "ascending" : sorted === "desc" ? "descending" : "none"}>
                      <button type="button" className="sort" onClick={header.column.getToggleSortingHandler()}>
                        {flexRender(header.column.columnDef.header, header.getContext())}
                        <span aria-hidden="true" className="sort-mark">
                          {sorted === "asc" ? "▲" : sorted === "desc" ? "▼" : "↕"}
                        </span>
                      </button>
                    </th>
                  );
                })}
              </tr>
            ))}
          </thead>
          <tbody>
            {shown.map((row) => (
              <tr key={row.id}>
                {row.getVisibleCells().map((cell) => (
                  <td key={cell.id}>{flexRender(cell.column.columnDef.cell, cell.getContext())}</td>
                ))}
              </tr>
            ))}
            {shown.length === 0 ? (
              <tr>
                <td colSpan={columns.length} className="muted">
                  {rows.length === 0 ? "No candidates yet." : "No candidate matches the filter."}
                </td>
              </tr>
            ) : null}
          </tbody>
        </table>
      </div>
    </div>
  );
}
