/**
 * Build-time helpers for the site, as one Vite plugin:
 *
 * - `import excerpt from "octlm:positions.py#sinusoidal_table"` gives `{ file, line, code }`: the source of that
 *   function (or `Class.method`), cut from ../octlm/ by its `def` line when the site is built, so the code shown
 *   on a page is always the code that runs. A missing file or function fails the build.
 * - `data/manifest.json` lists the result files present in public/data/ when the site is built (or, in dev, when
 *   asked), so the Results page never requests a file that is not there.
 * - Math in the HTML pages, `$$...$$` (display) and `\(...\)` (inline), is typeset with KaTeX at build time.
 */
import { existsSync, readFileSync, readdirSync } from "node:fs";
import { resolve } from "node:path";
import katex from "katex";
import type { Plugin } from "vite";

const PREFIX = "octlm:";
const RESOLVED = "\0octlm-source:";

export interface Excerpt {
  file: string;
  line: number;
  code: string;
}

const indentOf = (s: string) => s.length - s.trimStart().length;

/** The source of `name` (a function, or `Class.method`) in Python text, from its `def` line to its last line. */
export function extractDef(text: string, name: string, file = "<python>"): Excerpt {
  const lines = text.split("\n");
  let start = 0;
  let minIndent = 0;
  let fn = name;
  if (name.includes(".")) {
    const [cls, method] = name.split(".");
    start = lines.findIndex((l) => new RegExp(`^class ${cls}\\b`).test(l));
    if (start < 0) throw new Error(`${file}: no class ${cls} (wanted ${name} for the site)`);
    minIndent = 1;
    fn = method;
  }
  const isDef = new RegExp(`^\\s*def ${fn}\\(`);
  const at = lines.findIndex(
    (l, i) => i >= start && isDef.test(l) && (minIndent ? indentOf(l) > 0 : indentOf(l) === 0),
  );
  if (at < 0) throw new Error(`${file}: no def ${name}( (the site shows it; rename it in web/ too)`);
  let first = at;
  while (first > 0 && lines[first - 1].trimStart().startsWith("@")) first--;
  const indent = indentOf(lines[at]);
  let end = at + 1;
  // the signature may run over several lines; the body is everything indented deeper than the def
  while (end < lines.length && (lines[end].trim() === "" || indentOf(lines[end]) > indent || /^\s*\)/.test(lines[end]))) end++;
  while (end > at + 1 && lines[end - 1].trim() === "") end--;
  const code = lines
    .slice(first, end)
    .map((l) => l.slice(Math.min(indent, indentOf(l) || indent)))
    .join("\n");
  return { file, line: first + 1, code };
}

function typeset(html: string): string {
  const render = (tex: string, displayMode: boolean) =>
    katex.renderToString(tex.trim(), { displayMode, output: "htmlAndMathml", throwOnError: true, strict: "error" });
  return html
    .replace(/\$\$([\s\S]+?)\$\$/g, (_, tex: string) => render(tex, true))
    .replace(/\\\(([\s\S]+?)\\\)/g, (_, tex: string) => render(tex, false));
}

/** The pages, in reading order: file stem and title. The navigation bar is written into every page from this. */
export const PAGES: [string, string][] = [
  ["index", "Overview"],
  ["embeddings", "Embeddings"],
  ["positions", "Positions"],
  ["sinusoidal", "Sinusoidal table"],
  ["shapes", "Shapes"],
  ["rope", "RoPE"],
  ["bias", "ALiBi and T5"],
  ["results", "Results"],
];

const FOOTER =
  '<footer><p>octlm explainer. Every number on these pages is computed in your browser by <code>web/src/math.ts</code>, ' +
  "which is tested against <code>octlm/positions.py</code> to 1e-5; the code excerpts are cut from <code>octlm/</code> " +
  "when the site is built. Results appear only when a run exports them.</p></footer>";

function nav(current: string): string {
  const items = PAGES.map(([stem, title]) => {
    const here = stem === current ? ' aria-current="page"' : "";
    return `<li><a href="./${stem}.html"${here}>${title}</a></li>`;
  }).join("");
  return `<a class="skip" href="#main">Skip to content</a><header class="site"><a class="brand" href="./index.html">octlm</a><nav aria-label="Pages"><ul>${items}</ul></nav></header>`;
}

function manifest(publicDir: string): string {
  const dir = resolve(publicDir, "data");
  const files = existsSync(dir) ? readdirSync(dir).filter((f) => f.endsWith(".json") && f !== "manifest.json").sort() : [];
  return JSON.stringify({ schema: 1, files }) + "\n";
}

export function octlmSite(repoRoot: string): Plugin {
  let publicDir = "";
  return {
    name: "octlm-site",
    configResolved(config) {
      publicDir = config.publicDir;
    },
    configureServer(server) {
      server.middlewares.use((req, res, next) => {
        if (!req.url?.split("?")[0].endsWith("/data/manifest.json")) return next();
        res.setHeader("Content-Type", "application/json");
        res.end(manifest(publicDir));
      });
    },
    generateBundle() {
      this.emitFile({ type: "asset", fileName: "data/manifest.json", source: manifest(publicDir) });
    },
    resolveId(id) {
      return id.startsWith(PREFIX) ? RESOLVED + id.slice(PREFIX.length) : null;
    },
    load(id) {
      if (!id.startsWith(RESOLVED)) return null;
      const [file, name] = id.slice(RESOLVED.length).split("#");
      const path = resolve(repoRoot, "octlm", file);
      this.addWatchFile(path);
      let text: string;
      try {
        text = readFileSync(path, "utf-8");
      } catch {
        throw new Error(`octlm/${file} is missing; the site shows code from it`);
      }
      return `export default ${JSON.stringify(extractDef(text, name, `octlm/${file}`))};`;
    },
    transformIndexHtml: {
      order: "pre",
      handler: (html, ctx) => {
        const stem = ctx.path.replace(/^.*\//, "").replace(/\.html$/, "") || "index";
        return typeset(html).replace("<!--nav-->", nav(stem)).replace("<!--footer-->", FOOTER);
      },
    },
  };
}
