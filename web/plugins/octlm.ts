/**
 * Build-time helpers for the site, as one Vite plugin:
 *
 * - `import excerpt from "octlm:positions/formulas.py#sinusoidal_table"` gives `{ file, line, code }`: the source of that
 *   function (or `Class.method`), cut from ../octlm/ by its `def` line when the site is built, so the code shown
 *   on a page is always the code that runs. A missing file or function fails the build.
 *   `octlm:positions/scheme.py#PositionScheme` (a capitalised name with no dot) gives a whole class. The path is under
 *   octlm/, subfolders included: `octlm:positions/absolute.py#LearnedPositions.embed`.
 * - `import msg from "octlm-raise:model/decoder.py#Decoder.check_ids#longer than the learned position table"` gives
 *   `{ file, line, parts }`: the message of the `raise ...(` in that function whose text contains the words after
 *   the last `#`, as literal strings and `{ expr }` placeholders of its f-strings, so a page can print what octlm
 *   raises without retyping it.
 * - `import c from "octlm-const:config/schema.py#NAMES"` gives `{ file, line, value }` for a module-level tuple or list of
 *   strings. (Lists that the registry computes, such as the schemes with no maximum length, are not in the source:
 *   pages read them from web/fixtures/schemes.json, see src/schemes.ts.)
 * - `data/manifest.json` lists the result files present in public/data/ when the site is built (or, in dev, when
 *   asked), so the Results page never requests a file that is not there.
 * - Math in the HTML pages, `$$...$$` (display) and `\(...\)` (inline), is typeset with KaTeX at build time.
 * - `import bytes from "octlm-bytes:onnxruntime-web/ort-wasm-simd-threaded.wasm"` gives the size in bytes of the file
 *   that import resolves to (the file Vite copies into the build), so a page can say how large a download is
 *   before it starts it.
 */
import { existsSync, readFileSync, readdirSync, statSync } from "node:fs";
import { resolve } from "node:path";
import katex from "katex";
import type { Plugin } from "vite";

const PREFIXES = ["octlm:", "octlm-raise:", "octlm-const:"];
const RESOLVED = "\0octlm-source:";
const BYTES = "octlm-bytes:";
const RESOLVED_BYTES = "\0octlm-bytes:";
const BYTES_END = ".bytes.js";

export interface Excerpt {
  file: string;
  line: number;
  code: string;
}

const indentOf = (s: string) => s.length - s.trimStart().length;

/** The source of class `name` in Python text, from its `class` line (decorators included) to its last line. */
export function extractClass(text: string, name: string, file = "<python>"): Excerpt {
  const lines = text.split("\n");
  const at = lines.findIndex((l) => new RegExp(`^class ${name}\\b`).test(l));
  if (at < 0) throw new Error(`${file}: no class ${name} (the site shows it; rename it in web/ too)`);
  let first = at;
  while (first > 0 && lines[first - 1].startsWith("@")) first--;
  let end = at + 1;
  while (end < lines.length && (lines[end].trim() === "" || indentOf(lines[end]) > 0)) end++;
  while (end > at + 1 && lines[end - 1].trim() === "") end--;
  return { file, line: first + 1, code: lines.slice(first, end).join("\n") };
}

export type MessagePart = string | { expr: string };
export interface RaisedMessage {
  file: string;
  line: number;
  parts: MessagePart[];
}

/** The pieces of adjacent Python string literals (`"..."` and `f"..."`), f-string fields as `{ expr }`. */
export function parseStrings(src: string): MessagePart[] {
  const parts: MessagePart[] = [];
  const push = (t: string) => {
    if (!t) return;
    if (typeof parts[parts.length - 1] === "string") parts[parts.length - 1] += t;
    else parts.push(t);
  };
  const literal = /(f?)"((?:[^"\\]|\\.)*)"/g;
  const unescape = (t: string) => t.replace(/\\(["\\n])/g, (_, c: string) => (c === "n" ? "\n" : c));
  let m: RegExpExecArray | null;
  let seen = 0;
  while ((m = literal.exec(src))) {
    if (src.slice(seen, m.index).replace(/#.*$/gm, "").trim() !== "") throw new Error(`not a string literal: ${src.slice(seen, m.index).trim()}`);
    seen = m.index + m[0].length;
    const body = m[2];
    if (!m[1]) {
      push(unescape(body));
      continue;
    }
    let i = 0;
    while (i < body.length) {
      if (body.startsWith("{{", i) || body.startsWith("}}", i)) {
        push(body[i]);
        i += 2;
      } else if (body[i] === "{") {
        const close = body.indexOf("}", i);
        if (close < 0) throw new Error(`unclosed {{ in f-string: ${body}`);
        parts.push({ expr: body.slice(i + 1, close) });
        i = close + 1;
      } else {
        const next = body.slice(i).search(/[{}]/);
        const stop = next < 0 ? body.length : i + next;
        push(unescape(body.slice(i, stop)));
        i = stop;
      }
    }
  }
  if (src.slice(seen).trim() !== "") throw new Error(`not a string literal: ${src.slice(seen).trim()}`);
  return parts;
}

/** The message of the `raise Error(...)` in function `name` whose source contains `needle`. */
export function extractRaise(text: string, name: string, needle: string, file = "<python>"): RaisedMessage {
  const fn = extractDef(text, name, file);
  const re = /raise \w+\(/g;
  let m: RegExpExecArray | null;
  while ((m = re.exec(fn.code))) {
    let depth = 1;
    let i = m.index + m[0].length;
    let quote = false;
    for (; i < fn.code.length && depth > 0; i++) {
      const c = fn.code[i];
      if (c === "\\" && quote) i++;
      else if (c === '"') quote = !quote;
      else if (!quote && c === "(") depth++;
      else if (!quote && c === ")") depth--;
    }
    const args = fn.code.slice(m.index + m[0].length, i - 1);
    if (!args.includes(needle)) continue;
    const line = fn.line + fn.code.slice(0, m.index).split("\n").length - 1;
    return { file, line, parts: parseStrings(args.trim().replace(/,\s*$/, "")) };
  }
  throw new Error(`${file}: no raise containing "${needle}" in ${name} (the site prints that message)`);
}

/** A module-level `NAME = ("a", "b", ...)` (or a list) of strings. */
export function extractConst(text: string, name: string, file = "<python>"): { file: string; line: number; value: string[] } {
  const lines = text.split("\n");
  const at = lines.findIndex((l) => l.startsWith(`${name} = `) || l.startsWith(`${name}: `));
  if (at < 0) throw new Error(`${file}: no ${name} = ... (the site uses it)`);
  const rest = lines.slice(at).join("\n");
  const m = /=\s*[([]([^)\]]*)[)\]]/.exec(rest);
  if (!m) throw new Error(`${file}: ${name} is not a tuple or list of strings`);
  const value = [...m[1].matchAll(/"([^"]*)"|'([^']*)'/g)].map((x) => x[1] ?? x[2]);
  return { file, line: at + 1, value };
}

/** The source of `name` (a function, or `Class.method`) in Python text, from its `def` line to its last line. */
export function extractDef(text: string, name: string, file = "<python>"): Excerpt {
  if (/^[A-Z]\w*$/.test(name)) return extractClass(text, name, file);
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

/**
 * Python source as highlighted lines, for the code excerpts: per line, the pieces of the line with the kind of token
 * each is ("" for plain text), so that a page builds the spans itself (no HTML is passed around) and can still mark
 * a whole line. Joined, the pieces are the source exactly. The kinds: `kw` keyword, `con` True/False/None, `self`,
 * `def` the name a def or class introduces, `dec` decorator, `str` string (docstrings included, across lines), `com`
 * comment, `num` number.
 */
export type CodeLine = [kind: string, text: string][];
const KEYWORDS = new Set(
  "and as assert async await break class continue def del elif else except finally for from global if import in is lambda nonlocal not or pass raise return try while with yield match case".split(" "),
);
const TOKEN = new RegExp(
  [
    /(?<str>[rRbBfFuU]{0,2}(?:"""[\s\S]*?"""|'''[\s\S]*?'''|"(?:\\.|[^"\\\n])*"|'(?:\\.|[^'\\\n])*'))/.source,
    /(?<com>#[^\n]*)/.source,
    /(?<dec>(?<=^[ \t]*)@[\w.]+)/.source,
    /(?<num>\b\d[\d_]*(?:\.\d*)?(?:[eE][+-]?\d+)?j?\b)/.source,
    /(?<name>[A-Za-z_]\w*)/.source,
  ].join("|"),
  "gm",
);

export function highlightPython(code: string): CodeLine[] {
  const pieces: [string, string][] = [];
  let at = 0;
  let previous = "";
  for (const m of code.matchAll(TOKEN)) {
    if (m.index > at) pieces.push(["", code.slice(at, m.index)]);
    const g = m.groups!;
    const kind = g.str ? "str" : g.com ? "com" : g.dec ? "dec" : g.num ? "num" : previous === "def" || previous === "class" ? "def" : KEYWORDS.has(m[0]) ? "kw" : ["True", "False", "None"].includes(m[0]) ? "con" : m[0] === "self" ? "self" : "";
    pieces.push([kind, m[0]]);
    if (g.name) previous = m[0];
    at = m.index + m[0].length;
  }
  if (at < code.length) pieces.push(["", code.slice(at)]);
  // cut at newlines: a docstring over three lines is three pieces of kind "str", one per line
  const lines: CodeLine[] = [[]];
  for (const [kind, text] of pieces)
    text.split("\n").forEach((part, i) => {
      if (i) lines.push([]);
      if (part) lines[lines.length - 1].push([kind, part]);
    });
  return lines;
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
  ["models", "Models, live"],
  ["tasks", "Task battery"],
  ["measured", "Measured, and skipped"],
];

const FOOTER =
  '<footer><p>octlm explainer. Every number on these pages is computed in your browser by <code>web/src/math.ts</code>, ' +
  "which is tested against <code>octlm/positions/</code> to 1e-7; the code excerpts are cut from <code>octlm/</code> " +
  "when the site is built. Results appear only when a run exports them. The Models page runs octlm's exported models " +
  "(onnxruntime-web), tested against PyTorch to 1e-4.</p></footer>";

// public/favicon.svg, linked from every page so that no browser asks for a /favicon.ico that is not there
const ICON = '<link rel="icon" href="./favicon.svg" type="image/svg+xml">';

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
    async resolveId(id, importer) {
      if (id.startsWith(BYTES)) {
        const target = await this.resolve(id.slice(BYTES.length), importer, { skipSelf: true });
        if (!target) throw new Error(`${id}: cannot resolve ${id.slice(BYTES.length)}`);
        return `${RESOLVED_BYTES}${target.id.split("?")[0]}${BYTES_END}`; // not ".wasm": Vite's wasm plugin would load it
      }
      return PREFIXES.some((p) => id.startsWith(p)) ? RESOLVED + id : null;
    },
    load(id) {
      if (id.startsWith(RESOLVED_BYTES)) {
        const path = id.slice(RESOLVED_BYTES.length, -BYTES_END.length);
        this.addWatchFile(path);
        return `export default ${statSync(path).size};`;
      }
      if (!id.startsWith(RESOLVED)) return null;
      const spec = id.slice(RESOLVED.length);
      const kind = PREFIXES.find((p) => spec.startsWith(p))!;
      const [file, name, ...needle] = spec.slice(kind.length).split("#");
      const path = resolve(repoRoot, "octlm", file);
      this.addWatchFile(path);
      let text: string;
      try {
        text = readFileSync(path, "utf-8");
      } catch {
        throw new Error(`octlm/${file} is missing; the site shows code from it`);
      }
      const where = `octlm/${file}`;
      const value =
        kind === "octlm-raise:" ? extractRaise(text, name, needle.join("#"), where) : kind === "octlm-const:" ? extractConst(text, name, where) : { ...extractDef(text, name, where), lines: highlightPython(extractDef(text, name, where).code) };
      return `export default ${JSON.stringify(value)};`;
    },
    transformIndexHtml: {
      order: "pre",
      handler: (html, ctx) => {
        const stem = ctx.path.replace(/^.*\//, "").replace(/\.html$/, "") || "index";
        return typeset(html)
          .replace("</head>", `${ICON}\n</head>`)
          .replace("<!--nav-->", nav(stem))
          .replace("<!--footer-->", FOOTER);
      },
    },
  };
}
