/** The caller's jobs, newest first: state, stage, dataset, budget and when they were created. */

import { Link } from "react-router";
import { useDatasets, useJobs } from "../api/queries";
import { ErrorNote, Loading, StateBadge } from "../components/ui";
import { budgetWords } from "../lib/budget";
import { formatDate, formatDuration, formatPercent, shortId } from "../lib/format";
import { useTitle } from "../lib/useTitle";

export default function JobsPage() {
  useTitle("Jobs");
  const jobs = useJobs();
  const datasets = useDatasets();
  const names = new Map((datasets.data ?? []).map((d) => [d.id, d.name]));

  return (
    <>
      <div className="page-head">
        <h1>Jobs</h1>
        <div className="actions">
          <Link className="button primary" to="/jobs/new">
            Start a job
          </Link>
        </div>
      </div>
      {jobs.isPending ? <Loading what="Loading jobs" /> : null}
      <ErrorNote error={jobs.error} />
      {jobs.data && jobs.data.length === 0 ? (
        <p>
          No jobs yet. <Link to="/datasets">Upload a dataset</Link>, then <Link to="/jobs/new">start a job</Link>.
        </p>
      ) : null}
      {jobs.data && jobs.data.length > 0 ? (
        <div className="table-scroll">
          <table>
            <caption className="visually-hidden">Your jobs, newest first</caption>
            <thead>
              <tr>
                <th scope="col">Job</th>
                <th scope="col">State</th>
                <th scope="col">Stage</th>
                <th scope="col">Progress</th>
                <th scope="col">Dataset</th>
                <th scope="col">Budget</th>
                <th scope="col">Created</th>
              </tr>
            </thead>
            <tbody>
              {jobs.data.map((job) => (
                <tr key={job.id}>
                  <td>
                    <Link to={`/jobs/${job.id}`} aria-label={`Job ${shortId(job.id)}`}>
                      <code>{shortId(job.id)}</code>
                    </Link>
                  </td>
                  <td>
                    <StateBadge state={job.state} />
                    {job.cancel_requested && job.state === "running" ? <span className="muted"> (cancelling)</span> : null}
                  </td>
                  <td>{job.stage ?? "—"}</td>
                  <td>{formatPercent(job.progress, 0)}</td>
                  <td>
                    {job.dataset_id ? (
                      <Link to={`/datasets/${job.dataset_id}`}>{names.get(job.dataset_id) ?? shortId(job.dataset_id)}</Link>
                    ) : (
                      <span className="muted">deleted</span>
                    )}
                  </td>
                  <td>{budgetWords(job.budget_tier, job.budget_seconds, job.budget_epochs, formatDuration)}</td>
                  <td>{formatDate(job.created_at)}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      ) : null}
    </>
  );
}
