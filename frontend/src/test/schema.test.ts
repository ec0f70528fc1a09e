// @vitest-environment node
// The committed src/api/schema.d.ts must be exactly what openapi-typescript makes of the committed openapi.json
// (`npm run gen:api` writes both); a hand edit, or an openapi.json regenerated without its types, fails here.
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import openapiTS, { astToString, COMMENT_HEADER } from "openapi-typescript";
import { describe, expect, it } from "vitest";

const document = new URL("../../openapi.json", import.meta.url);
const types = new URL("../api/schema.d.ts", import.meta.url);

describe("generated API types", () => {
  it("schema.d.ts is openapi-typescript's output for openapi.json", async () => {
    const expected = COMMENT_HEADER + astToString(await openapiTS(document));
    const committed = readFileSync(fileURLToPath(types), "utf8");
    expect(committed === expected, "src/api/schema.d.ts is stale: run `npm run gen:api`").toBe(true);
  }, 60_000);

  it("openapi.json is an OpenAPI document with the API's routes", () => {
    const parsed = JSON.parse(readFileSync(fileURLToPath(document), "utf8")) as { openapi: string; paths: Record<string, unknown> };
    expect(parsed.openapi).toMatch(/^3\./);
    expect(Object.keys(parsed.paths)).toContain("/api/v1/jobs/{job_id}/events");
  });
});
