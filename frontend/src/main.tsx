import { QueryClient, QueryClientProvider } from "@tanstack/react-query";
import { StrictMode } from "react";
import { createRoot } from "react-dom/client";
import { BrowserRouter } from "react-router";
import { App } from "./App";
import { ApiError } from "./api/problem";
import { AuthProvider } from "./auth/session";
import "./styles.css";

const queryClient = new QueryClient({
  defaultOptions: {
    queries: {
      staleTime: 10_000,
      refetchOnWindowFocus: false,
      // a refusal (4xx) will not change by asking again; a network error, a 5xx or a 429 may, after Retry-After
      retry: (failures, error) =>
        failures < 2 && (!(error instanceof ApiError) || error.status >= 500 || error.status === 429),
      retryDelay: (failures, error) =>
        error instanceof ApiError && error.retryAfter !== null
          ? Math.min(error.retryAfter, 30) * 1000
          : Math.min(1000 * 2 ** failures, 10_000),
    },
  },
});

const root = document.getElementById("root");
if (root === null) throw new Error("index.html has no #root");
createRoot(root).render(
  <StrictMode>
    <QueryClientProvider client={queryClient}>
      <BrowserRouter>
        <AuthProvider>
          <App />
        </AuthProvider>
      </BrowserRouter>
    </QueryClientProvider>
  </StrictMode>,
);

