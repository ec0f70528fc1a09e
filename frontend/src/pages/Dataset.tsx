/** One dataset's profile: class histogram, samples, image size and the resize applied (or text lengths),
 * duplicates; and deleting it. */

import { useMutation, useQueryClient } from "@tanstack/react-query";
import { useMemo } from "react";
import { Link, useNavigate, useParams } from "react-router";
import { unwrap } from "../api/client";
import { keys, useDataset, useSamples } from "../api/queries";
import type { Dataset } from "../api/types";
import { useAuth } from "../auth/session";
import { Chart } from "../components/Chart";
import type { ChartOption } from "../components/Chart";
import { ConfirmButton, ErrorNote, Fact, Loading, Section } from "../components/ui";
import { formatBytes, formatCount, formatDate, formatNumber } from "../lib/format";
import { arr, num, numbers, obj, str } from "../lib/json";
import type { JsonObject } from "../lib/json";
import { useTitle } from "../lib/useTitle";

const RESIZE_REASONS: Record<string, string> = {
  native: "kept at their native size",
  declared: "resized to the size given at upload",
  "mixed-sizes": "resized to one size, as they came in several sizes",
  "too-large": "scaled down, as they were larger than the longest side allowed",
};

function histogram(counts: Record<string, number>): ChartOption {
  const names = Object.keys(counts);
  const many = names.length > 30;
  return {
    tooltip: { trigger: "axis" },
    grid: { left: 48, right: 16, top: 16, bottom: 56 },
    xAxis: { type: "category", data: names, axisLabel: { rotate: names.length > 8 ? 45 : 0, interval: many ? "auto" : 0 } },
    yAxis: { type: "value", name: "samples" },
    series: [{ type: "bar", name: "samples", data: names.map((n) => counts[n] ?? 0) }],
  };
}

function Spread({ label, spread }: { label: string; spread: JsonObject }) {
  return (
    <Fact term={label}>
      min {formatNumber(num(spread.min), 0)}, median {formatNumber(num(spread.median), 0)}, mean{" "}
      {formatNumber(num(spread.mean), 1)}, 95th percentile {formatNumber(num(spread.p95), 0)}, max{" "}
      {formatNumber(num(spread.max), 0)}
    </Fact>
  );
}

function size(value: unknown): string {
  const [h, w] = numbers(value);
  return h !== undefined && w !== undefined ? `${h}×${w}` : "—";
}

function Profile({ dataset }: { dataset: Dataset }) {
  const profile = obj(dataset.profile);
  const duplicates = obj(profile.duplicates);
  const image = profile.image === undefined ? null : obj(profile.image);
  const text = profile.text === undefined ? null : obj(profile.text);
  const resize = obj(image?.resize);
  const option = useMemo(() => histogram(dataset.class_counts), [dataset.class_counts]);
  const counts = Object.values(dataset.class_counts);
  const smallest = counts.length ? Math.min(...counts) : 0;
  const largest = counts.length ? Math.max(...counts) : 0;

  return (
    <>
      <Section title="Profile">
        <dl className="facts">
          <Fact term="Modality">{dataset.modality}</Fact>
          <Fact term="Format">{dataset.format}</Fact>
          <Fact term="File">{dataset.filename}</Fact>
          <Fact term="Size">{formatBytes(dataset.size_bytes)}</Fact>
          <Fact term="Samples">{formatCount(dataset.sample_count)}</Fact>
          <Fact term="Classes">
            {formatCount(dataset.classes.length)} (smallest {formatCount(smallest)}, largest {formatCount(largest)})
          </Fact>
          <Fact term="Duplicates">
            {formatCount(num(duplicates.count))} repeated input{num(duplicates.count) === 1 ? "" : "s"},{" "}
            {formatCount(num(duplicates.conflicting))} with conflicting labels
          </Fact>
          {num(profile.npz_test_samples) !== null ? (
            <Fact term="Test samples in the file">{formatCount(num(profile.npz_test_samples))}</Fact>
          ) : null}
          <Fact term="Uploaded">{formatDate(dataset.created_at)}</Fact>
          <Fact term="SHA-256">
            <code title={dataset.checksum}>{dataset.checksum.slice(0, 16)}…</code>
          </Fact>
        </dl>
      </Section>
      {image ? (
        <Section title="Images">
          <dl className="facts">
            <Fact term="Image size (as trained)">
              {num(image.height)}×{num(image.width)} px, {num(image.channels) === 1 ? "gray" : `${num(image.channels)} channels`} ({str(image.dtype)})
            </Fact>
            <Fact term="Resize applied">
              {str(resize.policy) === "native" ? "none" : str(resize.policy)}: images were{" "}
              {RESIZE_REASONS[str(resize.reason) ?? ""] ?? str(resize.reason)}
              {num(resize.max_native_side) !== null ? ` (longest side trained natively: ${num(resize.max_native_side)} px)` : ""}
            </Fact>
            <Fact term="Native sizes">
              {formatCount(num(resize.native_sizes))} distinct; smallest {size(resize.smallest)}, largest {size(resize.largest)}, most
              common {size(resize.most_common)}
            </Fact>
            <Fact term="Pixel mean / std per channel">
              {numbers(image.mean).map((v) => formatNumber(v, 1)).join(", ")} /{" "}
              {numbers(image.std).map((v) => formatNumber(v, 1)).join(", ")}
            </Fact>
          </dl>
        </Section>
      ) : null}
      {text ? (
        <Section title="Texts">
          <dl className="facts">
            <Spread label="Characters" spread={obj(text.chars)} />
            <Spread label="Words" spread={obj(text.words)} />
            <Fact term="Empty texts">{formatCount(num(text.empty))} (kept: a blank text still has a label)</Fact>
          </dl>
        </Section>
      ) : null}
      <Section title="Class histogram">
        <Chart option={option} label={`Samples per class: ${dataset.classes.length} classes, from ${smallest} to ${largest} samples`} />
      </Section>
    </>
  );
}

function Samples({ id }: { id: string }) {
  const samples = useSamples(id);
  return (
    <Section title="Samples">
      {samples.isPending ? <Loading what="Loading samples" /> : null}
      <ErrorNote error={samples.error} prefix="No samples:" />
      {samples.data?.samples.length === 0 ? <p className="muted">No samples to show.</p> : null}
      {samples.data && samples.data.modality === "image" ? (
        <ul className="thumbs">
          {samples.data.samples.map((s) => (
            <li key={s.index}>
              <figure>
                {s.image_url ? <img src={s.image_url} alt={`Sample ${s.index}, labelled ${s.label}`} /> : null}
                <figcaption>{s.label}</figcaption>
              </figure>
            </li>
          ))}
        </ul>
      ) : null}
      {samples.data && samples.data.modality === "text" ? (
        <ul className="sample-texts">
          {samples.data.samples.map((s) => (
            <li key={s.index}>
              <span className="badge">{s.label}</span> <q>{s.text ?? ""}</q>
            </li>
          ))}
        </ul>
      ) : null}
    </Section>
  );
}

export default function DatasetPage() {
  const { datasetId = "" } = useParams();
  const dataset = useDataset(datasetId);
  const { api } = useAuth();
  const queryClient = useQueryClient();
  const navigate = useNavigate();
  useTitle(dataset.data ? `Dataset ${dataset.data.name}` : "Dataset");
  const remove = useMutation({
    mutationFn: () => unwrap(api.DELETE("/api/v1/datasets/{dataset_id}", { params: { path: { dataset_id: datasetId } } })),
    onSuccess: async () => {
      queryClient.removeQueries({ queryKey: keys.dataset(datasetId) });
      await queryClient.invalidateQueries({ queryKey: keys.datasets, exact: true });
      void navigate("/datasets");
    },
  });

  if (dataset.isPending) return <Loading what="Loading the dataset" />;
  if (dataset.error) {
    return (
      <>
        <h1>Dataset</h1>
        <ErrorNote error={dataset.error} />
        <Link to="/datasets">All datasets</Link>
      </>
    );
  }
  const data = dataset.data;
  return (
    <>
      <div className="page-head">
        <h1>
          Dataset <span className="name">{data.name}</span>
        </h1>
        <div className="actions">
          <Link className="button primary" to={`/jobs/new?dataset=${data.id}`}>
            Start a job
          </Link>
          <ConfirmButton label="Delete" question={`Delete the dataset ${data.name} and its file? Finished jobs and their models stay.`}
            confirmLabel="Yes, delete dataset" onConfirm={() => remove.mutate()} disabled={remove.isPending} />
        </div>
      </div>
      <ErrorNote error={remove.error} prefix="Not deleted:" />
      <Profile dataset={data} />
      <Samples id={data.id} />
      {arr(data.classes).length > 0 ? (
        <Section title="Classes">
          <p className="class-list">{data.classes.join(", ")}</p>
        </Section>
      ) : null}
    </>
  );
}
