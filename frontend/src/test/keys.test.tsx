import { screen, waitFor, within } from "@testing-library/react";
import userEvent from "@testing-library/user-event";
import { describe, expect, it } from "vitest";
import { CSRF, jsonBody, renderApp } from "./utils";

const KEY = { id: "99999999-9999-9999-9999-999999999999", name: "laptop", prefix: "ns_abcd", created_at: "2026-12-01T10:00:00Z", last_used_at: null };

describe("API keys page", () => {
  it("creates a key and shows its secret once, and revokes a key after confirmation", async () => {
    let keys = [KEY];
    const { calls } = renderApp("/keys", {
      "GET /api/v1/me/keys": () => ({ json: keys }),
      "POST /api/v1/me/keys": () => {
        const created = { ...KEY, id: "aaaaaaaa-aaaa-aaaa-aaaa-aaaaaaaaaaaa", name: "ci", prefix: "ns_ef01", key: "ns_ef01_the_whole_secret" };
        keys = [...keys, created];
        return { status: 201, json: created };
      },
      [`DELETE /api/v1/me/keys/${KEY.id}`]: () => {
        keys = keys.filter((k) => k.id !== KEY.id);
        return { status: 204 };
      },
    });
    const user = userEvent.setup();
    expect(await screen.findByRole("cell", { name: "laptop" })).toBeInTheDocument();
    await user.type(screen.getByLabelText("Key name"), "ci");
    await user.click(screen.getByRole("button", { name: "Create key" }));
    expect(await screen.findByText("ns_ef01_the_whole_secret")).toBeInTheDocument();
    expect(jsonBody(calls.find((c) => c.method === "POST"))).toEqual({ name: "ci" });
    expect(screen.getByLabelText("Key name")).toHaveValue("");
    await user.click(screen.getByRole("button", { name: "Done" }));
    expect(screen.queryByText("ns_ef01_the_whole_secret")).not.toBeInTheDocument();

    const row = (await screen.findByRole("cell", { name: "laptop" })).closest("tr") as HTMLElement;
    await user.click(within(row).getByRole("button", { name: "Revoke" }));
    await user.click(within(row).getByRole("button", { name: "Yes, revoke" }));
    await waitFor(() => expect(screen.queryByRole("cell", { name: "laptop" })).not.toBeInTheDocument());
    const del = calls.find((c) => c.method === "DELETE");
    expect(del?.path).toBe(`/api/v1/me/keys/${KEY.id}`);
    expect(del?.headers.get("X-CSRF-Token")).toBe(CSRF);
  });
});
