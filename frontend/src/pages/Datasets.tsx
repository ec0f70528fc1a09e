/** Uploading datasets, and the list of the caller's datasets. */

import { useQueryClient } from "@tanstack/react-query";
import { Link, useNavigate } from "react-router";
import { keys, useDatasets } from "../api/queries";
import { UploadForm } from "../components/UploadForm";
import { ErrorNote, Loading } from "../components/ui";
import { formatBytes, formatCount, formatDate } from "../lib/format";
import { useTitle } from "../lib/useTitle";

export default function DatasetsPage() {
  useTitle("Datasets");
  const datasets = useDatasets();
  const queryClient = useQueryClient();
  const navigate = useNavigate();

  return (
    <>
      <h1>Datasets</h1>
      <UploadForm
        onUploaded={(dataset) => {
          queryClient.setQueryData(keys.dataset(dataset.id), dataset);
          void queryClient.invalidateQueries({ queryKey: keys.datasets, exact: true });
          void navigate(`/datasets/${dataset.id}`); // its profile: what the service made of the file
        }}
      />
      <section className="panel" aria-labelledby="datasets-title">
        <h2 id="datasets-title">Your datasets</h2>
        {datasets.isPending ? <Loading what="Loading datasets" /> : null}
        <ErrorNote error={datasets.error} />
        {datasets.data?.length === 0 ? <p>No datasets yet: upload one above.</p> : null}
        {datasets.data && datasets.data.length > 0 ? (
          <div className="table-scroll">
            <table>
              <thead>
                <tr>
                  <th scope="col">Name</th>
                  <th scope="col">Modality</th>
                  <th scope="col">Format</th>
                  <th scope="col" className="num">Classes</th>
                  <th scope="col" className="num">Samples</th>
                  <th scope="col" className="num">Size</th>
                  <th scope="col">Uploaded</th>
                  <th scope="col"><span className="visually-hidden">Actions</span></th>
                </tr>
              </thead>
              <tbody>
                {datasets.data.map((dataset) => (
                  <tr key={dataset.id}>
                    <td>
                      <Link to={`/datasets/${dataset.id}`}>{dataset.name}</Link>
                    </td>
                    <td>{dataset.modality}</td>
                    <td>{dataset.format}</td>
                    <td className="num">{formatCount(dataset.classes.length)}</td>
                    <td className="num">{formatCount(dataset.sample_count)}</td>
                    <td className="num">{formatBytes(dataset.size_bytes)}</td>
                    <td>{formatDate(dataset.created_at)}</td>
                    <td>
                      <Link to={`/jobs/new?dataset=${dataset.id}`} aria-label={`Start a job on ${dataset.name}`}>
                        Start a job
                      </Link>
                    </td>
                  </tr>
                ))}
              </tbody>
            </table>
          </div>
        ) : null}
      </section>
    </>
  );
}
