/** Small DOM helpers shared by every page: elements, colour scales with legends, heatmaps, number tables. */
import type { Matrix } from "./math";

type Attrs = Record<string, string | number | boolean | undefined>;
type Child = Node | string | null | undefined | false;

export function el<K extends keyof HTMLElementTagNameMap>(tag: K, attrs: Attrs = {}, ...children: Child[]) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === false) continue;
    if (k === "text") node.textContent = String(v);
    else node.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children) if (c !== null && c !== undefined && c !== false) node.append(c);
  return node;
}

const SVG = "http://www.w3.org/2000/svg";
export function svg(tag: string, attrs: Attrs = {}, ...children: Child[]): SVGElement {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) if (v !== undefined && v !== false) node.setAttribute(k, String(v));
  for (const c of children) if (c) node.append(c);
  return node;
}

export function $(selector: string): HTMLElement {
  const node = document.querySelector<HTMLElement>(selector);
  if (!node) throw new Error(`missing ${selector}`);
  return node;
}

/** Numbers as the pages print them: 4 significant digits, a real minus sign, −∞ for masked entries. */
export function fmt(v: number, digits = 4): string {
  if (v === -Infinity) return "−∞";
  if (Number.isNaN(v)) return "n/a";
  if (Object.is(v, -0) || Math.abs(v) < 1e-12) return "0";
  const s = Math.abs(v) >= 1e4 || Math.abs(v) < 1e-3 ? v.toExponential(digits - 1) : v.toPrecision(digits);
  return s.replace(/\.?0+(e|$)/, "$1").replace("-", "−");
}

// ----------------------------------------------------------------------------------------------------------
// Colour scales: a diverging blue–white–orange for signed values, a viridis-like ramp for non-negative ones.
// Both stay distinguishable under the common colour-vision deficiencies.

type Stop = [number, [number, number, number]];
const DIVERGING: Stop[] = [
  [0, [33, 102, 172]],
  [0.25, [146, 197, 222]],
  [0.5, [247, 247, 247]],
  [0.75, [253, 184, 99]],
  [1, [230, 97, 1]],
];
const SEQUENTIAL: Stop[] = [
  [0, [253, 231, 37]],
  [0.25, [94, 201, 98]],
  [0.5, [33, 145, 140]],
  [0.75, [59, 82, 139]],
  [1, [68, 1, 84]],
];
export const MASKED = "#6b6b6b";

export interface Scale {
  kind: "diverging" | "sequential";
  min: number;
  max: number;
}

/** A diverging scale symmetric around 0 that covers every finite value. */
export function divergingFor(values: number[], atLeast = 1e-9): Scale {
  const m = values.reduce((acc, v) => (Number.isFinite(v) ? Math.max(acc, Math.abs(v)) : acc), atLeast);
  return { kind: "diverging", min: -m, max: m };
}

export function sequentialFor(values: number[]): Scale {
  const finite = values.filter(Number.isFinite);
  const min = Math.min(...finite, 0);
  const max = Math.max(...finite, min + 1e-9);
  return { kind: "sequential", min, max };
}

export function colourRGB(scale: Scale, v: number): [number, number, number] {
  const stops = scale.kind === "diverging" ? DIVERGING : SEQUENTIAL;
  const u = Math.min(1, Math.max(0, (v - scale.min) / (scale.max - scale.min || 1)));
  for (let i = 1; i < stops.length; i++) {
    if (u <= stops[i][0]) {
      const [u0, c0] = stops[i - 1];
      const [u1, c1] = stops[i];
      const w = (u - u0) / (u1 - u0);
      return [0, 1, 2].map((k) => Math.round(c0[k] + w * (c1[k] - c0[k]))) as [number, number, number];
    }
  }
  return stops[stops.length - 1][1];
}

export function colour(scale: Scale, v: number): string {
  if (!Number.isFinite(v)) return MASKED;
  const [r, g, b] = colourRGB(scale, v);
  return `rgb(${r} ${g} ${b})`;
}

/** Text colour that stays readable on a cell of the given colour. */
export function ink(scale: Scale, v: number): string {
  if (!Number.isFinite(v)) return "#fff";
  const [r, g, b] = colourRGB(scale, v);
  return 0.299 * r + 0.587 * g + 0.114 * b > 140 ? "#111" : "#fff";
}

/** A colour bar with numbered ticks (and a grey swatch when some entries are masked). */
export function legend(scale: Scale, label: string, masked = false): HTMLElement {
  const id = `grad-${Math.random().toString(36).slice(2, 8)}`;
  const ticks = scale.kind === "diverging" ? [scale.min, scale.min / 2, 0, scale.max / 2, scale.max] : [0, 0.25, 0.5, 0.75, 1].map((u) => scale.min + u * (scale.max - scale.min));
  const stops = Array.from({ length: 11 }, (_, i) => {
    const v = scale.min + (i / 10) * (scale.max - scale.min);
    return svg("stop", { offset: `${i * 10}%`, "stop-color": colour(scale, v) });
  });
  const width = 240;
  const bar = svg(
    "svg",
    { viewBox: `0 0 ${width + 20} 34`, width: width + 20, height: 34, "aria-hidden": "true", class: "legend-bar" },
    svg("defs", {}, svg("linearGradient", { id }, ...stops)),
    svg("rect", { x: 10, y: 2, width, height: 12, fill: `url(#${id})`, stroke: "#888" }),
    ...ticks.map((t, i) => {
      const x = 10 + (i / (ticks.length - 1)) * width;
      const text = svg("text", { x, y: 30, "text-anchor": "middle", "font-size": 11 });
      text.textContent = fmt(t, 3);
      return svg("g", {}, svg("line", { x1: x, x2: x, y1: 14, y2: 18, stroke: "#444" }), text);
    }),
  );
  const words = `${label}: colour scale from ${fmt(scale.min, 3)} to ${fmt(scale.max, 3)}${scale.kind === "diverging" ? ", white at 0, blue negative, orange positive" : ", yellow low, purple high"}`;
  return el(
    "div",
    { class: "legend", role: "img", "aria-label": words },
    el("span", { class: "legend-label", text: label }),
    bar,
    masked ? el("span", { class: "legend-masked" }, el("span", { class: "swatch", style: `background:${MASKED}` }), "masked (−∞)") : null,
  );
}

// ----------------------------------------------------------------------------------------------------------
// Heatmap: a canvas (cheap for thousands of cells) plus a cursor that follows the mouse or the arrow keys.

export interface HeatmapOptions {
  label: string; // what the map shows, for the accessible name and the readout
  rowName: string;
  colName: string;
  cellSize?: number;
  maxSize?: number;
  format?: (v: number) => string;
}

export interface Heatmap {
  root: HTMLElement;
  update(data: Matrix, scale: Scale): void;
  select(row: number, col: number): void;
}

export function heatmap(opts: HeatmapOptions): Heatmap {
  const format = opts.format ?? ((v: number) => fmt(v, 6));
  const canvas = el("canvas", { class: "heatmap-canvas", "aria-hidden": "true" });
  const cursor = el("div", { class: "heatmap-cursor", "aria-hidden": "true" });
  const frame = el("div", {
    class: "heatmap-frame",
    tabindex: 0,
    role: "group",
    "aria-label": `${opts.label}. Use the arrow keys to move between cells; Home and End jump to the row's ends.`,
    "aria-describedby": "",
  }, canvas, cursor);
  const readout = el("output", { class: "readout", "aria-live": "polite" });
  const legendSlot = el("div", { class: "legend-slot" });
  const axes = el("p", { class: "axes", text: `rows: ${opts.rowName} · columns: ${opts.colName}` });
  const root = el("figure", { class: "heatmap" }, el("figcaption", { text: opts.label }), axes, frame, readout, legendSlot);
  const rid = `ro-${Math.random().toString(36).slice(2, 8)}`;
  readout.id = rid;
  frame.setAttribute("aria-describedby", rid);

  let data: Matrix = [];
  let row = 0;
  let col = 0;

  const show = () => {
    if (!data.length || !data[0].length) {
      readout.textContent = "";
      cursor.hidden = true;
      return;
    }
    row = Math.min(Math.max(row, 0), data.length - 1);
    col = Math.min(Math.max(col, 0), data[0].length - 1);
    const v = data[row][col];
    readout.textContent = `${opts.rowName} ${row}, ${opts.colName} ${col}: ${format(v)}`;
    readout.dataset.row = String(row);
    readout.dataset.col = String(col);
    readout.dataset.value = Number.isFinite(v) ? String(v) : "-Infinity";
    const w = canvas.clientWidth / data[0].length;
    const h = canvas.clientHeight / data.length;
    cursor.hidden = false;
    cursor.style.left = `${col * w}px`;
    cursor.style.top = `${row * h}px`;
    cursor.style.width = `${Math.max(w, 2)}px`;
    cursor.style.height = `${Math.max(h, 2)}px`;
  };

  frame.addEventListener("keydown", (e) => {
    const moves: Record<string, [number, number]> = { ArrowUp: [-1, 0], ArrowDown: [1, 0], ArrowLeft: [0, -1], ArrowRight: [0, 1] };
    if (e.key in moves) {
      row += moves[e.key][0];
      col += moves[e.key][1];
    } else if (e.key === "Home") col = 0;
    else if (e.key === "End") col = (data[0]?.length ?? 1) - 1;
    else return;
    e.preventDefault();
    show();
  });
  frame.addEventListener("pointermove", (e) => {
    if (!data.length) return;
    const box = canvas.getBoundingClientRect();
    const c = Math.floor(((e.clientX - box.left) / box.width) * data[0].length);
    const r = Math.floor(((e.clientY - box.top) / box.height) * data.length);
    if (r >= 0 && c >= 0 && r < data.length && c < data[0].length) {
      row = r;
      col = c;
      show();
    }
  });
  new ResizeObserver(() => show()).observe(canvas);

  return {
    root,
    select(r, c) {
      row = r;
      col = c;
      show();
    },
    update(next, scale) {
      data = next;
      const rows = next.length;
      const cols = next[0]?.length ?? 0;
      canvas.width = Math.max(cols, 1);
      canvas.height = Math.max(rows, 1);
      const ctx = canvas.getContext("2d");
      if (ctx && rows && cols) {
        const img = ctx.createImageData(cols, rows);
        next.forEach((r, i) =>
          r.forEach((v, j) => {
            const [R, G, B] = Number.isFinite(v) ? colourRGB(scale, v) : [107, 107, 107];
            img.data.set([R, G, B, 255], (i * cols + j) * 4);
          }),
        );
        ctx.putImageData(img, 0, 0);
      }
      const size = opts.maxSize ?? 480;
      const cell = Math.max(1, Math.min(opts.cellSize ?? 24, Math.floor(size / Math.max(rows, cols, 1))));
      canvas.style.width = `${cell * cols}px`;
      canvas.style.aspectRatio = `${cols} / ${rows}`;
      legendSlot.replaceChildren(legend(scale, opts.label, next.some((r) => r.some((v) => !Number.isFinite(v)))));
      show();
    },
  };
}

/** An HTML table of numbers with coloured cells; `highlight` marks rows (by index) with a class. */
export function numberTable(
  data: Matrix,
  opts: { caption: string; rowLabels: string[]; colLabels?: string[]; scale: Scale; highlight?: number[]; digits?: number },
): HTMLTableElement {
  const cols = data[0]?.length ?? 0;
  const colLabels = opts.colLabels ?? Array.from({ length: cols }, (_, j) => String(j));
  const head = el("tr", {}, el("th", { scope: "col", text: "" }), ...colLabels.map((c) => el("th", { scope: "col", text: c })));
  const body = data.map((r, i) =>
    el(
      "tr",
      { class: opts.highlight?.includes(i) ? "hl" : undefined },
      el("th", { scope: "row", text: opts.rowLabels[i] }),
      ...r.map((v) => el("td", { style: `background:${colour(opts.scale, v)};color:${ink(opts.scale, v)}`, "data-value": String(v), text: fmt(v, opts.digits ?? 2) })),
    ),
  );
  return el("table", { class: "numbers" }, el("caption", { text: opts.caption }), el("thead", {}, head), el("tbody", {}, ...body));
}

export function labelled(label: string, control: HTMLElement, hint?: string): HTMLElement {
  const id = control.id || `c-${Math.random().toString(36).slice(2, 8)}`;
  control.id = id;
  return el("div", { class: "control" }, el("label", { for: id, text: label }), control, hint ? el("span", { class: "hint", text: hint }) : null);
}

export function numberInput(id: string, value: number, min: number, max: number, step = 1): HTMLInputElement {
  return el("input", { id, type: "number", value, min, max, step, inputmode: "numeric" }) as HTMLInputElement;
}

/** Clamp an input's value into its range (and to its step), writing the clean value back. */
export function readNumber(input: HTMLInputElement): number {
  const min = Number(input.min);
  const max = Number(input.max);
  const step = Number(input.step) || 1;
  let v = Number(input.value);
  if (!Number.isFinite(v)) v = min;
  v = Math.min(max, Math.max(min, Math.round((v - min) / step) * step + min));
  if (String(v) !== input.value) input.value = String(v);
  return v;
}

export function select(id: string, options: [string, string][], value?: string): HTMLSelectElement {
  const s = el("select", { id }, ...options.map(([v, text]) => el("option", { value: v, text }))) as HTMLSelectElement;
  if (value !== undefined) s.value = value;
  return s;
}

export function codeBlock(excerpt: { file: string; line: number; code: string }): HTMLElement {
  return el(
    "figure",
    { class: "code" },
    el("figcaption", {}, el("code", { text: excerpt.file }), ` line ${excerpt.line} (cut from the source when this site was built)`),
    el("pre", { tabindex: 0, "aria-label": `${excerpt.file}, from line ${excerpt.line}` }, el("code", { text: excerpt.code })),
  );
}
