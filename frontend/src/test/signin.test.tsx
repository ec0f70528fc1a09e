import { screen, waitFor } from "@testing-library/react";
import userEvent from "@testing-library/user-event";
import { describe, expect, it, vi } from "vitest";
import { CSRF, renderApp, SESSION, jsonBody } from "./utils";

const KEY = "ns_secret_key_do_not_store";

describe("sign in", () => {
  it("shows the API's detail in words on 401 and never writes the key to storage", async () => {
    const setItem = vi.spyOn(Storage.prototype, "setItem");
    const { calls } = renderApp("/jobs", {
      "POST /api/v1/session": {
        status: 401,
        json: { type: "urn:netsynth:problem:unauthenticated", title: "Unauthorized", status: 401, detail: "the API key is unknown, wrong or revoked" },
      },
    }, { signedIn: false });
    const user = userEvent.setup();
    const input = await screen.findByLabelText("API key");
    expect(input).toHaveAttribute("type", "password");
    await user.type(input, KEY);
    await user.click(screen.getByRole("button", { name: "Sign in" }));

    expect(await screen.findByRole("alert")).toHaveTextContent("the API key is unknown, wrong or revoked");
    const post = calls.find((c) => c.method === "POST" && c.path === "/api/v1/session");
    expect(jsonBody(post)).toEqual({ api_key: KEY });
    expect(setItem).not.toHaveBeenCalled();
    expect(localStorage.length).toBe(0);
    expect(sessionStorage.length).toBe(0);
    expect(document.cookie).not.toContain(KEY);
  });

  it("opens the session, clears the key, and sends the CSRF token when signing out", async () => {
    const setItem = vi.spyOn(Storage.prototype, "setItem");
    const { calls } = renderApp("/jobs", {
      "POST /api/v1/session": { json: SESSION },
      "DELETE /api/v1/session": { status: 204 },
      "GET /api/v1/jobs": { json: [] },
      "GET /api/v1/datasets": { json: [] },
    }, { signedIn: false });
    const user = userEvent.setup();
    await user.type(await screen.findByLabelText("API key"), KEY);
    await user.click(screen.getByRole("button", { name: "Sign in" }));

    const signOut = await screen.findByRole("button", { name: "Sign out" });
    expect(screen.queryByLabelText("API key")).not.toBeInTheDocument();
    expect(await screen.findByRole("heading", { name: "Jobs" })).toBeInTheDocument();
    expect(document.body.innerHTML).not.toContain(KEY);
    expect(setItem).not.toHaveBeenCalled();

    await user.click(signOut);
    expect(await screen.findByLabelText("API key")).toHaveValue("");
    const del = calls.find((c) => c.method === "DELETE" && c.path === "/api/v1/session");
    expect(del?.headers.get("X-CSRF-Token")).toBe(CSRF);
  });

  it("restores the session from the cookie on load", async () => {
    renderApp("/jobs", { "GET /api/v1/jobs": { json: [] }, "GET /api/v1/datasets": { json: [] } });
    expect(await screen.findByRole("button", { name: "Sign out" })).toBeInTheDocument();
    await waitFor(() => expect(screen.getByText(/No jobs yet/)).toBeInTheDocument());
  });
});
