// Write the API's OpenAPI document to openapi.json, straight from the FastAPI app (no running service needed):
// the repository's Python (../.venv, or NETSYNTH_PYTHON) with a throwaway SQLite database. `npm run gen:api` then
// turns it into src/api/schema.d.ts with openapi-typescript.
import { execFileSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const frontend = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const root = resolve(frontend, "..");
const python = process.env.NETSYNTH_PYTHON ?? join(root, ".venv", "bin", "python");
const scratch = mkdtempSync(join(tmpdir(), "netsynth-openapi-"));
const code =
  "import json; from api.app import create_app; print(json.dumps(create_app().openapi(), indent=2, sort_keys=True))";
try {
  const document = execFileSync(python, ["-c", code], {
    cwd: root,
    env: { ...process.env, NETSYNTH_DATABASE_URL: `sqlite:///${join(scratch, "openapi.db")}` },
    encoding: "utf8",
    maxBuffer: 64 * 1024 * 1024,
  });
  JSON.parse(document); // write nothing but a JSON document
  writeFileSync(join(frontend, "openapi.json"), document);
  console.log("wrote openapi.json");
} finally {
  rmSync(scratch, { recursive: true, force: true });
}
