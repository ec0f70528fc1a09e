/** Jobs side by side: their delivered models' metrics, size and latency, and their best-accuracy curves on one
 * chart. The choice lives in the address (`/compare?jobs=<id>,<id>`), so a comparison can be shared. */

import { useQueries } from "@tanstack/react-query";
import { useMemo } from "react";
import type { ReactNode } from "react";
import { Link, useSearchParams } from "react-router";
import { unwrap } from "../api/client";
import { keys, useDatasets, useJobs } from "../api/queries";
import type { Job, Model } from "../api/types";
import { useAuth } from "../auth/session";
import { Chart } from "../components/Chart";
import { ErrorNote, Loading, Section, StateBadge } from "../components/ui";
import { budgetWords } from "../lib/budget";
import { bestSoFar, fromStored } from "../lib/candidates";
import { bestOverTimeOption } from "../lib/charts";
import { formatBytes, formatCount, formatDate, formatDuration, formatNumber, formatPercent, shortId } from "../lib/format";
import { num, obj } from "../lib/json";
import { useTitle } from "../lib/useTitle";

function metric(model: Model | undefined, key: string): number | null {
  return model ? num(obj(model.metrics)[key]) : null;
}

export default function ComparePage() {
  useTitle("Compare");
  const { api } = useAuth();
  const [params, setParams] = useSearchParams();
  const jobs = useJobs();
  const datasets = useDatasets();
  const selected = useMemo(() => (params.get("jobs") ?? "").split(",").filter(Boolean), [params]);
  const names = new Map((datasets.data ?? []).map((d) => [d.id, d.name]));
  const byId = new Map((jobs.data ?? []).map((j) => [j.id, j]));

  function toggle(id: string, on: boolean) {
    const next = on ? [...selected, id] : selected.filter((s) => s !== id);
    setParams(next.length ? { jobs: next.join(",") } : {}, { replace: true });
  }

  const modelIds = selected.flatMap((id) => byId.get(id)?.model_ids ?? []);
  const models = useQueries({
    queries: modelIds.map((id) => ({
      queryKey: keys.model(id),
      queryFn: () => unwrap(api.GET("/api/v1/models/{model_id}", { params: { path: { model_id: id } } })),
    })),
  });
  const candidates = useQueries({
    queries: selected.map((id) => ({
      queryKey: keys.candidates(id),
      queryFn: () => unwrap(api.GET("/api/v1/jobs/{job_id}/candidates", { params: { path: { job_id: id } } })),
    })),
  });
  const modelById = new Map(models.flatMap((q) => (q.data ? [[q.data.id, q.data] as const] : [])));
  const candidateData = candidates.map((q) => q.data);

  const option = bestOverTimeOption(
    selected.map((id, i) => {
      const job = byId.get(id);
      const rows = (candidateData[i] ?? []).map(fromStored);
      const dataset = job?.dataset_id ? ` · ${names.get(job.dataset_id) ?? ""}` : "";
      return { name: `${shortId(id)}${dataset}`, points: bestSoFar(rows, job?.budget_seconds ?? 0) };
    }),
  );

  const chosen: Job[] = selected.flatMap((id) => byId.get(id) ?? []);
  const errors = [...models, ...candidates].map((q) => q.error).filter(Boolean);

  return (
    <>
      <h1>Compare jobs</h1>
      {jobs.isPending ? <Loading what="Loading jobs" /> : null}
      <ErrorNote error={jobs.error} />
      <Section title="Choose jobs">
        {jobs.data?.length === 0 ? <p>No jobs yet.</p> : null}
        <fieldset className="choices">
          <legend className="visually-hidden">Jobs to compare</legend>
          {(jobs.data ?? []).map((job) => (
            <label key={job.id} className="choice">
              <input type="checkbox" checked={selected.includes(job.id)} onChange={(event) => toggle(job.id, event.target.checked)} />{" "}
              Job {shortId(job.id)} · {job.dataset_id ? names.get(job.dataset_id) ?? shortId(job.dataset_id) : "deleted dataset"} ·{" "}
              {job.state} · {formatDate(job.created_at)}
            </label>
          ))}
        </fieldset>
        {selected.length < 2 ? <p className="hint">Pick two or more jobs.</p> : null}
      </Section>
      {errors.length ? <ErrorNote error={errors[0]} /> : null}
      {chosen.length > 0 ? (
        <>
          <Section title="Side by side">
            <div className="table-scroll">
              <table className="compare">
                <thead>
                  <tr>
                    <th scope="col">Figure</th>
                    {chosen.map((job) => (
                      <th scope="col" key={job.id}>
                        <Link to={`/jobs/${job.id}`}>Job {shortId(job.id)}</Link>
                      </th>
                    ))}
                  </tr>
                </thead>
                <tbody>
                  {ROWS.map(([label, value]) => (
                    <tr key={label}>
                      <th scope="row">{label}</th>
                      {chosen.map((job) => {
                        const dense = modelById.get(job.models.find((m) => m.variant === "dense")?.id ?? "");
                        const compressed = modelById.get(job.models.find((m) => m.variant === "compressed")?.id ?? "");
                        return <td key={job.id}>{value({ job, dense, compressed, dataset: job.dataset_id ? names.get(job.dataset_id) : undefined })}</td>;
                      })}
                    </tr>
                  ))}
                </tbody>
              </table>
            </div>
          </Section>
          <Section title="Best accuracy over time">
            <Chart option={option} label={`Best validation accuracy so far of ${chosen.length} jobs, over the seconds of their budgets`} />
          </Section>
        </>
      ) : null}
    </>
  );
}

interface Cell {
  job: Job;
  dense: Model | undefined;
  compressed: Model | undefined;
  dataset: string | undefined;
}

const ROWS: [string, (c: Cell) => ReactNode][] = [
  ["Dataset", (c) => c.dataset ?? (c.job.dataset_id ? shortId(c.job.dataset_id) : "deleted")],
  ["State", (c) => <StateBadge state={c.job.state} />],
  ["Budget", (c) => budgetWords(c.job.budget_tier, c.job.budget_seconds, c.job.budget_epochs, formatDuration)],
  ["Device time", (c) => formatDuration(c.job.device_seconds)],
  ["Test accuracy", (c) => formatPercent(metric(c.dense, "test_accuracy"))],
  ["Validation accuracy", (c) => formatPercent(metric(c.dense, "val_accuracy"))],
  ["Parameters", (c) => formatCount(c.dense?.param_count)],
  ["Weights", (c) => formatBytes(c.dense?.weights_bytes)],
  ["Latency (ms)", (c) => formatNumber(metric(c.dense, "latency_ms"), 3)],
  ["Trials", (c) => formatCount(metric(c.dense, "trials"))],
  ["Compressed test accuracy", (c) => formatPercent(metric(c.compressed, "test_accuracy"))],
  ["Compressed size", (c) => formatBytes(c.compressed?.weights_bytes)],
  ["Compressed latency (ms)", (c) => formatNumber(metric(c.compressed, "latency_ms"), 3)],
  ["Models", (c) =>
    c.job.models.length ? (
      <span className="links">
        {c.job.models.map((m) => (
          <Link key={m.id} to={`/models/${m.id}`}>
            {m.variant}
          </Link>
        ))}
      </span>
    ) : "—"],
];
