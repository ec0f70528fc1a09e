/** An Apache ECharts chart (canvas), built from `echarts/core` with only the charts and components the dashboard
 * uses, so that its chunk stays small; the theme follows the reader's colour scheme. Only lazily loaded pages import
 * this module, which keeps ECharts out of the initial bundle. */

import { BarChart, HeatmapChart, LineChart, ScatterChart } from "echarts/charts";
import type { BarSeriesOption, HeatmapSeriesOption, LineSeriesOption, ScatterSeriesOption } from "echarts/charts";
import {
  GridComponent,
  LegendComponent,
  TooltipComponent,
} from "echarts/components";
import type {
  GridComponentOption,
  LegendComponentOption,
  TooltipComponentOption,
} from "echarts/components";
import { init, use as registerModules } from "echarts/core";
import type { ComposeOption, EChartsType } from "echarts/core";
import { CanvasRenderer } from "echarts/renderers";
import { useEffect, useRef } from "react";
import { useColorScheme } from "../lib/useColorScheme";

registerModules([BarChart, HeatmapChart, LineChart, ScatterChart, GridComponent,
  LegendComponent, TooltipComponent, CanvasRenderer]);

export type ChartOption = ComposeOption<
  | BarSeriesOption
  | HeatmapSeriesOption
  | LineSeriesOption
  | ScatterSeriesOption
  | GridComponentOption
  | LegendComponentOption
  | TooltipComponentOption
>;

interface ChartProps {
  option: ChartOption;
  /** What the chart shows, for screen readers (the canvas itself says nothing). */
  label: string;
  height?: number;
}

export function Chart({ option, label, height = 320 }: ChartProps) {
  const element = useRef<HTMLDivElement>(null);
  const chart = useRef<EChartsType | null>(null);
  const scheme = useColorScheme();

  useEffect(() => {
    const node = element.current;
    if (node === null) return;
    const instance = init(node, scheme === "dark" ? "dark" : undefined, { renderer: "canvas" });
    chart.current = instance;
    const observer = typeof ResizeObserver === "undefined" ? null : new ResizeObserver(() => instance.resize());
    observer?.observe(node);
    return () => {
      observer?.disconnect();
      instance.dispose();
      chart.current = null;
    };
  }, [scheme]);

  useEffect(() => {
    chart.current?.setOption(
      { backgroundColor: "transparent", ...option },
      { notMerge: true },
    );
  }, [option, scheme]);

  return <div ref={element} className="chart" role="img" aria-label={label} style={{ height }} />;
}
