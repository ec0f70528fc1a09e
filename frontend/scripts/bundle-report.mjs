// Print the gzip size of every JS and CSS chunk the build emitted, and the initial bundle's total: the entry chunk
// with the chunks and stylesheets it imports statically, plus whatever dist/index.html loads. Exits 1 when the
// initial bundle is over the limit (300 kB gzip), or when ECharts is part of it (only the pages that chart, loaded
// lazily, may import it), so `npm run build` fails on a bundle that grew too big.
import { existsSync, readFileSync, readdirSync, statSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { gzipSync } from "node:zlib";

const LIMIT_KB = Number(process.env.BUNDLE_LIMIT_KB ?? 300);
const dist = resolve(dirname(fileURLToPath(import.meta.url)), "..", "dist");
const manifestPath = join(dist, ".vite", "manifest.json");
if (!existsSync(manifestPath)) {
  console.error(`bundle-report: ${relative(process.cwd(), manifestPath)} is missing; run vite build first`);
  process.exit(1);
}

const gzipKb = (file) => gzipSync(readFileSync(join(dist, file)), { level: 9 }).length / 1000;
const rawKb = (file) => statSync(join(dist, file)).size / 1000;

function walk(folder) {
  return readdirSync(join(dist, folder), { withFileTypes: true }).flatMap((entry) => {
    const path = folder ? `${folder}/${entry.name}` : entry.name;
    return entry.isDirectory() ? walk(path) : [path];
  });
}

// the initial bundle: the entry chunk and its static imports (transitively), with their CSS
const manifest = JSON.parse(readFileSync(manifestPath, "utf8"));
const initial = new Set();
const initialSources = [];
const visit = (key) => {
  const chunk = manifest[key];
  if (!chunk || initial.has(chunk.file)) return;
  initial.add(chunk.file);
  initialSources.push(key, chunk.src ?? "", chunk.name ?? "", chunk.file);
  for (const css of chunk.css ?? []) initial.add(css);
  for (const imported of chunk.imports ?? []) visit(imported);
};
for (const [key, chunk] of Object.entries(manifest)) if (chunk.isEntry) visit(key);

// and what index.html itself loads (scripts, stylesheets, module preloads)
const html = readFileSync(join(dist, "index.html"), "utf8");
for (const match of html.matchAll(/<(?:script|link)\b[^>]*?(?:src|href)="([^"]+)"[^>]*>/g)) {
  const tag = match[0];
  const file = match[1].replace(/^\//, "");
  if (/\.(js|css)$/.test(file) && !/rel="(?:icon|manifest)"/.test(tag) && existsSync(join(dist, file))) initial.add(file);
}

const chunks = walk("").filter((file) => /\.(js|css)$/.test(file)).sort();
const rows = chunks.map((file) => ({ file, raw: rawKb(file), gzip: gzipKb(file), initial: initial.has(file) }));
const width = Math.max(...rows.map((r) => r.file.length), 10);
console.log(`\n${"chunk".padEnd(width)}  ${"raw kB".padStart(9)}  ${"gzip kB".padStart(9)}  initial`);
for (const r of rows.sort((a, b) => Number(b.initial) - Number(a.initial) || b.gzip - a.gzip)) {
  console.log(`${r.file.padEnd(width)}  ${r.raw.toFixed(2).padStart(9)}  ${r.gzip.toFixed(2).padStart(9)}  ${r.initial ? "yes" : ""}`);
}
const total = rows.filter((r) => r.initial).reduce((sum, r) => sum + r.gzip, 0);
const all = rows.reduce((sum, r) => sum + r.gzip, 0);
console.log(`\ninitial bundle (entry + index.html): ${total.toFixed(2)} kB gzip (limit ${LIMIT_KB} kB); all chunks: ${all.toFixed(2)} kB gzip`);
// ECharts marks its chart elements with this attribute name, a string that minification keeps
const ECHARTS_MARK = "_echarts_instance_";
const charting = [
  ...initialSources.filter((source) => /echarts|(^|\/|_)Chart(\.tsx|-[\w-]+\.js)?$/.test(source)),
  ...[...initial].filter((file) => file.endsWith(".js") && readFileSync(join(dist, file), "utf8").includes(ECHARTS_MARK)),
];
if (charting.length > 0) {
  console.error(`bundle-report: ECharts is in the initial bundle (${[...new Set(charting)].join(", ")}); import it lazily`);
  process.exit(1);
}
if (total > LIMIT_KB) {
  console.error(`bundle-report: the initial bundle is ${total.toFixed(2)} kB gzip, over the ${LIMIT_KB} kB limit`);
  process.exit(1);
}
