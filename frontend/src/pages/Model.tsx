/** One trained model: its architecture, metrics, confusion matrix, compression before / after, explainability
 * report, a try-it box and its downloads. */

import { useState } from "react";
import { Link, useParams } from "react-router";
import { useModel, useReport } from "../api/queries";
import type { Architecture, Layer, Model } from "../api/types";
import { ConfusionMatrix, Explainability } from "../components/Report";
import { TryIt } from "../components/TryIt";
import { ErrorNote, Fact, Loading, Section } from "../components/ui";
import { formatBytes, formatCount, formatDate, formatNumber, formatPercent, formatValue, shortId } from "../lib/format";
import { arr, num, obj, str } from "../lib/json";
import type { JsonObject } from "../lib/json";
import { useTitle } from "../lib/useTitle";

function shape(dims: unknown): string {
  return `[${arr(dims).map((d) => (typeof d === "number" ? String(d) : "?")).join(" × ")}]`;
}

/** The model's `architecture`, when the API describes it. */
export function architectureOf(model: Model): Architecture | null {
  return model.architecture && Array.isArray(model.architecture.layers) ? model.architecture : null;
}

/** Layers that read only the layer before them and change little (normalisation, activation, dropout) join that
 * layer's box unless every layer is asked for. */
const FOLDED = new Set(["batch_norm", "activation", "dropout", "relu", "layer_norm"]);

interface Block {
  layers: Layer[];
}

export function foldLayers(layers: Layer[]): Block[] {
  const blocks: Block[] = [];
  for (const layer of layers) {
    const last = blocks.at(-1);
    const previous = last?.layers.at(-1)?.name;
    if (last && FOLDED.has(layer.op) && layer.inputs.length === 1 && layer.inputs[0] === previous) last.layers.push(layer);
    else blocks.push({ layers: [layer] });
  }
  return blocks;
}

function ArchitectureFlow({ architecture }: { architecture: Architecture }) {
  const [every, setEvery] = useState(false);
  const total = architecture.layers.reduce((sum, layer) => sum + (layer.params || 0), 0);
  const blocks = every ? architecture.layers.map((layer) => ({ layers: [layer] })) : foldLayers(architecture.layers);
  return (
    <>
      <div className="row toolbar">
        <p className="muted">
          {architecture.layers.length} layers, {formatCount(total)} parameters; input {shape(architecture.input_shape)}.
        </p>
        <label className="choice">
          <input type="checkbox" checked={every} onChange={(event) => setEvery(event.target.checked)} /> Show every layer
        </label>
      </div>
      <ol className="arch-flow" aria-label="Layers from input to output">
        <li className="arch-box input">
          <span className="op">input</span> <span className="shape">{shape(architecture.input_shape)}</span>
        </li>
        {blocks.map((block, i) => {
          const first = block.layers[0] as Layer;
          const last = block.layers.at(-1) ?? first;
          const params = block.layers.reduce((sum, layer) => sum + (layer.params || 0), 0);
          const previous = i > 0 ? blocks[i - 1]?.layers.at(-1)?.name : "input";
          const branching = first.inputs.length > 1 || (first.inputs.length === 1 && first.inputs[0] !== previous);
          return (
            <li key={first.name} className={`arch-box op-${first.op.replace(/[^a-z0-9_-]/gi, "")}`}>
              <span className="op">{block.layers.map((layer) => layer.op).join(" · ")}</span>{" "}
              <span className="name">{first.name}</span>
              <span className="shape">→ {shape(last.output_shape)}</span>
              {params ? <span className="params">{formatCount(params)} params</span> : null}
              {branching ? <span className="inputs">from {first.inputs.join(", ")}</span> : null}
            </li>
          );
        })}
      </ol>
    </>
  );
}

const COMPRESSION_ROWS: [string, string, (v: number | null) => string][] = [
  ["params", "Parameters", formatCount],
  ["nonzeros", "Non-zero values", formatCount],
  ["dense_bytes", "Float32 size", formatBytes],
  ["compressed_bytes", "Compressed size", formatBytes],
  ["onnx_bytes", "ONNX size", formatBytes],
  ["onnx_gzip_bytes", "ONNX gzip size", formatBytes],
  ["macs", "Multiply-adds", formatCount],
  ["macs_nonzero", "Multiply-adds (non-zero)", formatCount],
  ["latency_ms", "Latency (ms)", (v) => formatNumber(v, 3)],
  ["accuracy", "Test accuracy", (v) => formatPercent(v)],
];

function Compression({ compression }: { compression: JsonObject }) {
  const before = obj(compression.before);
  const after = obj(compression.after);
  return (
    <Section title="Compression">
      <dl className="facts">
        <Fact term="Ratio">{formatNumber(num(compression.ratio), 1)}× smaller (float32 size / compressed size)</Fact>
        <Fact term="Validation accuracy">
          {formatPercent(num(compression.val_accuracy_before))} → {formatPercent(num(compression.val_accuracy_after))}
        </Fact>
        <Fact term="Tolerance">{formatNumber((num(compression.tolerance) ?? 0) * 100, 2)} percentage points</Fact>
        {str(compression.stop_reason) ? <Fact term="Stopped">{str(compression.stop_reason)}</Fact> : null}
      </dl>
      <div className="table-scroll">
        <table>
          <caption className="visually-hidden">The network before and after compression</caption>
          <thead>
            <tr>
              <th scope="col">Figure</th>
              <th scope="col" className="num">Before</th>
              <th scope="col" className="num">After</th>
            </tr>
          </thead>
          <tbody>
            {COMPRESSION_ROWS.filter(([key]) => key in before || key in after).map(([key, label, format]) => (
              <tr key={key}>
                <th scope="row">{label}</th>
                <td className="num">{format(num(before[key]))}</td>
                <td className="num">{format(num(after[key]))}</td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>
    </Section>
  );
}

const METRICS: [string, string][] = [
  ["test_accuracy", "Test accuracy"],
  ["val_accuracy", "Validation accuracy"],
  ["test_loss", "Test loss"],
  ["test_ece", "Calibration error (test ECE)"],
  ["latency_ms", "Latency (ms, one sample)"],
  ["params", "Parameters"],
  ["nonzero_params", "Non-zero parameters"],
  ["macs", "Multiply-adds"],
  ["weights_bytes", "Weights size"],
  ["onnx_bytes", "ONNX size"],
  ["model_bytes", "Compressed artifact size"],
  ["trials", "Candidates tried"],
  ["search_stop", "Search stopped"],
  ["candidate", "Winning candidate"],
];
const PERCENT = new Set(["test_accuracy", "val_accuracy"]);
const BYTES = new Set(["weights_bytes", "onnx_bytes", "model_bytes"]);

function Metrics({ model }: { model: Model }) {
  const metrics = obj(model.metrics);
  const warning = str(metrics.warning);
  return (
    <Section title="Metrics">
      {warning ? <p className="warning">{warning}</p> : null}
      <dl className="facts">
        {METRICS.filter(([key]) => key in metrics).map(([key, term]) => (
          <Fact key={key} term={term}>
            {PERCENT.has(key) ? formatPercent(num(metrics[key])) : BYTES.has(key) ? formatBytes(num(metrics[key])) : formatValue(metrics[key])}
          </Fact>
        ))}
        <Fact term="Input">
          {shape(obj(model.input).shape)} {str(obj(model.input).dtype) ?? ""} ({model.preprocessing})
        </Fact>
        <Fact term="Classes">{model.classes.length}: {model.classes.slice(0, 12).join(", ")}{model.classes.length > 12 ? ", …" : ""}</Fact>
      </dl>
    </Section>
  );
}

function ModelView({ modelId }: { modelId: string }) {
  const model = useModel(modelId);
  const report = useReport(modelId);
  useTitle(`Model ${shortId(modelId)}`);
  if (model.isPending) return <Loading what="Loading the model" />;
  if (model.error) {
    return (
      <>
        <h1>Model {shortId(modelId)}</h1>
        <ErrorNote error={model.error} />
      </>
    );
  }
  const data = model.data;
  const architecture = architectureOf(data);
  const download = `/api/v1/models/${encodeURIComponent(data.id)}/download`;
  return (
    <>
      <div className="page-head">
        <h1>
          Model <code>{shortId(data.id)}</code> <span className="badge">{data.variant}</span>
        </h1>
        <div className="actions">
          <a className="button" href={`${download}?format=onnx`} download>
            Download ONNX
          </a>
          <a className="button" href={`${download}?format=native`} download>
            Download native
          </a>
        </div>
      </div>
      <p className="muted">
        From <Link to={`/jobs/${data.job_id}`}>job {shortId(data.job_id)}</Link>
        {data.dataset_id ? (
          <>
            {" "}on <Link to={`/datasets/${data.dataset_id}`}>dataset {shortId(data.dataset_id)}</Link>
          </>
        ) : null}
        , created {formatDate(data.created_at)}. {formatCount(data.param_count)} parameters, {formatBytes(data.weights_bytes)} of
        weights, {formatBytes(data.onnx_bytes)} as ONNX.
      </p>
      <Metrics model={data} />
      <TryIt model={data} />
      <Section title="Architecture">
        {architecture ? <ArchitectureFlow architecture={architecture} /> : <p className="muted">The API does not describe this model's layers.</p>}
      </Section>
      {data.compression ? <Compression compression={obj(data.compression)} /> : null}
      <Section title="Confusion matrix">
        {report.isPending ? <Loading what="Loading the report" /> : null}
        <ErrorNote error={report.error} />
        {report.data === null ? <p>No report yet: the job had no time left for an explainability report.</p> : null}
        {report.data ? <ConfusionMatrix report={report.data} /> : null}
      </Section>
      {report.data ? <Explainability report={report.data} /> : null}
    </>
  );
}

export default function ModelPage() {
  const { modelId = "" } = useParams();
  return <ModelView key={modelId} modelId={modelId} />;
}
