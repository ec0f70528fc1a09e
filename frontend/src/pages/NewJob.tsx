/** Starting a synthesis job: dataset, budget, constraints, compression tolerance (`POST /api/v1/jobs`). */

import { useMutation, useQueryClient } from "@tanstack/react-query";
import { useId, useState } from "react";
import type { SubmitEvent } from "react";
import { Link, useNavigate, useSearchParams } from "react-router";
import { unwrap } from "../api/client";
import { keys, useDatasets } from "../api/queries";
import type { JobCreate } from "../api/types";
import { useAuth } from "../auth/session";
import { AUTO_BUDGET, BudgetField, budgetToRequest } from "../components/BudgetField";
import type { BudgetValue } from "../components/BudgetField";
import { ErrorNote, Loading } from "../components/ui";
import { formatCount } from "../lib/format";
import { useTitle } from "../lib/useTitle";

const DEFAULT_TOLERANCE_PP = "0.5";

function positive(text: string, what: string, integer: boolean): number | undefined {
  if (!text.trim()) return undefined;
  const value = Number(text);
  if (!Number.isFinite(value) || value <= 0 || (integer && !Number.isInteger(value))) {
    throw new Error(`${what} must be a positive ${integer ? "whole number" : "number"}.`);
  }
  return value;
}

/** The request body of the form's fields; an Error saying which field is wrong. */
export function jobRequest(fields: {
  datasetId: string;
  budget: BudgetValue;
  maxParams: string;
  maxBytes: string;
  maxLatency: string;
  tolerancePp: string;
  seed?: string;
}): JobCreate {
  if (!fields.datasetId) throw new Error("Choose a dataset.");
  const seed = fields.seed?.trim() ? Number(fields.seed) : 0;
  if (!Number.isInteger(seed) || seed < 0 || seed > 2 ** 31 - 1) throw new Error("Seed must be a whole number from 0.");
  const body: JobCreate = { dataset_id: fields.datasetId, seed };
  const budget = budgetToRequest(fields.budget);
  if (budget !== undefined) body.budget = budget;
  const constraints = {
    max_params: positive(fields.maxParams, "Max parameters", true),
    max_model_bytes: positive(fields.maxBytes, "Max model bytes", true),
    max_latency_ms: positive(fields.maxLatency, "Max latency (ms)", false),
  };
  const given = Object.fromEntries(Object.entries(constraints).filter(([, v]) => v !== undefined));
  if (Object.keys(given).length > 0) body.constraints = given;
  if (fields.tolerancePp.trim()) {
    const points = Number(fields.tolerancePp);
    if (!Number.isFinite(points) || points < 0 || points > 20) {
      throw new Error("Compression tolerance must be from 0 to 20 percentage points.");
    }
    body.tolerance = Math.round(points * 1e4) / 1e6; // percentage points → a fraction, without float noise
  }
  return body;
}

export default function NewJobPage() {
  useTitle("New job");
  const [params] = useSearchParams();
  const datasets = useDatasets();
  const { api } = useAuth();
  const navigate = useNavigate();
  const queryClient = useQueryClient();
  const id = useId();
  const [datasetId, setDatasetId] = useState(params.get("dataset") ?? "");
  const [budget, setBudget] = useState<BudgetValue>(AUTO_BUDGET);
  const [maxParams, setMaxParams] = useState("");
  const [maxBytes, setMaxBytes] = useState("");
  const [maxLatency, setMaxLatency] = useState("");
  const [tolerancePp, setTolerancePp] = useState(DEFAULT_TOLERANCE_PP);
  const [seed, setSeed] = useState("0");
  const [invalid, setInvalid] = useState<Error | null>(null);

  const start = useMutation({
    mutationFn: (body: JobCreate) => unwrap(api.POST("/api/v1/jobs", { body })),
    onSuccess: (job) => {
      queryClient.setQueryData(keys.job(job.id), job);
      void queryClient.invalidateQueries({ queryKey: keys.jobs, exact: true });
      void navigate(`/jobs/${job.id}`);
    },
  });

  const ready = (datasets.data ?? []).filter((d) => d.status === "ready");
  const chosen = datasetId || ready[0]?.id || "";

  function submit(event: SubmitEvent<HTMLFormElement>) {
    event.preventDefault();
    setInvalid(null);
    let body: JobCreate;
    try {
      body = jobRequest({ datasetId: chosen, budget, maxParams, maxBytes, maxLatency, tolerancePp, seed });
    } catch (error) {
      setInvalid(error instanceof Error ? error : new Error(String(error)));
      return;
    }
    start.mutate(body);
  }

  return (
    <>
      <h1>New job</h1>
      {datasets.isPending ? <Loading what="Loading datasets" /> : null}
      <ErrorNote error={datasets.error} />
      {datasets.data && ready.length === 0 ? (
        <p>
          You have no ready dataset. <Link to="/datasets">Upload one</Link> first.
        </p>
      ) : null}
      <form className="panel stack" onSubmit={submit} noValidate>
        <div className="field">
          <label htmlFor={`${id}-dataset`}>Dataset</label>
          <select id={`${id}-dataset`} value={chosen} onChange={(event) => setDatasetId(event.target.value)}>
            {ready.length === 0 ? <option value="">No dataset</option> : null}
            {ready.map((d) => (
              <option key={d.id} value={d.id}>
                {d.name} ({d.modality}, {formatCount(d.sample_count)} samples, {d.classes.length} classes)
              </option>
            ))}
          </select>
        </div>
        <h2 className="h3">Compute budget</h2>
        <BudgetField value={budget} onChange={setBudget} />
        <h2 className="h3">Constraints on the delivered model (optional)</h2>
        <div className="row">
          <div className="field">
            <label htmlFor={`${id}-params`}>Max parameters</label>
            <input id={`${id}-params`} type="number" inputMode="numeric" min={1} step={1} value={maxParams}
              onChange={(event) => setMaxParams(event.target.value)} />
          </div>
          <div className="field">
            <label htmlFor={`${id}-bytes`}>Max model bytes</label>
            <input id={`${id}-bytes`} type="number" inputMode="numeric" min={1} step={1} value={maxBytes}
              onChange={(event) => setMaxBytes(event.target.value)} />
          </div>
          <div className="field">
            <label htmlFor={`${id}-latency`}>Max latency (ms)</label>
            <input id={`${id}-latency`} type="number" inputMode="decimal" min={0} step="any" value={maxLatency}
              onChange={(event) => setMaxLatency(event.target.value)} />
          </div>
        </div>
        <div className="field narrow">
          <label htmlFor={`${id}-tolerance`}>Compression tolerance</label>
          <input id={`${id}-tolerance`} type="number" inputMode="decimal" min={0} max={20} step={0.1} value={tolerancePp}
            onChange={(event) => setTolerancePp(event.target.value)} aria-describedby={`${id}-tolerance-hint`} />
          <p id={`${id}-tolerance-hint`} className="hint">
            Percentage points of validation accuracy the compressed model may lose against the dense one (0 to 20;
            default 0.5).
          </p>
        </div>
        <div className="field narrow">
          <label htmlFor={`${id}-seed`}>Seed</label>
          <input id={`${id}-seed`} type="number" inputMode="numeric" min={0} step={1} value={seed}
            onChange={(event) => setSeed(event.target.value)} aria-describedby={`${id}-seed-hint`} />
          <p id={`${id}-seed-hint`} className="hint">Seed of the data split and the search.</p>
        </div>
        {invalid ? (
          <p role="alert" className="error">
            {invalid.message}
          </p>
        ) : null}
        <ErrorNote error={start.error} prefix="The job was not started:" />
        <div className="row">
          <button type="submit" className="primary" disabled={start.isPending}>
            Start job
          </button>
        </div>
      </form>
    </>
  );
}
