/** ECharts options of the dashboard's charts, built from plain data (types only: this module loads no ECharts). */

import type { ParetoPoint } from "../api/types";
import type { ChartOption } from "../components/Chart";
import { bestSoFar } from "./candidates";
import type { CandidateRow } from "./candidates";

const percentAxis = { type: "value" as const, name: "accuracy", min: (v: { min: number }) => Math.max(0, Math.floor(v.min * 20) / 20), max: 1 };

/** Best validation accuracy so far against seconds into the budget, one line per named series. */
export function bestOverTimeOption(series: { name: string; points: [number, number][] }[]): ChartOption {
  return {
    tooltip: { trigger: "axis", valueFormatter: (v) => (typeof v === "number" ? `${(v * 100).toFixed(2)} %` : String(v)) },
    legend: { show: series.length > 1, top: 0 },
    grid: { left: 56, right: 24, top: series.length > 1 ? 36 : 16, bottom: 44 },
    xAxis: { type: "value", name: "seconds", nameLocation: "middle", nameGap: 28, min: 0 },
    yAxis: percentAxis,
    series: series.map((s) => ({ type: "line", name: s.name, step: "end", data: s.points, showSymbol: s.points.length < 60 })),
  };
}

export function bestOfJobOption(rows: CandidateRow[], budgetSeconds: number): ChartOption {
  return bestOverTimeOption([{ name: "best so far", points: bestSoFar(rows, budgetSeconds) }]);
}

/** Each candidate's validation accuracy per epoch. */
export function curvesOption(rows: CandidateRow[]): ChartOption {
  const trained = rows.filter((r) => r.curve.length > 0);
  return {
    tooltip: { trigger: "item", valueFormatter: (v) => (Array.isArray(v) ? `${((v[1] as number) * 100).toFixed(2)} %` : String(v)) },
    grid: { left: 56, right: 24, top: 16, bottom: 44 },
    xAxis: { type: "value", name: "epoch", nameLocation: "middle", nameGap: 28, minInterval: 1, min: 1 },
    yAxis: percentAxis,
    series: trained.map((r) => ({
      type: "line",
      name: `#${r.index} ${r.summary}`,
      data: r.curve.map((v, i) => [i + 1, v]),
      showSymbol: r.curve.length === 1,
      symbolSize: 5,
      lineStyle: { width: 1.5 },
      emphasis: { focus: "series" },
    })),
  };
}

export type ParetoAxis = "params" | "latency_ms";

/** Accuracy against size or latency: every trained candidate, the Pareto front, and the delivered models. */
export function paretoOption(points: ParetoPoint[], rows: CandidateRow[], axis: ParetoAxis): ChartOption {
  const x = (p: { params: number | null; latency_ms: number | null }) => (axis === "params" ? p.params : p.latency_ms);
  const all = rows
    .filter((r) => r.measured !== null && r.status !== "failed" && r.status !== "rejected")
    .map((r) => ({ name: `#${r.index} ${r.summary}`, value: [x({ params: r.params, latency_ms: r.latencyMs }) ?? 0, r.accuracy ?? r.measured ?? 0] }));
  const front = points
    .filter((p) => !p.delivered)
    .map((p) => ({ name: `candidate ${p.candidate}`, value: [x(p) ?? 0, p.accuracy] }))
    .sort((a, b) => (a.value[0] ?? 0) - (b.value[0] ?? 0));
  const delivered = points
    .filter((p) => p.delivered)
    .map((p) => ({ name: `${p.variant ?? "delivered"} model`, value: [x(p) ?? 0, p.accuracy] }));
  return {
    tooltip: { trigger: "item" },
    legend: { top: 0 },
    grid: { left: 56, right: 96, top: 56, bottom: 48 },
    xAxis: {
      type: axis === "params" ? "log" : "value",
      name: axis === "params" ? "parameters" : "latency (ms)",
      nameLocation: "middle",
      nameGap: 30,
      scale: true,
    },
    yAxis: { ...percentAxis, max: (v: { max: number }) => Math.min(1, Math.ceil(v.max * 50) / 50) },
    series: [
      { type: "scatter", name: "candidates", data: all, symbolSize: 6, itemStyle: { opacity: 0.35 } },
      { type: "scatter", name: "Pareto front", data: front, symbolSize: 10 },
      {
        type: "scatter",
        name: "delivered",
        data: delivered,
        symbol: "diamond",
        symbolSize: 18,
        label: { show: true, position: "right", formatter: "{b}" },
      },
    ],
  };
}

/** A cell colour from the page's background (none) to the accent (the largest count), as the theme reads. */
export function heatColour(share: number, dark: boolean): string {
  const t = Math.max(0, Math.min(1, share)) ** 0.6; // lift small counts off the background
  const from = dark ? [32, 36, 42] : [243, 245, 248];
  const to = dark ? [110, 168, 255] : [31, 95, 191];
  const mix = from.map((c, i) => Math.round(c + ((to[i] ?? c) - c) * t));
  return `rgb(${mix.join(", ")})`;
}

/** A confusion matrix as a heat map (rows: true class, from the top; columns: predicted class); each cell is
 * coloured by its share of the largest count, and labelled with its count when there is room. */
export function confusionOption(matrix: number[][], classes: string[], dark = false): ChartOption {
  let top = 1;
  for (const row of matrix) for (const count of row) top = Math.max(top, count);
  const data = matrix.flatMap((row, t) =>
    row.map((count, p) => ({
      value: [p, t, count],
      itemStyle: { color: heatColour(count / top, dark) },
      label: { color: count / top > 0.45 ? (dark ? "#0b1220" : "#ffffff") : dark ? "#e6e8eb" : "#1b1f24" },
    })),
  );
  const many = classes.length > 12;
  return {
    tooltip: { position: "top" },
    grid: { left: 8, right: 16, top: 16, bottom: many ? 64 : 40 },
    xAxis: { type: "category", data: classes, name: "predicted", nameLocation: "middle", nameGap: many ? 48 : 28, axisLabel: { rotate: many ? 60 : 0, interval: 0 } },
    yAxis: { type: "category", data: classes, inverse: true, axisLabel: { interval: 0 } },
    series: [{ type: "heatmap", name: "test rows", data, label: { show: classes.length <= 12 }, emphasis: { itemStyle: { borderWidth: 1, borderColor: "#f0a202" } } }],
  };
}
