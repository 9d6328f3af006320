/**
 * Charts shared by the pages: a heatmap with axis ticks and a colour key, and a line plot whose text is sized in CSS
 * pixels, with a key when it has several series and a readout that follows the pointer.
 */
import type { Matrix } from "./math";
import { COSINE, MASKED_RGB, colourRGB, indexTicks, niceTicks, scaleFor, type Scale } from "./scale";
import { COINCIDE_FRACTION, allXs, legendText, nearestX, seriesStyles, valuesAt, type SeriesStyle } from "./series";
import { el, fmt, legend, svg } from "./ui";

// ----------------------------------------------------------------------------------------------------------
// Heatmap: a canvas (cheap for thousands of cells) plus a cursor that follows the mouse or the arrow keys.

export interface HeatmapOptions {
  label: string; // what the map shows, for the accessible name and the readout
  rowName: string;
  colName: string;
  cellSize?: number; // largest cell side, px
  maxSize?: number; // largest side of the map, px
  minWidth?: number; // smallest width, px: a table 8 columns wide must not become a sliver
  square?: boolean; // square cells (for position × position maps); otherwise rows and columns size apart
  format?: (v: number) => string;
  cosine?: boolean; // the map shows cosine similarities: always drawn on COSINE, whatever `update` is given
}

export interface Heatmap {
  root: HTMLElement;
  update(data: Matrix, scale?: Scale): void; // default scale: COSINE for a cosine map, else fitted to the data
  select(row: number, col: number): void;
}

/** Cell width and height in px for a `rows` × `cols` map. */
export function cellSizes(rows: number, cols: number, opts: Pick<HeatmapOptions, "cellSize" | "maxSize" | "minWidth" | "square">): [number, number] {
  const size = opts.maxSize ?? 480;
  const biggest = opts.cellSize ?? 24;
  const fit = (n: number) => Math.max(1, Math.min(biggest, Math.floor(size / Math.max(n, 1))));
  if (opts.square !== false) {
    const c = Math.min(fit(rows), fit(cols));
    return [c, c];
  }
  const w = Math.max(fit(cols), Math.min(Math.ceil((opts.minWidth ?? 160) / Math.max(cols, 1)), Math.floor(size / Math.max(cols, 1))));
  return [w, fit(rows)];
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
  }, canvas, cursor);
  const xTicks = el("div", { class: "heatmap-xticks", "aria-hidden": "true" });
  const yTicks = el("div", { class: "heatmap-yticks", "aria-hidden": "true" });
  const grid = el("div", { class: "heatmap-grid" }, el("span", { class: "heatmap-corner", "aria-hidden": "true" }), xTicks, yTicks, frame);
  const readout = el("output", { class: "readout", "aria-live": "polite" });
  const legendSlot = el("div", { class: "legend-slot" });
  const axes = el("p", { class: "axes", text: `rows: ${opts.rowName} (down) · columns: ${opts.colName} (across)` });
  const root = el("figure", { class: "heatmap", "data-quantity": opts.cosine ? "cosine similarity" : undefined }, el("figcaption", { text: opts.label }), axes, grid, readout, legendSlot);
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

  // Tick labels sit at cell centres, placed in percent of the map so they follow it when a phone shrinks it.
  const ticks = (box: HTMLElement, n: number, axis: "x" | "y") =>
    box.replaceChildren(
      ...indexTicks(n).map((t) => {
        const at = `${((t + 0.5) / n) * 100}%`;
        return el("span", { class: "tick", "data-index": String(t), style: axis === "x" ? `left:${at}` : `top:${at}`, text: String(t) });
      }),
    );

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
    update(next, given) {
      data = next;
      const scale = opts.cosine ? COSINE : (given ?? scaleFor(next.flat()));
      // the scale and its domain, stated for the tests (which also read the cells' colours, so this cannot lie)
      root.dataset.scale = scale.kind;
      root.dataset.domain = `${scale.min} ${scale.max}`;
      const rows = next.length;
      const cols = next[0]?.length ?? 0;
      canvas.width = Math.max(cols, 1);
      canvas.height = Math.max(rows, 1);
      const ctx = canvas.getContext("2d");
      if (ctx && rows && cols) {
        const img = ctx.createImageData(cols, rows);
        next.forEach((r, i) =>
          r.forEach((v, j) => {
            const [R, G, B] = Number.isFinite(v) ? colourRGB(scale, v) : MASKED_RGB;
            img.data.set([R, G, B, 255], (i * cols + j) * 4);
          }),
        );
        ctx.putImageData(img, 0, 0);
      }
      const [cw, ch] = cellSizes(rows, cols, opts);
      canvas.style.width = `${cw * cols}px`;
      canvas.style.aspectRatio = `${cw * cols} / ${ch * rows}`;
      ticks(xTicks, cols, "x");
      ticks(yTicks, rows, "y");
      legendSlot.replaceChildren(legend(scale, opts.label, next.some((r) => r.some((v) => !Number.isFinite(v)))));
      show();
    },
  };
}

// ----------------------------------------------------------------------------------------------------------
// Line plot. The SVG is drawn at the width its box has on screen (and redrawn when that changes), so 12 units of
// font are 12 CSS pixels on a phone as on a desktop, instead of a fixed drawing scaled down to 6 px.

export interface Series {
  name: string;
  colour: string;
  points: [number, number][];
  dash?: string;
  id?: string;
  /** a marker's SVG path centred on (x, y), `size` px wide: drawn on the key's sample when given */
  glyph?: (x: number, y: number, size: number) => string;
  /** drawn but not shown (display none), and left out of the hover readout; its key entry stays */
  hidden?: boolean;
}

export interface PlotOptions {
  id: string;
  label: string; // accessible name; the same numbers must also be on the page in words or a table
  xLabel: string;
  yLabel: string;
  series: Series[];
  height?: number;
  maxWidth?: number;
  xLog2?: boolean;
  xTicks?: number[]; // default: round values
  yRange?: [number, number]; // default: fitted to the data, widened to round ticks
  marker?: { x: number; label: string }; // a dashed vertical line
  extra?: (ctx: PlotContext) => SVGElement[];
  /** given: each key entry is a checkbox that shows or hides its series, and this is called on each change */
  onToggle?: (name: string, shown: boolean) => void;
  /** numbers in the hover readout and the key (default: fmt to 4 digits, 2 for the key's gaps) */
  format?: (v: number, digits: number) => string;
  /** tick labels; the y one is given the ticks' step (default: fmt to 4 digits) */
  xFormat?: (v: number) => string;
  yFormat?: (v: number, step: number) => string;
}

export interface PlotContext {
  X: (v: number) => number;
  Y: (v: number) => number;
  top: number;
  bottom: number;
  left: number;
  right: number;
  styles: SeriesStyle[]; // how each series (same order as `series`) is drawn: see seriesStyles
}

export const FONT = 12;

function text(x: number, y: number, s: string, anchor = "middle", extra: Record<string, string | number> = {}): SVGElement {
  const t = svg("text", { x, y, "text-anchor": anchor, "font-size": FONT, ...extra });
  t.textContent = s;
  return t;
}

/** A short line in a series' colour, width and dash (and its marker, if it has one): the sample beside its name in the key. */
function sampleLine(colour: string, style: SeriesStyle, glyph?: Series["glyph"]): SVGElement {
  const w = glyph ? 36 : 30;
  return svg(
    "svg",
    { class: "key-sample", width: w, height: 12, viewBox: `0 0 ${w} 12`, "aria-hidden": "true" },
    svg("line", { x1: 1, x2: w - 1, y1: 6, y2: 6, stroke: colour, "stroke-width": Math.min(style.width, 10), "stroke-dasharray": style.dash }),
    glyph ? svg("path", { d: glyph(w / 2, 6, 8), fill: colour, stroke: "#fff", "stroke-width": 1, class: "key-glyph" }) : null,
  );
}

/** The key of a chart with several series: one entry per series, its line sample and its name, in a list that wraps. */
export function seriesKey(o: PlotOptions, styles: SeriesStyle[]): HTMLElement {
  const words = (s: Series, i: number) => el("span", { text: legendText(s.name, styles[i], (v) => (o.format ?? fmt)(v, 2)) });
  return el(
    "ul",
    { class: o.onToggle ? "series-key toggles" : "series-key", "data-chart": o.id, "aria-label": o.onToggle ? `Key to ${o.series.length} series; tick a series to show it` : `Key to ${o.series.length} series` },
    ...o.series.map((s, i) => {
      if (!o.onToggle) return el("li", { "data-series": s.name, "data-same-as": styles[i].sameAs }, sampleLine(s.colour, styles[i], s.glyph), words(s, i));
      const box = el("input", { type: "checkbox", class: "key-toggle", "data-series": s.name });
      // a hidden series' sample is faded (its words keep their contrast; the unticked box says it is hidden)
      const sample = sampleLine(s.colour, styles[i], s.glyph);
      if (s.hidden) sample.setAttribute("opacity", "0.3");
      box.checked = !s.hidden;
      box.addEventListener("change", () => o.onToggle!(s.name, box.checked));
      return el(
        "li",
        { "data-series": s.name, "data-same-as": styles[i].sameAs, "data-shown": String(!s.hidden) },
        el("label", {}, box, sample, words(s, i)),
      );
    }),
  );
}

/**
 * Follow the pointer over the plot: a guide at the nearest x with a dot on each series there, and a line of
 * text with that x and every series' value at it. Mouse and pen only: the same numbers are on the page in a table
 * or in words for everyone else.
 */
function hover(chart: SVGSVGElement, out: HTMLElement, o: PlotOptions, box: PlotContext): void {
  const { X, Y } = box;
  const shown = o.series.filter((s) => !s.hidden);
  const xs = allXs(shown);
  const num = (v: number) => (o.format ?? fmt)(v, 4);
  const guide = svg("line", { class: "hover-guide", y1: box.top, y2: box.bottom, stroke: "#444", "stroke-width": 1, visibility: "hidden", "pointer-events": "none" });
  const dots = svg("g", { class: "hover-dots", "pointer-events": "none" });
  chart.append(guide, dots);
  const xName = o.xLabel.replace(/\s*\(.*\)$/, "");
  const clear = () => {
    guide.setAttribute("visibility", "hidden");
    dots.replaceChildren();
    out.textContent = "";
    delete out.dataset.x;
  };
  chart.addEventListener("pointerleave", clear);
  chart.addEventListener("pointermove", (e) => {
    const rect = chart.getBoundingClientRect();
    const px = ((e.clientX - rect.left) / (rect.width || 1)) * chart.viewBox.baseVal.width;
    const x = px < box.left - 8 || px > box.right + 8 ? undefined : nearestX(xs, px, X);
    if (x === undefined) return clear();
    const values = valuesAt(shown, x);
    guide.setAttribute("x1", String(X(x)));
    guide.setAttribute("x2", String(X(x)));
    guide.setAttribute("visibility", "visible");
    dots.replaceChildren(...values.flatMap((v, i) => (v.value === null ? [] : [svg("circle", { cx: X(x), cy: Y(v.value), r: 4, fill: shown[i].colour, stroke: "#fff", "stroke-width": 1.5 })])));
    out.textContent = `${xName} = ${(o.xFormat ?? num)(x)}: ` + values.map((v) => `${v.name} ${v.value === null ? "no value" : num(v.value)}`).join(" · ");
    out.dataset.x = String(x);
  });
}

/**
 * The chart at `width` px: the SVG, then (with two series or more) its key below it, then the line the hover
 * readout writes. The key is HTML, so it wraps on a phone and always sits under the plot, never on it.
 */
export function drawPlot(o: PlotOptions, width: number): HTMLElement {
  const W = Math.max(240, Math.round(width));
  const H = o.height ?? 260;
  const [L, R, T, B] = [52, 14, 14, 42];
  const pts = o.series.flatMap((s) => s.points);
  const fx = (v: number) => (o.xLog2 ? Math.log2(v) : v);
  const xs = [...pts.map((p) => p[0]), ...(o.xTicks ?? []), ...(o.marker ? [o.marker.x] : [])];
  const [x0, x1] = [Math.min(...xs.map(fx)), Math.max(...xs.map(fx))];
  const ys = pts.map((p) => p[1]).filter(Number.isFinite);
  const yt = o.yRange ? niceTicks(o.yRange[0], o.yRange[1], 5) : niceTicks(Math.min(...ys), Math.max(...ys), 5);
  const X = (v: number) => L + ((fx(v) - x0) / (x1 - x0 || 1)) * (W - L - R);
  const Y = (v: number) => T + (1 - (v - yt.lo) / (yt.hi - yt.lo || 1)) * (H - T - B);
  const xTicks = o.xTicks ?? niceTicks(x0, x1, Math.max(2, Math.floor((W - L - R) / 70))).ticks.filter((v) => v >= x0 - 1e-9 && v <= x1 + 1e-9);
  const styles = seriesStyles(o.series, COINCIDE_FRACTION * (yt.hi - yt.lo));
  const kids: SVGElement[] = [];
  yt.ticks.forEach((v) => {
    kids.push(svg("line", { x1: L, x2: W - R, y1: Y(v), y2: Y(v), stroke: "#e4e4de" }), text(L - 6, Y(v) + 4, o.yFormat ? o.yFormat(v, yt.ticks[1] - yt.ticks[0] || 1) : fmt(v, 4), "end", { class: "ytick" }));
  });
  xTicks.forEach((v) => kids.push(svg("line", { x1: X(v), x2: X(v), y1: H - B, y2: H - B + 4, stroke: "#444" }), text(X(v), H - B + 17, (o.xFormat ?? ((u: number) => fmt(u, 4)))(v), "middle", { class: "xtick" })));
  kids.push(svg("line", { x1: L, x2: W - R, y1: H - B, y2: H - B, stroke: "#444" }), svg("line", { x1: L, x2: L, y1: T, y2: H - B, stroke: "#444" }));
  kids.push(text((L + W - R) / 2, H - 6, o.xLabel));
  kids.push(text(14, (T + H - B) / 2, o.yLabel, "middle", { transform: `rotate(-90 14 ${(T + H - B) / 2})` }));
  if (o.marker) {
    const mx = X(o.marker.x);
    kids.push(svg("line", { x1: mx, x2: mx, y1: T, y2: H - B, stroke: "#444", "stroke-dasharray": "4 4", class: "marker" }));
    const right = mx + 4 + o.marker.label.length * FONT * 0.55 < W - R;
    kids.push(text(right ? mx + 4 : mx - 4, T + 12, o.marker.label, right ? "start" : "end"));
  }
  const ctx: PlotContext = { X, Y, top: T, bottom: H - B, left: L, right: W - R, styles };
  o.series.forEach((s, i) => {
    const good = s.points.filter((p) => Number.isFinite(p[1]));
    if (good.length > 1)
      kids.push(svg("polyline", { class: "series", "data-series": s.name, points: good.map((p) => `${X(p[0]).toFixed(2)},${Y(p[1]).toFixed(2)}`).join(" "), fill: "none", stroke: s.colour, "stroke-width": styles[i].width, "stroke-dasharray": styles[i].dash || undefined, display: s.hidden ? "none" : undefined }));
  });
  if (o.extra) kids.push(...o.extra(ctx));
  const chart = svg("svg", { viewBox: `0 0 ${W} ${H}`, width: W, height: H, role: "img", "aria-label": o.label, class: "chart", id: o.id }, ...kids) as SVGSVGElement;
  const out = el("p", { class: "plot-readout", "data-chart": o.id });
  hover(chart, out, o, ctx);
  return el("div", { class: "plot" }, chart, o.series.length > 1 ? seriesKey(o, styles) : null, out);
}

/** A box that holds `draw(width)` and redraws it whenever its own width changes. */
export function responsive(draw: (width: number) => Element, maxWidth = 640): HTMLElement {
  const box = el("div", { class: "chart-box" });
  let last = -1;
  const paint = () => {
    const w = Math.min(maxWidth, box.clientWidth || maxWidth);
    if (w === last) return;
    last = w;
    box.replaceChildren(draw(w));
  };
  paint();
  new ResizeObserver(paint).observe(box);
  return Object.assign(box, { repaint: () => ((last = -1), paint()) });
}

/** A line plot in a responsive box; `update` swaps its options and redraws. */
export function linePlot(o: PlotOptions): { root: HTMLElement; update(next: PlotOptions): void } {
  let opts = o;
  const box = responsive((w) => drawPlot(opts, w), o.maxWidth ?? 640) as HTMLElement & { repaint(): void };
  return {
    root: box,
    update(next) {
      opts = next;
      box.repaint();
    },
  };
}

/** Mean of `m` `[N, N]` along each diagonal d = 0 … N − 1 (pairs t and t + d): similarity against offset. */
export function diagonalMeans(m: Matrix): number[] {
  const n = m.length;
  return Array.from({ length: n }, (_, d) => {
    let s = 0;
    for (let t = 0; t + d < n; t++) s += m[t][t + d];
    return s / (n - d);
  });
}
