// The browser-test harness shared by the files in this folder: the built site (dist/) served on 127.0.0.1, one
// Chromium (playwright-core, the system binary) per test file, and the guards every page is opened with: console
// errors, page errors, failed responses (a 404 for a favicon included) and requests that leave 127.0.0.1.
import { after, before } from "node:test";
import assert from "node:assert/strict";
import { createServer } from "node:http";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, existsSync } from "node:fs";
import { extname, join, resolve } from "node:path";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { chromium } from "playwright-core";

export const WEB = resolve(import.meta.dirname, "../..");
export const REPO = resolve(WEB, "..");
// WEB_DIST: a build elsewhere (`npx vite build --outDir DIR --emptyOutDir`), so that two builds never share one folder
const DIST = resolve(process.env.WEB_DIST ?? join(WEB, "dist"));
export const RESULTS = join(WEB, "test-results");
const CHROMIUM = process.env.CHROMIUM_PATH ?? "/usr/bin/chromium";
const AXE = createRequire(import.meta.url).resolve("axe-core/axe.min.js");
export const PAGES = ["index", "embeddings", "positions", "sinusoidal", "shapes", "rope", "bias", "results", "models", "tasks", "measured"];
export const fixture = (name) => JSON.parse(readFileSync(join(WEB, "fixtures", `${name}.json`), "utf-8")).cases;
export const sample = (name) => readFileSync(join(WEB, "tests/fixtures", name), "utf-8");
const TYPES = { ".html": "text/html", ".js": "text/javascript", ".css": "text/css", ".json": "application/json", ".woff2": "font/woff2", ".woff": "font/woff", ".ttf": "font/ttf", ".png": "image/png", ".svg": "image/svg+xml", ".ico": "image/x-icon", ".wasm": "application/wasm", ".onnx": "application/octet-stream" };

let server, origin, browser, userDir;

before(async () => {
  assert.ok(existsSync(join(DIST, "index.html")), "web/dist is missing; run `npm run build` first");
  mkdirSync(RESULTS, { recursive: true });
  server = createServer((req, res) => {
    const path = decodeURIComponent(new URL(req.url, "http://x").pathname);
    const file = resolve(DIST, "." + (path.endsWith("/") ? path + "index.html" : path));
    if (!file.startsWith(DIST) || !existsSync(file)) {
      res.writeHead(404).end("not found");
      return;
    }
    res.writeHead(200, { "Content-Type": TYPES[extname(file)] ?? "application/octet-stream" }).end(readFileSync(file));
  });
  await new Promise((ok) => server.listen(0, "127.0.0.1", ok));
  origin = `http://127.0.0.1:${server.address().port}`;
  userDir = mkdtempSync(join(tmpdir(), "octlm-chromium-"));
  browser = await chromium.launchPersistentContext(userDir, {
    executablePath: CHROMIUM,
    headless: true,
    args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync"],
    viewport: { width: 1100, height: 900 },
  });
});

after(async () => {
  await browser?.close();
  server?.close();
  if (userDir) rmSync(userDir, { recursive: true, force: true });
});

export const siteOrigin = () => origin;

/** Open a page with the guards on; returns the page and the lists the guards fill. */
export async function open(name, { width = 1100, routes = {} } = {}) {
  const page = await browser.newPage();
  await page.setViewportSize({ width, height: 900 });
  const errors = [];
  const offsite = [];
  const failed = [];
  page.on("console", (m) => m.type() === "error" && errors.push(m.text()));
  page.on("pageerror", (e) => errors.push(String(e)));
  page.on("response", (r) => r.status() >= 400 && failed.push(`${r.status()} ${r.url()}`));
  page.on("requestfailed", (r) => new URL(r.url()).hostname === "127.0.0.1" && failed.push(`failed ${r.url()}`));
  await page.route("**/*", (route) => {
    const url = new URL(route.request().url());
    if (url.hostname !== "127.0.0.1") {
      offsite.push(url.href);
      return route.abort();
    }
    for (const [suffix, body] of Object.entries(routes))
      if (url.pathname.endsWith(suffix)) return route.fulfill({ status: 200, contentType: "application/json", body });
    return route.continue();
  });
  await page.goto(`${origin}/${name}.html`, { waitUntil: "networkidle" });
  return { page, errors, offsite, failed };
}

export async function axe(page) {
  await page.addScriptTag({ path: AXE });
  const result = await page.evaluate(() => window.axe.run(document, { resultTypes: ["violations"] }));
  return result.violations.filter((v) => v.impact === "serious" || v.impact === "critical").map((v) => `${v.id}: ${v.help} (${v.nodes.map((n) => n.target.join(" ")).slice(0, 3).join("; ")})`);
}

export const close = (a, b, tol = 1e-5) => assert.ok(Math.abs(a - b) <= tol, `${a} vs ${b}`);
export const text = (page, sel) => page.locator(sel).first().innerText();
export const readout = async (page, sel) => Number(await page.locator(`${sel} output.readout`).getAttribute("data-value"));
/** Let ResizeObservers and redraws settle (two animation frames). */
export const settle = (page) => page.evaluate(() => new Promise((ok) => requestAnimationFrame(() => requestAnimationFrame(ok))));
