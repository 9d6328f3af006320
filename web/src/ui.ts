/** Small DOM helpers shared by every page: elements, legends, number tables, live inputs, code excerpts. */
import type { Matrix } from "./math";
import { colour, ink, type Scale } from "./scale";

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
  // trailing zeros after a decimal point only: 1000 stays 1000, 1.500 becomes 1.5, 2.000e-4 becomes 2e-4
  return s.replace(/(\.\d*?)0+(e|$)/, "$1$2").replace(/\.(e|$)/, "$1").replace("-", "−");
}

export { MASKED, colour, colourRGB, divergingFor, ink, scaleFor } from "./scale";
export type { Scale } from "./scale";

/**
 * A colour bar with numbered ticks (and a grey swatch when some entries are masked). The bar is inset by
 * `PAD` on each side so that the end labels, centred on the bar's ends, stay inside the drawing.
 */
export function legend(scale: Scale, label: string, masked = false): HTMLElement {
  const id = `grad-${Math.random().toString(36).slice(2, 8)}`;
  const ticks = scale.kind === "diverging" ? [scale.min, scale.min / 2, 0, scale.max / 2, scale.max] : [0, 0.25, 0.5, 0.75, 1].map((u) => scale.min + u * (scale.max - scale.min));
  // a stop every 5 %: the scales' own stops (at quarters) are among them, so the bar is the scale exactly
  const stops = Array.from({ length: 21 }, (_, i) => {
    const v = scale.min + (i / 20) * (scale.max - scale.min);
    return svg("stop", { offset: `${i * 5}%`, "stop-color": colour(scale, v) });
  });
  const width = 220;
  const PAD = 30;
  const bar = svg(
    "svg",
    { viewBox: `0 0 ${width + 2 * PAD} 34`, width: width + 2 * PAD, height: 34, "aria-hidden": "true", class: "legend-bar" },
    svg("defs", {}, svg("linearGradient", { id }, ...stops)),
    svg("rect", { x: PAD, y: 2, width, height: 12, fill: `url(#${id})`, stroke: "#888" }),
    ...ticks.map((t, i) => {
      const x = PAD + (i / (ticks.length - 1)) * width;
      const text = svg("text", { x, y: 30, "text-anchor": "middle", "font-size": 12 });
      text.textContent = fmt(t, 3);
      return svg("g", {}, svg("line", { x1: x, x2: x, y1: 14, y2: 18, stroke: "#444" }), text);
    }),
  );
  const words = `${label}: colour scale from ${fmt(scale.min, 3)} to ${fmt(scale.max, 3)}${scale.kind === "diverging" ? ", white at 0, blue negative, orange positive" : ", white low, purple high"}`;
  return el(
    "div",
    { class: "legend", role: "img", "aria-label": words, "data-kind": scale.kind, "data-min": String(scale.min), "data-max": String(scale.max) },
    el("span", { class: "legend-label", text: label }),
    bar,
    masked ? el("span", { class: "legend-masked" }, el("span", { class: "swatch", style: `background:#6b6b6b` }), "masked (−∞)") : null,
  );
}

/**
 * An HTML table of numbers with coloured cells; `highlight` marks rows (by index) with a class. `format` writes a
 * cell's text (the Models page's tables: sig), else fmt to `digits`.
 */
export function numberTable(
  data: Matrix,
  opts: { caption: string; rowLabels: string[]; colLabels?: string[]; scale: Scale; highlight?: number[]; digits?: number; format?: (v: number) => string; corner?: string },
): HTMLTableElement {
  const cols = data[0]?.length ?? 0;
  const colLabels = opts.colLabels ?? Array.from({ length: cols }, (_, j) => String(j));
  // the corner names what the row and column headers are, so that no header cell is empty
  const head = el("tr", {}, el("th", { scope: "col", class: "corner", text: opts.corner ?? "row \\ column" }), ...colLabels.map((c) => el("th", { scope: "col", text: c })));
  const body = data.map((r, i) =>
    el(
      "tr",
      { class: opts.highlight?.includes(i) ? "hl" : undefined },
      el("th", { scope: "row", text: opts.rowLabels[i] }),
      ...r.map((v) => el("td", { style: `background:${colour(opts.scale, v)};color:${ink(opts.scale, v)}`, "data-value": String(v), text: opts.format ? opts.format(v) : fmt(v, opts.digits ?? 2) })),
    ),
  );
  return el("table", { class: "numbers" }, el("caption", { text: opts.caption }), el("thead", {}, head), el("tbody", {}, ...body));
}

export function labelled(label: string, control: HTMLElement, hint?: string): HTMLElement {
  const id = control.id || `c-${Math.random().toString(36).slice(2, 8)}`;
  control.id = id;
  return el("div", { class: "control" }, el("label", { for: id, id: `${id}-label`, text: label }), control, hint ? el("span", { class: "hint", text: hint }) : null);
}

export function numberInput(id: string, value: number, min: number, max: number, step = 1): HTMLInputElement {
  return el("input", { id, type: "number", value, min, max, step, inputmode: "numeric" }) as HTMLInputElement;
}

/**
 * Clamp an input's value into its range (and to its step). The clean value is written back only when the input
 * is not being edited: rewriting a half-typed "1" (on the way to "128") to the minimum would fight the typing.
 */
export function readNumber(input: HTMLInputElement): number {
  const min = Number(input.min);
  const max = Number(input.max);
  const step = Number(input.step) || 1;
  let v = Number(input.value);
  if (input.value.trim() === "" || !Number.isFinite(v)) v = min;
  v = Math.min(max, Math.max(min, Math.round((v - min) / step) * step + min));
  if (String(v) !== input.value && document.activeElement !== input) input.value = String(v);
  return v;
}

/** Write the clamped value back (on `change`: Enter, blur, or a spinner click). */
export function commitNumber(input: HTMLInputElement): number {
  const v = readNumber(input);
  if (String(v) !== input.value) input.value = String(v);
  return v;
}

/**
 * Re-render as the user types (`input`) as well as on commit (`change`). While typing, only a complete value in
 * range re-renders, so "12" on the way to "128" does not flash the minimum.
 */
export function live(render: () => void, ...inputs: HTMLElement[]): void {
  for (const input of inputs) {
    if (input instanceof HTMLInputElement && input.type === "number") {
      input.addEventListener("input", () => {
        if (input.value.trim() !== "" && input.validity.valid) render();
      });
      input.addEventListener("change", () => {
        commitNumber(input);
        render();
      });
    } else {
      input.addEventListener("input", render);
      input.addEventListener("change", render);
    }
  }
}

/**
 * A number box with a slider beside it, kept in step; `render` runs while the slider is dragged and while a
 * number is typed. The number box keeps `id` (tests and labels use it); the slider is `${id}-slider`.
 */
export function numberSlider(id: string, label: string, value: number, min: number, max: number, render: () => void, opts: { step?: number; hint?: string } = {}): { input: HTMLInputElement; slider: HTMLInputElement; control: HTMLElement } {
  const step = opts.step ?? 1;
  const input = numberInput(id, value, min, max, step);
  const slider = el("input", { id: `${id}-slider`, type: "range", min, max, step, "aria-labelledby": `${id}-label` }) as HTMLInputElement;
  // after min, max and step: a range input snaps a value to the step it has when the value is set (0.5 -> 1)
  slider.value = String(value);
  slider.addEventListener("input", () => {
    input.value = slider.value;
    render();
  });
  input.addEventListener("input", () => {
    if (input.value.trim() !== "" && input.validity.valid) {
      slider.value = input.value;
      render();
    }
  });
  input.addEventListener("change", () => {
    slider.value = String(commitNumber(input));
    render();
  });
  const control = el(
    "div",
    { class: "control" },
    el("label", { for: id, id: `${id}-label`, text: label }),
    el("div", { class: "number-slider" }, input, slider),
    opts.hint ? el("span", { class: "hint", text: opts.hint }) : null,
  );
  return { input, slider, control };
}

export function select(id: string, options: [string, string][], value?: string): HTMLSelectElement {
  const s = el("select", { id }, ...options.map(([v, text]) => el("option", { value: v, text }))) as HTMLSelectElement;
  if (value !== undefined) s.value = value;
  return s;
}

/** Excerpts longer than this many lines are folded: their first line, as a summary, opens the rest. */
const FOLD_LINES = 12;
type CodeLine = [kind: string, text: string][];

/** One highlighted line: a span per token that has a kind (plugins/octlm.ts highlightPython), plain text between. */
const tokens = (line: CodeLine): (Node | string)[] => line.map(([kind, text]) => (kind ? el("span", { class: `tok-${kind}`, text }) : text));

/**
 * A code excerpt with its file and line, highlighted when the site was built (`lines`); lines containing `mark` are
 * marked (it must occur). An excerpt longer than FOLD_LINES is folded into a <details> whose summary is its def or
 * class line, and its marked line stays in view above the fold, so a page of excerpts stays short.
 */
export function codeBlock(excerpt: { file: string; line: number; code: string; lines?: CodeLine[] }, mark?: string): HTMLElement {
  if (mark !== undefined && !excerpt.code.includes(mark)) throw new Error(`${excerpt.file}: the excerpt no longer contains ${JSON.stringify(mark)}`);
  const source = excerpt.code.split("\n");
  const lines = excerpt.lines ?? source.map((l): CodeLine => [["", l]]);
  const marked = (i: number) => mark !== undefined && source[i].includes(mark);
  const code = el("code");
  lines.forEach((line, i) => code.append(...(i ? ["\n"] : []), ...(marked(i) ? [el("mark", {}, ...tokens(line))] : tokens(line))));
  const full = el("pre", { class: "code-full", tabindex: 0, "aria-label": `${excerpt.file}, from line ${excerpt.line}` }, code);
  const figure = el(
    "figure",
    { class: "code", "data-file": excerpt.file, "data-line": String(excerpt.line) },
    el("figcaption", {}, el("code", { text: excerpt.file }), ` line ${excerpt.line} (cut from the source when this site was built)`),
  );
  if (source.length <= FOLD_LINES) {
    figure.append(full);
    return figure;
  }
  const at = source.findIndex((_, i) => marked(i));
  if (at >= 0) figure.append(el("pre", { class: "code-mark", tabindex: 0, "aria-label": `${excerpt.file}, line ${excerpt.line + at}` }, el("code", {}, el("span", { class: "code-lineno", text: `${excerpt.line + at}` }), el("mark", {}, ...tokens(lines[at])))));
  const head = Math.max(0, source.findIndex((l) => /^\s*(async\s+)?(def|class)\b/.test(l)));
  const summary = el("summary", {}, el("code", {}, ...tokens(lines[head])), el("span", { class: "code-more", text: ` … show all ${source.length} lines` }));
  figure.append(el("details", { class: "code-fold" }, summary, full));
  return figure;
}
