/** One trained model: its architecture, metrics, confusion matrix, compression before / after, explainability
 * report, a try-it box and its downloads. */

import { Link, useParams } from "react-router";
import { useModel, useReport } from "../api/queries";
import type { Architecture, Layer, Model } from "../api/types";
import { ConfusionMatrix, Explainability } from "../components/Report";
import { TryIt } from "../components/TryIt";
import { ErrorNote, Fact, Loading, Section } from "../components/ui";
import { formatBytes, formatCount, formatDate, formatNumber, formatPercent, formatValue, shortId } from "../lib/format";
import { arr, isObject, num, obj, str } from "../lib/json";
import type { JsonObject } from "../lib/json";
import { useTitle } from "../lib/useTitle";

function shape(dims: unknown): string {
  return `[${arr(dims).map((d) => (typeof d === "number" ? String(d) : "?")).join(" × ")}]`;
}

/** The model's `architecture`, when the API describes it. */
export function architectureOf(model: Model): Architecture | null {
  const value: unknown = (model as Model & { architecture?: unknown }).architecture;
  if (!isObject(value) || !Array.isArray(value.layers)) return null;
  return value as unknown as Architecture;
}

function ArchitectureFlow({ architecture }: { architecture: Architecture }) {
  const total = architecture.layers.reduce((sum, layer) => sum + (layer.params || 0), 0);
  return (
    <>
      <p className="muted">
        {architecture.layers.length} layers, {formatCount(total)} parameters; input {shape(architecture.input_shape)}.
      </p>
      <ol className="arch-flow" aria-label="Layers from input to output">
        <li className="arch-box input">
          <span className="op">input</span> <span className="shape">{shape(architecture.input_shape)}</span>
        </li>
        {architecture.layers.map((layer: Layer, i) => {
          const previous = i > 0 ? architecture.layers[i - 1]?.name : undefined;
          const branching = layer.inputs.length > 1 || (layer.inputs.length === 1 && previous !== undefined && layer.inputs[0] !== previous);
          return (
            <li key={layer.name} className={`arch-box op-${layer.op.replace(/[^a-z0-9_-]/gi, "")}`}>
              <span className="op">{layer.op}</span> <span className="name">{layer.name}</span>
              <span className="shape">→ {shape(layer.output_shape)}</span>
              {layer.params ? <span className="params">{formatCount(layer.params)} params</span> : null}
              {branching ? <span className="inputs">from {layer.inputs.join(", ")}</span> : null}
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

const METRIC_ORDER = ["test_accuracy", "val_accuracy", "test_loss", "latency_ms", "params", "nonzero_params", "macs",
  "weights_bytes", "onnx_bytes", "model_bytes", "trials", "search_stop", "candidate"];
const PERCENT = new Set(["test_accuracy", "val_accuracy"]);
const BYTES = new Set(["weights_bytes", "onnx_bytes", "model_bytes"]);

function Metrics({ model }: { model: Model }) {
  const metrics = obj(model.metrics);
  const warning = str(metrics.warning);
  return (
    <Section title="Metrics">
      {warning ? <p className="warning">{warning}</p> : null}
      <dl className="facts">
        {METRIC_ORDER.filter((key) => key in metrics).map((key) => (
          <Fact key={key} term={key.replace(/_/g, " ")}>
            {PERCENT.has(key) ? formatPercent(num(metrics[key])) : BYTES.has(key) ? formatBytes(num(metrics[key])) : formatValue(metrics[key])}
          </Fact>
        ))}
        <Fact term="input">
          {shape(obj(model.input).shape)} {str(obj(model.input).dtype) ?? ""} ({model.preprocessing})
        </Fact>
        <Fact term="classes">{model.classes.length}: {model.classes.slice(0, 12).join(", ")}{model.classes.length > 12 ? ", …" : ""}</Fact>
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
