/** One job, live: state and stage, elapsed time against the budget with an ETA, the candidates (the stored search
 * log merged with live `candidate` events), learning curves, the Pareto front, its models, and cancelling it. */

import { useMutation, useQueryClient } from "@tanstack/react-query";
import { useEffect, useId, useMemo, useState } from "react";
import { Link, useParams } from "react-router";
import { unwrap } from "../api/client";
import { keys, useCandidates, useDatasets, useJob, usePareto } from "../api/queries";
import type { Job, JobEvent } from "../api/types";
import { isTerminal } from "../api/types";
import { useAuth } from "../auth/session";
import { CandidatesTable } from "../components/CandidatesTable";
import { Chart } from "../components/Chart";
import { ConfirmButton, ErrorNote, Fact, Loading, Section, StateBadge } from "../components/ui";
import { budgetWords } from "../lib/budget";
import { fromEvent, fromStored, mergeCandidates } from "../lib/candidates";
import type { CandidateRow } from "../lib/candidates";
import { bestOfJobOption, curvesOption, paretoOption } from "../lib/charts";
import type { ParetoAxis } from "../lib/charts";
import { describeEvent } from "../lib/events";
import { formatBytes, formatCount, formatDate, formatDuration, formatNumber, formatPercent, shortId } from "../lib/format";
import { num, obj } from "../lib/json";
import { useJobEvents } from "../lib/useJobEvents";
import type { Connection } from "../lib/useJobEvents";
import { useTitle } from "../lib/useTitle";

/** The current time, ticking every second while `active`. */
function useNow(active: boolean): number {
  const [now, setNow] = useState(() => Date.now());
  useEffect(() => {
    if (!active) return;
    const timer = setInterval(() => setNow(Date.now()), 1000);
    return () => clearInterval(timer);
  }, [active]);
  return now;
}

export interface Timing {
  elapsed: number;
  budget: number;
  /** Seconds still to go, or null when the job is not running. */
  eta: number | null;
}

/** Device-seconds spent (extrapolated from the last read while the job runs) against the budget, and an estimate of
 * the time left: from the progress when it says enough, never past the budget. */
export function jobTiming(job: Job, now: number, readAt: number): Timing {
  const budget = job.budget_seconds;
  let elapsed = job.device_seconds;
  if (job.state === "running") {
    const since = Math.max(0, (now - readAt) / 1000);
    const fromStart = job.started_at ? Math.max(0, (now - Date.parse(job.started_at)) / 1000) : 0;
    elapsed = elapsed > 0 ? elapsed + since : fromStart;
  }
  if (job.state !== "running") return { elapsed, budget, eta: null };
  const byBudget = Math.max(0, budget - elapsed);
  const p = job.progress;
  const byProgress = p > 0.02 && p < 1 ? (elapsed * (1 - p)) / p : byBudget;
  return { elapsed, budget, eta: Math.min(byBudget, byProgress) };
}

const CONNECTION_WORDS: Record<Connection, string> = {
  connecting: "connecting to live updates…",
  open: "live",
  reconnecting: "reconnecting…",
  ended: "log complete",
};

function Progress({ job, readAt, connection }: { job: Job; readAt: number; connection: Connection }) {
  const running = job.state === "running";
  const now = useNow(running);
  const { elapsed, budget, eta } = jobTiming(job, now, readAt);
  const share = budget > 0 ? Math.min(1, elapsed / budget) : 0;
  return (
    <Section title="Progress">
      <div className="progress-line">
        <progress max={1} value={job.progress} aria-label="Job progress" />
        <span>{formatPercent(job.progress, 0)}</span>
      </div>
      <dl className="facts">
        <Fact term="State">
          <StateBadge state={job.state} />
          {job.cancel_requested && !isTerminal(job.state) ? " (cancel requested)" : ""}
        </Fact>
        <Fact term="Stage">{job.stage ?? "—"}</Fact>
        <Fact term="Elapsed">
          {formatDuration(elapsed)} of {formatDuration(budget)} ({formatPercent(share, 0)} of the budget)
        </Fact>
        <Fact term="ETA">{eta === null ? (isTerminal(job.state) ? "finished" : "not started") : `about ${formatDuration(eta)} left`}</Fact>
        <Fact term="Updates">
          <span role="status">{CONNECTION_WORDS[connection]}</span>
        </Fact>
      </dl>
    </Section>
  );
}

function Details({ job, datasetName }: { job: Job; datasetName: string | undefined }) {
  const constraints = obj(job.constraints);
  return (
    <Section title="Settings">
      <dl className="facts">
        <Fact term="Dataset">
          {job.dataset_id ? <Link to={`/datasets/${job.dataset_id}`}>{datasetName ?? shortId(job.dataset_id)}</Link> : "deleted"}
        </Fact>
        <Fact term="Budget">{budgetWords(job.budget_tier, job.budget_seconds, job.budget_epochs, formatDuration)}</Fact>
        <Fact term="Constraints">
          {Object.keys(constraints).length === 0
            ? "none"
            : [
                num(constraints.max_params) !== null ? `≤ ${formatCount(num(constraints.max_params))} parameters` : null,
                num(constraints.max_model_bytes) !== null ? `≤ ${formatBytes(num(constraints.max_model_bytes))}` : null,
                num(constraints.max_latency_ms) !== null ? `≤ ${formatNumber(num(constraints.max_latency_ms), 2)} ms` : null,
              ]
                .filter(Boolean)
                .join(", ")}
        </Fact>
        <Fact term="Compression tolerance">{formatNumber(job.tolerance * 100, 2)} percentage points</Fact>
        <Fact term="Seed">{job.seed}</Fact>
        <Fact term="Queue">{job.queue}</Fact>
        <Fact term="Attempts">{job.attempts}</Fact>
        <Fact term="Created">{formatDate(job.created_at)}</Fact>
        <Fact term="Started">{formatDate(job.started_at)}</Fact>
        <Fact term="Finished">{formatDate(job.finished_at)}</Fact>
      </dl>
      {job.error ? <p className="error">Error: {job.error}</p> : null}
    </Section>
  );
}

function Curves({ rows, budget }: { rows: CandidateRow[]; budget: number }) {
  const best = useMemo(() => bestOfJobOption(rows, budget), [rows, budget]);
  const curves = useMemo(() => curvesOption(rows), [rows]);
  const measured = rows.filter((r) => r.measured !== null);
  const top = measured.length ? Math.max(...measured.map((r) => r.measured ?? 0)) : null;
  return (
    <Section title="Learning curves">
      <div className="charts-2">
        <figure>
          <figcaption>Best validation accuracy so far, over the budget's seconds</figcaption>
          <Chart option={best} label={top === null ? "No candidate has measured an accuracy yet" : `Best validation accuracy so far: ${formatPercent(top)} over ${measured.length} candidates`} height={280} />
        </figure>
        <figure>
          <figcaption>Each candidate's validation accuracy per epoch</figcaption>
          <Chart option={curves} label={`Validation curves of ${measured.length} candidates`} height={280} />
        </figure>
      </div>
    </Section>
  );
}

function Pareto({ jobId, rows }: { jobId: string; rows: CandidateRow[] }) {
  const pareto = usePareto(jobId);
  const [axis, setAxis] = useState<ParetoAxis>("params");
  const id = useId();
  const points = useMemo(() => pareto.data ?? [], [pareto.data]);
  const option = useMemo(() => paretoOption(points, rows, axis), [points, rows, axis]);
  const delivered = points.filter((p) => p.delivered);
  return (
    <Section title="Accuracy against size and latency">
      <fieldset className="switch">
        <legend>X axis</legend>
        <label htmlFor={`${id}-params`}>
          <input id={`${id}-params`} type="radio" name={`${id}-axis`} checked={axis === "params"} onChange={() => setAxis("params")} /> Size
        </label>
        <label htmlFor={`${id}-latency`}>
          <input id={`${id}-latency`} type="radio" name={`${id}-axis`} checked={axis === "latency_ms"} onChange={() => setAxis("latency_ms")} /> Latency
        </label>
      </fieldset>
      <ErrorNote error={pareto.error} />
      <Chart option={option} height={340}
        label={`Validation accuracy against ${axis === "params" ? "parameters" : "latency"}: ${rows.length} candidates, ${points.length} on the Pareto front, ${delivered.length} delivered`} />
      {points.length === 0 && !pareto.isPending ? <p className="muted">The Pareto front is stored when the job ends.</p> : null}
    </Section>
  );
}

function Activity({ events }: { events: JobEvent[] }) {
  const shown = events.filter((e) => e.kind !== "candidate").slice(-40).reverse();
  return (
    <Section title="Activity">
      {shown.length === 0 ? <p className="muted">No events yet.</p> : null}
      <ul className="activity">
        {shown.map((e) => (
          <li key={`${e.seq}-${e.kind}`} className={e.kind === "warning" || e.kind === "failed" ? "warn" : undefined}>
            <time dateTime={e.at ?? undefined}>{e.at ? new Date(e.at).toLocaleTimeString() : ""}</time> {describeEvent(e)}
          </li>
        ))}
      </ul>
    </Section>
  );
}

function JobView({ jobId }: { jobId: string }) {
  const job = useJob(jobId);
  const candidates = useCandidates(jobId);
  const datasets = useDatasets();
  const queryClient = useQueryClient();
  const { api } = useAuth();
  useTitle(`Job ${shortId(jobId)}`);

  const { events, connection } = useJobEvents(jobId, {
    onEvents: (batch) => {
      if (batch.some((e) => e.kind !== "candidate")) void queryClient.invalidateQueries({ queryKey: keys.job(jobId), exact: true });
    },
    onEnd: () => {
      void queryClient.invalidateQueries({ queryKey: keys.job(jobId) });
      void queryClient.invalidateQueries({ queryKey: keys.jobs, exact: true });
    },
  });

  const cancel = useMutation({
    mutationFn: () => unwrap(api.POST("/api/v1/jobs/{job_id}/cancel", { params: { path: { job_id: jobId } } })),
    onSuccess: (updated) => {
      queryClient.setQueryData(keys.job(jobId), updated);
      void queryClient.invalidateQueries({ queryKey: keys.jobs, exact: true });
    },
  });

  const live = useMemo(() => events.filter((e) => e.kind === "candidate").map((e) => fromEvent(e.payload)), [events]);
  const rows = useMemo(() => mergeCandidates((candidates.data ?? []).map(fromStored), live), [candidates.data, live]);
  const warnings = events.filter((e) => e.kind === "warning");

  if (job.isPending) return <Loading what="Loading the job" />;
  if (job.error) {
    return (
      <>
        <h1>Job {shortId(jobId)}</h1>
        <ErrorNote error={job.error} />
        <Link to="/jobs">All jobs</Link>
      </>
    );
  }
  const data = job.data;
  const ended = isTerminal(data.state);
  const datasetName = (datasets.data ?? []).find((d) => d.id === data.dataset_id)?.name;

  return (
    <>
      <div className="page-head">
        <h1>
          Job <code>{shortId(data.id)}</code> <StateBadge state={data.state} />
        </h1>
        <div className="actions">
          {data.models.map((m) => (
            <Link key={m.id} className="button" to={`/models/${m.id}`}>
              {m.variant === "dense" ? "Dense model" : m.variant === "compressed" ? "Compressed model" : `${m.variant} model`}
            </Link>
          ))}
          <ConfirmButton label="Cancel" question="Cancel this job? The best model trained so far is kept."
            confirmLabel="Yes, cancel job" keepLabel="No, keep running" onConfirm={() => cancel.mutate()}
            disabled={ended || data.cancel_requested || cancel.isPending} />
        </div>
      </div>
      <ErrorNote error={cancel.error} prefix="Not cancelled:" />
      {warnings.map((w) => (
        <p key={w.seq} className="warning" role="status">
          {describeEvent(w)}
        </p>
      ))}
      <Progress job={data} readAt={job.dataUpdatedAt} connection={connection} />
      <Section title="Candidates">
        <ErrorNote error={candidates.error} />
        <CandidatesTable rows={rows} filename={`netsynth-job-${shortId(data.id)}-candidates.csv`} />
        {!ended ? <p className="hint">The stored search log replaces these live rows when the job ends.</p> : null}
      </Section>
      <Curves rows={rows} budget={data.budget_seconds} />
      <Pareto jobId={jobId} rows={rows} />
      <Details job={data} datasetName={datasetName} />
      <Activity events={events} />
    </>
  );
}

export default function JobPage() {
  const { jobId = "" } = useParams();
  return <JobView key={jobId} jobId={jobId} />;
}
