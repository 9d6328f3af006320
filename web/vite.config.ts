/// <reference types="vitest/config" />
import { readdirSync } from "node:fs";
import { resolve } from "node:path";
import { defineConfig } from "vite";
import { octlmSite } from "./plugins/octlm.ts";

const here = import.meta.dirname;
const pages = Object.fromEntries(
  readdirSync(here)
    .filter((f) => f.endsWith(".html"))
    .map((f) => [f.replace(/\.html$/, ""), resolve(here, f)]),
);

export default defineConfig({
  root: here,
  base: "./",
  appType: "mpa",
  plugins: [octlmSite(resolve(here, ".."))],
  build: { outDir: "dist", emptyOutDir: true, rollupOptions: { input: pages }, chunkSizeWarningLimit: 300 },
  preview: { host: "127.0.0.1", port: 4173, strictPort: true },
  server: { host: "127.0.0.1" },
  test: { include: ["tests/unit/**/*.test.ts"], environment: "node" },
});
