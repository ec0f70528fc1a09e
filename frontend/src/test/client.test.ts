import { describe, expect, it, vi } from "vitest";
import { createApi, request, unwrap } from "../api/client";
import { ApiError, describeProblem, parseRetryAfter, reasonInWords } from "../api/problem";
import { mockApi } from "./utils";

describe("API client", () => {
  it("sends the CSRF token on writes only, and cookies same-origin", async () => {
    const calls = mockApi({
      "GET /api/v1/jobs": { json: [] },
      "POST /api/v1/me/keys": { status: 201, json: { id: "k", name: "ci", prefix: "ns_ab", created_at: "x", last_used_at: null, key: "secret" } },
      "DELETE /api/v1/me/keys/k": { status: 204 },
    });
    const api = createApi(() => "token-1");
    await unwrap(api.GET("/api/v1/jobs"));
    await unwrap(api.POST("/api/v1/me/keys", { body: { name: "ci" } }));
    await unwrap(api.DELETE("/api/v1/me/keys/{key_id}", { params: { path: { key_id: "k" } } }));
    expect(calls.map((c) => [c.method, c.headers.get("X-CSRF-Token")])).toEqual([
      ["GET", null],
      ["POST", "token-1"],
      ["DELETE", "token-1"],
    ]);
    const fetchMock = vi.mocked(globalThis.fetch);
    const first = fetchMock.mock.calls[0]?.[0] as Request;
    expect(first.credentials).toBe("same-origin");
  });

  it("turns a problem+json refusal into an ApiError in words, and reports a 401", async () => {
    mockApi({
      "GET /api/v1/jobs": { status: 401, json: { title: "Unauthorized", status: 401, detail: "the session ended" } },
      "POST /api/v1/me/keys": {
        status: 422,
        json: { title: "Unprocessable Content", status: 422, detail: "the request is not valid", errors: [{ loc: ["body", "name"], msg: "String should have at least 1 character", type: "string_too_short" }] },
      },
    });
    const expired = vi.fn();
    const api = createApi(() => null, expired);
    await expect(unwrap(api.GET("/api/v1/jobs"))).rejects.toThrow("the session ended");
    expect(expired).toHaveBeenCalledOnce();
    const error = await unwrap(api.POST("/api/v1/me/keys", { body: { name: "" } })).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ApiError);
    expect((error as ApiError).status).toBe(422);
    expect((error as ApiError).message).toBe("the request is not valid (name: String should have at least 1 character)");
  });

  it("request() sends the CSRF token on a write and reads an empty 204", async () => {
    const calls = mockApi({ "DELETE /api/v1/session": { status: 204 } });
    await expect(request("/api/v1/session", { method: "DELETE", csrfToken: "t" })).resolves.toBeUndefined();
    expect(calls[0]?.headers.get("X-CSRF-Token")).toBe("t");
  });

  it("words problems, retry delays and reasons", () => {
    expect(describeProblem(503, { title: "Service Unavailable" }, 5)).toBe("Service Unavailable (HTTP 503). Try again in 5 s.");
    expect(parseRetryAfter("12")).toBe(12);
    expect(parseRetryAfter(null)).toBeNull();
    expect(reasonInWords("path-traversal")).toMatch(/outside the archive/);
    expect(reasonInWords("some-new-reason")).toBe("some new reason");
  });
});
