/** A model's explainability report (`GET /models/{id}/report`): the confusion matrix as a heat map, per-class
 * figures, calibration, the sampled examples' Grad-CAM (and other) overlays or word highlights, suspect labels, and
 * a link to the self-contained report page. */

import { useMemo, useState } from "react";
import type { ReportOut } from "../api/types";
import { formatDuration, formatNumber, formatPercent } from "../lib/format";
import { arr, num, numbers, obj, str } from "../lib/json";
import type { JsonObject } from "../lib/json";
import { confusionOption } from "../lib/charts";
import { useColorScheme } from "../lib/useColorScheme";
import { Chart } from "./Chart";
import { Fact, Section } from "./ui";

const METHOD_NAMES: Record<string, string> = {
  gradcam: "Grad-CAM",
  "integrated-gradients": "Integrated gradients",
  smoothgrad: "SmoothGrad",
  occlusion: "Occlusion",
};

function methodName(method: string): string {
  return METHOD_NAMES[method] ?? method;
}

export function ConfusionMatrix({ report }: { report: ReportOut }) {
  const dark = useColorScheme() === "dark";
  const global = obj(obj(report.report).global);
  const classes = arr(obj(report.report).classes).map(String);
  const matrix = arr(global.confusion_matrix).map(numbers);
  const option = useMemo(() => {
    const content = obj(report.report);
    return confusionOption(arr(obj(content.global).confusion_matrix).map(numbers), arr(content.classes).map(String), dark);
  }, [report, dark]);
  const perClass = arr(global.per_class).map(obj);
  const calibration = obj(global.calibration);
  if (matrix.length === 0) return <p className="muted">The report has no test rows, so no confusion matrix.</p>;
  return (
    <>
      <dl className="facts">
        <Fact term="Test accuracy">{formatPercent(num(global.accuracy))}</Fact>
        <Fact term="Test rows">{num(global.test_rows) ?? "—"}</Fact>
        <Fact term="Expected calibration error">{formatNumber(num(calibration.ece), 4)}</Fact>
      </dl>
      <p className="hint">Rows: the true class; columns: the predicted class (test split).</p>
      <Chart option={option} height={Math.min(640, 160 + classes.length * 28)}
        label={`Confusion matrix of ${classes.length} classes on ${num(global.test_rows) ?? 0} test rows: rows are the true class, columns the predicted one`} />
      <details>
        <summary>Per-class precision, recall and F1</summary>
        <div className="table-scroll">
          <table>
            <thead>
              <tr>
                <th scope="col">Class</th>
                <th scope="col" className="num">Precision</th>
                <th scope="col" className="num">Recall</th>
                <th scope="col" className="num">F1</th>
                <th scope="col" className="num">Support</th>
              </tr>
            </thead>
            <tbody>
              {perClass.map((c) => (
                <tr key={str(c.class) ?? ""}>
                  <th scope="row">{str(c.class)}</th>
                  <td className="num">{formatPercent(num(c.precision), 1)}</td>
                  <td className="num">{formatPercent(num(c.recall), 1)}</td>
                  <td className="num">{formatPercent(num(c.f1), 1)}</td>
                  <td className="num">{num(c.support)}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      </details>
    </>
  );
}

/** A text's words, each shaded by its attribution score (evidence for the label: green; against: red). */
function Highlighted({ tokens, scores }: { tokens: string[]; scores: number[] }) {
  const top = Math.max(1e-9, ...scores.map(Math.abs));
  return (
    <p className="highlights">
      {tokens.map((token, i) => {
        const score = scores[i] ?? 0;
        const strength = Math.min(1, Math.abs(score) / top);
        const colour = score >= 0 ? `rgba(34, 160, 90, ${strength * 0.6})` : `rgba(220, 60, 60, ${strength * 0.6})`;
        return (
          <span key={`${i}-${token}`}>
            <mark style={{ background: colour }} title={`${token}: ${score.toFixed(4)}`}>
              {token}
            </mark>{" "}
          </span>
        );
      })}
    </p>
  );
}

function Example({ example, images, modality, method }: { example: JsonObject; images: Record<string, string>; modality: string; method: string }) {
  const row = num(example.row);
  const given = str(example.given) ?? "?";
  const predicted = str(example.predicted) ?? "?";
  const caption = `Row ${row ?? "?"}: given ${given}, predicted ${predicted} (${formatPercent(num(example.probability), 1)})`;
  if (modality === "image") {
    const file = str(obj(example.images)[method]);
    const url = file ? images[file] : undefined;
    return (
      <li>
        <figure className={given === predicted ? "right" : "wrong"}>
          {url ? <img src={url} alt={`${methodName(method)} of ${caption}`} /> : <span className="muted">no image</span>}
          <figcaption>{caption}</figcaption>
        </figure>
      </li>
    );
  }
  const tokens = arr(example.tokens).map(String);
  const scores = numbers(obj(example.scores)[method]);
  return (
    <li className={given === predicted ? "right" : "wrong"}>
      <p className="muted">{caption}</p>
      {scores.length ? <Highlighted tokens={tokens} scores={scores} /> : <p>{tokens.join(" ")}</p>}
    </li>
  );
}

/** The listed suspect labels as CSV (row, given, suggested and both probabilities), the file a user corrects the
 * data from. */
export function suspectsCsv(suspects: JsonObject[]): string {
  const quoted = (v: string) => `"${v.replace(/"/g, '""')}"`;
  const lines = suspects.map((s) =>
    [num(s.row), quoted(str(s.given) ?? ""), quoted(str(s.suggested) ?? ""), num(s.given_share), num(s.suggested_share)].join(","),
  );
  return ["row,given,suggested,given_share,suggested_share", ...lines].join("\n") + "\n";
}

export function Explainability({ report }: { report: ReportOut }) {
  const content = obj(report.report);
  const modality = str(content.modality) ?? "image";
  const methods = Object.keys(obj(content.methods));
  const [method, setMethod] = useState(methods[0] ?? "");
  const examples = arr(content.examples).map(obj);
  const suspects = arr(content.suspect_labels).map(obj);
  const found = obj(content.suspects);
  const faithfulness = obj(content.faithfulness);
  const omitted = arr(content.omitted).map(String);
  const settings = obj(obj(content.methods)[method]);
  const faith = obj(faithfulness[method]);

  return (
    <Section title="Explainability report"
      actions={
        <a className="button" href={report.html} target="_blank" rel="noopener">
          Open report page
        </a>
      }>
      <p className="muted">
        Built in {formatDuration(num(content.seconds))}
        {omitted.length ? `; left out for lack of time: ${omitted.join(", ")}` : "; complete"}.
      </p>
      {methods.length > 0 ? (
        <>
          <div className="row toolbar">
            <div className="field">
              <label htmlFor="report-method">Method</label>
              <select id="report-method" value={method} onChange={(event) => setMethod(event.target.value)}>
                {methods.map((m) => (
                  <option key={m} value={m}>
                    {methodName(m)}
                  </option>
                ))}
              </select>
            </div>
            <p className="muted">
              {num(settings.seconds_per_input) !== null ? `${formatNumber(num(settings.seconds_per_input), 3)} s per input. ` : ""}
              {num(faith.deletion_auc) !== null
                ? `Deletion AUC ${formatNumber(num(faith.deletion_auc), 3)} against ${formatNumber(num(faith.random_deletion_auc), 3)} for random order (lower is more faithful). `
                : ""}
              {num(faith.insertion_auc) !== null
                ? `Insertion AUC ${formatNumber(num(faith.insertion_auc), 3)} against ${formatNumber(num(faith.random_insertion_auc), 3)} (higher is more faithful).`
                : ""}
            </p>
          </div>
          {faith.better_than_random === false ? (
            <p className="error" role="alert">
              {methodName(method)} failed its check on this model: removing or adding pixels or words in its order is not
              better than a random order, so its maps are not evidence of what the model uses.
            </p>
          ) : null}
          <ul className={modality === "image" ? "thumbs examples" : "sample-texts"}>
            {examples.map((example, i) => (
              <Example key={`${num(example.row) ?? i}`} example={example} images={report.images} modality={modality} method={method} />
            ))}
          </ul>
        </>
      ) : (
        <p className="muted">No attributions in this report.</p>
      )}
      <h3>Suspect labels</h3>
      {num(found.rows_checked) !== null ? (
        <p className="muted">
          {num(found.found)} of {num(found.rows_checked)} training rows: their label has under{" "}
          {formatNumber(100 * (num(found.threshold) ?? 0), 0)} % of the {str(found.method)}, and another label leads.
        </p>
      ) : null}
      {suspects.length === 0 ? (
        <p className="muted">{omitted.includes("suspect_labels") ? "Left out for lack of time." : "None found."}</p>
      ) : (
        <div className="table-scroll">
          <table>
            <caption className="visually-hidden">Training rows whose label looks wrong, most suspect first</caption>
            <thead>
              <tr>
                <th scope="col" className="num">Row</th>
                <th scope="col">Given label</th>
                <th scope="col">Suggested</th>
                <th scope="col" className="num">P(given)</th>
                <th scope="col" className="num">P(suggested)</th>
              </tr>
            </thead>
            <tbody>
              {suspects.slice(0, 10).map((s) => (
                <tr key={num(s.row) ?? 0}>
                  <td className="num">{num(s.row)}</td>
                  <td>{str(s.given)}</td>
                  <td>{str(s.suggested)}</td>
                  <td className="num">{formatNumber(num(s.given_share), 2)}</td>
                  <td className="num">{formatNumber(num(s.suggested_share), 2)}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
      {suspects.length > 0 ? (
        <p className="muted">
          {suspects.length > 10 ? `and ${suspects.length - 10} more. ` : null}
          <a download="suspect_labels.csv" href={`data:text/csv;charset=utf-8,${encodeURIComponent(suspectsCsv(suspects))}`}>
            Download all {suspects.length} as CSV
          </a>
        </p>
      ) : null}
    </Section>
  );
}
