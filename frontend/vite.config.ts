/// <reference types="vitest/config" />
import react from "@vitejs/plugin-react";
import { defineConfig } from "vite";

// The API serves the built dashboard at `/`; in development Vite proxies the API to a local `make run`.
const api = process.env.NETSYNTH_API ?? "http://127.0.0.1:8000";

export default defineConfig({
  base: "/",
  plugins: [react()],
  server: {
    proxy: { "/api": { target: api, changeOrigin: false } },
  },
  build: {
    outDir: "dist",
    emptyOutDir: true,
    manifest: true, // read by scripts/bundle-report.mjs to find the initial bundle
    sourcemap: false,
    target: "es2022",
    // the chart chunk (ECharts core with four charts) is about 550 kB before gzip; it loads only with a page that charts
    chunkSizeWarningLimit: 600,
  },
  test: {
    environment: "jsdom",
    globals: true,
    setupFiles: ["./src/test/setup.ts"],
    include: ["src/**/*.test.{ts,tsx}"],
    pool: "forks",
    maxWorkers: 2,
    css: false,
  },
});
