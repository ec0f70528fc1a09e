/** The server data the pages read, through TanStack Query (cached, refetched while a job runs). */

import { useQuery } from "@tanstack/react-query";
import { useAuth } from "../auth/session";
import { unwrap } from "./client";
import { isStatus } from "./problem";
import type { ParetoPoint } from "./types";
import { isTerminal } from "./types";

export const keys = {
  datasets: ["datasets"] as const,
  dataset: (id: string) => ["datasets", id] as const,
  samples: (id: string) => ["datasets", id, "samples"] as const,
  jobs: ["jobs"] as const,
  job: (id: string) => ["jobs", id] as const,
  candidates: (id: string) => ["jobs", id, "candidates"] as const,
  pareto: (id: string) => ["jobs", id, "pareto"] as const,
  model: (id: string) => ["models", id] as const,
  report: (id: string) => ["models", id, "report"] as const,
  apiKeys: ["me", "keys"] as const,
};

const LIVE_MS = 5000;

export function useDatasets() {
  const { api } = useAuth();
  return useQuery({ queryKey: keys.datasets, queryFn: () => unwrap(api.GET("/api/v1/datasets")) });
}

export function useDataset(id: string) {
  const { api } = useAuth();
  return useQuery({
    queryKey: keys.dataset(id),
    queryFn: () => unwrap(api.GET("/api/v1/datasets/{dataset_id}", { params: { path: { dataset_id: id } } })),
  });
}

export function useSamples(id: string, limit = 12) {
  const { api } = useAuth();
  return useQuery({
    queryKey: keys.samples(id),
    queryFn: () =>
      unwrap(api.GET("/api/v1/datasets/{dataset_id}/samples", { params: { path: { dataset_id: id }, query: { limit } } })),
    retry: false,
  });
}

export function useJobs() {
  const { api } = useAuth();
  return useQuery({
    queryKey: keys.jobs,
    queryFn: () => unwrap(api.GET("/api/v1/jobs", { params: { query: { limit: 200 } } })),
    staleTime: 0, // asked again whenever a page shows it: jobs also start from the API, the CLI and other tabs
    refetchInterval: (query) => (query.state.data?.some((job) => !isTerminal(job.state)) ? LIVE_MS : false),
  });
}

export function useJob(id: string) {
  const { api } = useAuth();
  return useQuery({
    queryKey: keys.job(id),
    queryFn: () => unwrap(api.GET("/api/v1/jobs/{job_id}", { params: { path: { job_id: id } } })),
    refetchInterval: (query) => (query.state.data && isTerminal(query.state.data.state) ? false : LIVE_MS),
  });
}

export function useCandidates(id: string) {
  const { api } = useAuth();
  return useQuery({
    queryKey: keys.candidates(id),
    queryFn: () => unwrap(api.GET("/api/v1/jobs/{job_id}/candidates", { params: { path: { job_id: id } } })),
  });
}

export function usePareto(id: string) {
  const { api } = useAuth();
  return useQuery({
    queryKey: keys.pareto(id),
    queryFn: async () =>
      (await unwrap(api.GET("/api/v1/jobs/{job_id}/pareto", { params: { path: { job_id: id } } }))) as unknown as ParetoPoint[],
  });
}

export function useModel(id: string) {
  const { api } = useAuth();
  return useQuery({
    queryKey: keys.model(id),
    queryFn: () => unwrap(api.GET("/api/v1/models/{model_id}", { params: { path: { model_id: id } } })),
  });
}

/** A model's explainability report; null when it has none (404). */
export function useReport(id: string) {
  const { api } = useAuth();
  return useQuery({
    queryKey: keys.report(id),
    queryFn: async () => {
      try {
        return await unwrap(api.GET("/api/v1/models/{model_id}/report", { params: { path: { model_id: id } } }));
      } catch (error) {
        if (isStatus(error, 404)) return null;
        throw error;
      }
    },
  });
}

export function useApiKeys() {
  const { api } = useAuth();
  return useQuery({ queryKey: keys.apiKeys, queryFn: () => unwrap(api.GET("/api/v1/me/keys")) });
}
