/** Test helpers: a fake API behind `fetch`, a fake EventSource, and the app rendered at an address. */

import { QueryClient, QueryClientProvider } from "@tanstack/react-query";
import { render } from "@testing-library/react";
import type { ReactNode } from "react";
import { MemoryRouter } from "react-router";
import { vi } from "vitest";
import { App } from "../App";
import { AuthProvider } from "../auth/session";

export const CSRF = "csrf-token-123";
export const USER = {
  id: "00000000-0000-0000-0000-0000000000aa",
  email: "ada@example.org",
  display_name: "Ada",
  created_at: "2026-12-01T10:00:00Z",
};
export const SESSION = { user: USER, csrf_token: CSRF, expires_at: "2026-12-31T00:00:00Z" };

export interface Call {
  method: string;
  path: string;
  search: string;
  headers: Headers;
  body: string | FormData | null;
}

type Reply = { status?: number; json?: unknown; headers?: Record<string, string> } | ((call: Call) => Reply);
export type Routes = Record<string, Reply>;

function respond(reply: Exclude<Reply, (call: Call) => Reply>): Response {
  const status = reply.status ?? 200;
  const problem = status >= 400;
  const headers = { "Content-Type": problem ? "application/problem+json" : "application/json", ...reply.headers };
  const body = status === 204 || reply.json === undefined ? null : JSON.stringify(reply.json);
  return new Response(body, { status, headers });
}

/** Stub `fetch` with routes keyed "METHOD /path" (no query string); unknown routes answer 404. Returns the calls. */
export function mockApi(routes: Routes): Call[] {
  const calls: Call[] = [];
  vi.stubGlobal(
    "fetch",
    vi.fn(async (input: RequestInfo | URL, init?: RequestInit) => {
      const request = input instanceof Request ? input : null;
      const url = new URL(input instanceof Request ? input.url : input instanceof URL ? input.href : input, "http://localhost");
      const method = (request?.method ?? init?.method ?? "GET").toUpperCase();
      const headers = new Headers(request ? request.headers : init?.headers);
      let body: string | FormData | null = null;
      if (request) body = request.body ? await request.text() : null;
      else if (typeof init?.body === "string" || init?.body instanceof FormData) body = init.body;
      const call: Call = { method, path: url.pathname, search: url.search, headers, body };
      calls.push(call);
      let reply = routes[`${method} ${url.pathname}`];
      while (typeof reply === "function") reply = reply(call);
      return respond(reply ?? { status: 404, json: { title: "Not Found", status: 404, detail: `no route ${method} ${url.pathname}` } });
    }),
  );
  return calls;
}

/** The JSON body a call sent. */
export function jsonBody(call: Call | undefined): unknown {
  if (typeof call?.body !== "string") throw new Error("the call sent no JSON body");
  return JSON.parse(call.body);
}

/** A stand-in for EventSource: tests push events into `instances[n]`. */
export class FakeEventSource {
  static readonly CONNECTING = 0;
  static readonly OPEN = 1;
  static readonly CLOSED = 2;
  static instances: FakeEventSource[] = [];
  readonly url: string;
  readyState = FakeEventSource.CONNECTING;
  onopen: ((event: Event) => void) | null = null;
  onerror: ((event: Event) => void) | null = null;
  private listeners = new Map<string, ((event: MessageEvent) => void)[]>();

  constructor(url: string) {
    this.url = url;
    FakeEventSource.instances.push(this);
  }

  addEventListener(kind: string, listener: (event: MessageEvent) => void) {
    this.listeners.set(kind, [...(this.listeners.get(kind) ?? []), listener]);
  }

  removeEventListener(kind: string, listener: (event: MessageEvent) => void) {
    this.listeners.set(kind, (this.listeners.get(kind) ?? []).filter((l) => l !== listener));
  }

  close() {
    this.readyState = FakeEventSource.CLOSED;
  }

  open() {
    this.readyState = FakeEventSource.OPEN;
    this.onopen?.(new Event("open"));
  }

  /** Deliver an SSE event as the API sends it: id = seq, event = kind, data = the event as JSON. */
  emit(kind: string, seq: number, payload: Record<string, unknown>) {
    const data = kind === "end" ? JSON.stringify(payload) : JSON.stringify({ seq, at: "2026-12-05T10:00:00Z", kind, payload });
    const event = new MessageEvent(kind, { data, lastEventId: kind === "end" ? "" : String(seq) });
    for (const listener of this.listeners.get(kind) ?? []) listener(event);
  }

  static install(): typeof FakeEventSource {
    FakeEventSource.instances = [];
    vi.stubGlobal("EventSource", FakeEventSource);
    return FakeEventSource;
  }
}

export function testQueryClient(): QueryClient {
  return new QueryClient({ defaultOptions: { queries: { retry: false, staleTime: Infinity }, mutations: { retry: false } } });
}

export function Providers({ children, route = "/" }: { children: ReactNode; route?: string }) {
  return (
    <QueryClientProvider client={testQueryClient()}>
      <MemoryRouter initialEntries={[route]}>
        <AuthProvider>{children}</AuthProvider>
      </MemoryRouter>
    </QueryClientProvider>
  );
}

/** The whole app at `route`, signed in unless `signedIn` is false. */
export function renderApp(route: string, routes: Routes, { signedIn = true } = {}) {
  const calls = mockApi({
    "GET /api/v1/session": signedIn ? { json: SESSION } : { status: 401, json: { title: "Unauthorized", status: 401, detail: "no session" } },
    ...routes,
  });
  const view = render(
    <Providers route={route}>
      <App />
    </Providers>,
  );
  return { ...view, calls };
}
