/** The typed API client (openapi-fetch over the generated `schema.d.ts`), authenticated by the session cookie, with
 * the CSRF token on every write. */

import createClient from "openapi-fetch";
import type { Client } from "openapi-fetch";
import { ApiError, problemOf } from "./problem";
import type { paths } from "./schema";

export type Api = Client<paths>;
export const API = "/api/v1";
export const CSRF_HEADER = "X-CSRF-Token";
const WRITES = new Set(["POST", "PUT", "PATCH", "DELETE"]);

/** Whether a request with this method changes something (and so must carry the CSRF token). */
export function isWrite(method: string): boolean {
  return WRITES.has(method.toUpperCase());
}

function origin(): string {
  return globalThis.location.origin;
}

/** A client that sends `csrfToken()` on writes and calls `onUnauthorized` when the API answers 401. */
export function createApi(csrfToken: () => string | null, onUnauthorized: () => void = () => undefined): Api {
  const client = createClient<paths>({
    baseUrl: origin(),
    credentials: "same-origin",
    // looked up at call time, so a test's stubbed fetch is the one used
    fetch: (request: Request) => globalThis.fetch(request),
  });
  client.use({
    onRequest({ request }) {
      const token = csrfToken();
      if (isWrite(request.method) && token) request.headers.set(CSRF_HEADER, token);
      return request;
    },
    onResponse({ response }) {
      if (response.status === 401) onUnauthorized();
      return undefined;
    },
  });
  return client;
}

interface Answer<D> {
  data?: D;
  error?: unknown;
  response: Response;
}

/** The data of an openapi-fetch answer; an ApiError (the problem in words) when the API refused the request. */
export async function unwrap<D>(call: Promise<Answer<D>>): Promise<D> {
  const { data, error, response } = await call;
  if (!response.ok) throw problemOf(response.status, error, response.headers.get("Retry-After"));
  return data as D;
}

/** A same-origin request outside the typed client (routes the OpenAPI document does not describe yet, multipart
 * bodies): JSON in and out, the CSRF token on writes, an ApiError on refusal. */
export async function request<T>(
  path: string,
  init: { method?: string; json?: unknown; body?: BodyInit; csrfToken?: string | null; onUnauthorized?: () => void } = {},
): Promise<T> {
  const method = init.method ?? "GET";
  const headers = new Headers({ Accept: "application/json" });
  let body = init.body;
  if (init.json !== undefined) {
    headers.set("Content-Type", "application/json");
    body = JSON.stringify(init.json);
  }
  if (isWrite(method) && init.csrfToken) headers.set(CSRF_HEADER, init.csrfToken);
  const response = await globalThis.fetch(new URL(path, origin()).toString(), {
    method,
    headers,
    body: body ?? null,
    credentials: "same-origin",
  });
  if (!response.ok) {
    if (response.status === 401) init.onUnauthorized?.();
    const text = await response.text().catch(() => "");
    throw problemOf(response.status, text, response.headers.get("Retry-After"));
  }
  if (response.status === 204) return undefined as T;
  const text = await response.text();
  return (text ? JSON.parse(text) : undefined) as T;
}

export { ApiError };
