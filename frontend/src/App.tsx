/** The dashboard's shell: the sign-in gate, the header and navigation, and the routes (each page its own lazily
 * loaded chunk, so the first load carries no chart library). */

import { Component, lazy, Suspense } from "react";
import type { ErrorInfo, ReactNode } from "react";
import { Navigate, NavLink, Route, Routes, useLocation } from "react-router";
import { errorMessage } from "./api/problem";
import { useAuth } from "./auth/session";
import { Loading } from "./components/ui";
import { SignIn } from "./pages/SignIn";

const JobsPage = lazy(() => import("./pages/Jobs"));
const NewJobPage = lazy(() => import("./pages/NewJob"));
const JobPage = lazy(() => import("./pages/Job"));
const DatasetsPage = lazy(() => import("./pages/Datasets"));
const DatasetPage = lazy(() => import("./pages/Dataset"));
const ModelPage = lazy(() => import("./pages/Model"));
const ComparePage = lazy(() => import("./pages/Compare"));
const KeysPage = lazy(() => import("./pages/Keys"));
const NotFoundPage = lazy(() => import("./pages/NotFound"));

class PageErrorBoundary extends Component<{ children: ReactNode; resetKey: string }, { error: unknown }> {
  override state: { error: unknown } = { error: null };

  static getDerivedStateFromError(error: unknown) {
    return { error };
  }

  override componentDidUpdate(previous: { resetKey: string }) {
    if (previous.resetKey !== this.props.resetKey && this.state.error !== null) this.setState({ error: null });
  }

  override componentDidCatch(error: unknown, info: ErrorInfo) {
    console.warn("page failed", error, info.componentStack);
  }

  override render() {
    if (this.state.error !== null) {
      return (
        <div role="alert" className="error panel">
          <h1>This page failed</h1>
          <p>{errorMessage(this.state.error)}</p>
          <button type="button" onClick={() => window.location.reload()}>
            Reload
          </button>
        </div>
      );
    }
    return this.props.children;
  }
}

const NAV = [
  { to: "/jobs", label: "Jobs", end: true },
  { to: "/jobs/new", label: "New job", end: true },
  { to: "/datasets", label: "Datasets", end: false },
  { to: "/compare", label: "Compare", end: true },
  { to: "/keys", label: "API keys", end: true },
];

function Header() {
  const { state, signOut } = useAuth();
  return (
    <header className="site-header">
      <a className="skip" href="#main">
        Skip to content
      </a>
      <NavLink to="/jobs" className="brand">
        netsynth
      </NavLink>
      <nav aria-label="Main">
        <ul>
          {NAV.map((item) => (
            <li key={item.to}>
              <NavLink to={item.to} end={item.end}>
                {item.label}
              </NavLink>
            </li>
          ))}
        </ul>
      </nav>
      {state.status === "signed-in" ? (
        <div className="who">
          <span className="muted" title={state.user.email}>
            {state.user.display_name || state.user.email}
          </span>
          <button type="button" onClick={() => void signOut()}>
            Sign out
          </button>
        </div>
      ) : null}
    </header>
  );
}

export function App() {
  const { state } = useAuth();
  const location = useLocation();
  if (state.status === "loading") {
    return (
      <main id="main" className="page">
        <Loading what="Opening your session" />
      </main>
    );
  }
  if (state.status === "signed-out") return <SignIn notice={state.notice} />;
  return (
    <>
      <Header />
      <main id="main" className="page" tabIndex={-1}>
        <PageErrorBoundary resetKey={location.pathname}>
          <Suspense fallback={<Loading />}>
            <Routes>
              <Route path="/" element={<Navigate to="/jobs" replace />} />
              <Route path="/jobs" element={<JobsPage />} />
              <Route path="/jobs/new" element={<NewJobPage />} />
              <Route path="/jobs/:jobId" element={<JobPage />} />
              <Route path="/datasets" element={<DatasetsPage />} />
              <Route path="/datasets/:datasetId" element={<DatasetPage />} />
              <Route path="/models/:modelId" element={<ModelPage />} />
              <Route path="/compare" element={<ComparePage />} />
              <Route path="/keys" element={<KeysPage />} />
              <Route path="*" element={<NotFoundPage />} />
            </Routes>
          </Suspense>
        </PageErrorBoundary>
      </main>
    </>
  );
}
