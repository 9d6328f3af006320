/**
 * The Models page's token-labelled views of a `[H, T, T]` map (attention probabilities, or layer 0's position
 * bias): a table whose rows and columns are the tokens themselves, showing a window of at most WINDOW of them
 * with an overview of the whole map to move it (click or drag), and for a short text lines between the tokens
 * weighted by the probability. Future cells (key after query) are masked by the model: they are drawn hatched,
 * with their own key entry, never in the colour of a real 0.
 */
import { headWindow, range } from "../lm";
import { MASKED_RGB, PROBABILITY, colour, colourRGB, divergingFor, sig, type Scale } from "../scale";
import { el, legend, numberSlider, svg } from "../ui";
import { explainAttention, explainBias } from "./models-flow";

/** The most tokens a window shows along each axis (a readable label per row and column). */
export const WINDOW = 24;

export interface MapInput {
  data: Float32Array; // [H, T, T]
  T: number;
  head: number;
  labels: string[]; // one per token, as shown
  kind: "probability" | "bias";
  caption: string;
}

/** The scale of a map: probabilities on the site's one [0, 1] scale; a bias diverging around 0 (real cells only). */
function scaleOf(input: MapInput): Scale {
  if (input.kind === "probability") return PROBABILITY;
  const { data, T, head } = input;
  const real: number[] = [];
  for (let q = 0; q < T; q++) for (let k = 0; k <= q; k++) real.push(data[(head * T + q) * T + k]);
  return divergingFor(real);
}

const short = (label: string) => (label.length > 10 ? `${label.slice(0, 9)}…` : label);

/** A cell's words for the explanation line: a probability or a bias, or masked (null). */
function cellWords(input: MapInput, q: number, k: number, value: number | null): string {
  const { labels, head } = input;
  return input.kind === "probability" ? explainAttention(q, labels[q], k, labels[k], value) : explainBias(q, labels[q], k, labels[k], value, head);
}

/**
 * The table of one window: token labels on both axes, a cell per (query, key), masked cells hatched. For the
 * linked views, a query's row is `tr[data-token=q]`, a key's header `th[data-token=k]` and its cells `data-key=k`.
 */
function windowTable(input: MapInput, scale: Scale, qs: number[], ks: number[]): HTMLTableElement {
  const cells = headWindow(input.data, input.T, input.head, qs, ks);
  const head = el(
    "tr",
    {},
    el("th", { scope: "col", class: "corner", text: "query ↓ key →" }),
    ...ks.map((k) => el("th", { scope: "col", class: "key", "data-position": String(k), "data-token": k, title: `key ${k}: ${input.labels[k]}` }, el("span", { text: `${k} ${short(input.labels[k])}` }))),
  );
  const rows = qs.map((q, i) =>
    el(
      "tr",
      { "data-token": q },
      el("th", { scope: "row", "data-position": String(q), title: `query ${q}: ${input.labels[q]}`, text: `${q} ${short(input.labels[q])}` }),
      ...cells[i].map((c, j) => {
        const words = `query ${q} (${input.labels[q]}), key ${ks[j]} (${input.labels[ks[j]]}): `;
        const linked = { "data-query": q, "data-key": ks[j], "data-explain": cellWords(input, q, ks[j], c.masked ? null : c.value) };
        if (c.masked) return el("td", { class: "masked", "data-masked": "true", title: `${words}masked (the future)`, ...linked });
        return el("td", { "data-value": String(c.value), style: `background:${colour(scale, c.value)}`, title: words + sig(c.value, 3), ...linked });
      }),
    ),
  );
  return el("table", { class: "attn-map" }, el("caption", { text: input.caption }), el("thead", {}, head), el("tbody", {}, ...rows));
}

/**
 * One window of a map with its key, no controls: the flow's maps, which show the same tokens as its tables
 * (queries `qs`, keys `ks`).
 */
export function windowMap(id: string, input: MapInput, qs: number[], ks: number[], label: string): HTMLElement {
  const scale = scaleOf(input);
  return el("div", { class: "token-map compact", id, "data-scale": `${scale.kind} ${scale.min} ${scale.max}` }, el("div", { class: "scroll" }, windowTable(input, scale, qs, ks)), key(scale, label));
}

/**
 * The flow's attention lines, drawn as poloclub's Transformer Explainer draws them: the window's tokens as keys
 * (left) and as queries (right), and from each query a line to every key at or before it (the model sees no later
 * one), its width and opacity growing linearly with the weight (a hairline at 0, so that every key the query sees
 * has a line). Every query's lines are drawn once, marked with its token: the linker lights the current token's,
 * and the stylesheet shows lit lines only, so that none is drawn while no token is pointed at or pinned.
 */
export function attentionLines(id: string, input: MapInput, rows: number[]): HTMLElement {
  const { T, data, head, labels } = input;
  const [W, pad, step] = [340, 118, 20];
  const at = new Map(rows.map((r, i) => [r, 14 + i * step]));
  const ink = colour(PROBABILITY, 1); // the dark end of the map's own scale: a heavy line is a dark cell
  const kids: SVGElement[] = [];
  for (const q of rows)
    for (const k of rows.filter((r) => r <= q)) {
      const p = data[(head * T + q) * T + k];
      const [y0, y1, mid] = [at.get(k)!, at.get(q)!, W / 2];
      const d = `M${pad} ${y0} C${mid} ${y0} ${mid} ${y1} ${W - pad} ${y1}`;
      kids.push(svg("path", { class: "attn-line", d, fill: "none", stroke: ink, "stroke-width": (0.5 + 5.5 * p).toFixed(2), "stroke-opacity": (0.2 + 0.8 * p).toFixed(3), "data-token": q, "data-to": k, "data-value": p, "data-explain": explainAttention(q, labels[q], k, labels[k], p) }));
    }
  const text = (x: number, k: number, s: string, anchor: string, cls: string) => {
    const t = svg("text", { x, y: at.get(k)! + 4, "text-anchor": anchor, "font-size": 12, class: cls, "data-token": k, "font-family": "ui-monospace, monospace" });
    t.textContent = s;
    return t;
  };
  for (const k of rows) kids.push(text(pad - 6, k, `${short(labels[k])} ${k}`, "end", "key-label"), text(W - pad + 6, k, `${k} ${short(labels[k])}`, "start", "query-label"));
  const height = 14 + (rows.length - 1) * step + 10;
  const drawing = svg("svg", { class: "flow-lines", id, viewBox: `0 0 ${W} ${height}`, width: W, height, role: "img", "aria-label": "Lines from the token pointed at (a query, right) to each key it sees (left), as thick and as dark as its attention weight; the map above has the numbers" }, ...kids);
  return el("figure", { class: "flow-lines-figure" }, drawing, el("figcaption", { class: "hint", text: "Point at a token (or tap it): lines from it, as a query on the right, to every key it sees on the left, as heavy as the weight it gives each." }));
}

/** The whole map, one pixel per cell, on a canvas the page scales: where the window sits in it. */
function overview(input: MapInput, scale: Scale): HTMLCanvasElement {
  const { T, data, head } = input;
  const canvas = el("canvas", { class: "attn-overview", width: T, height: T, "aria-hidden": "true" }) as HTMLCanvasElement;
  const ctx = canvas.getContext("2d");
  if (!ctx) return canvas;
  const img = ctx.createImageData(T, T);
  for (let q = 0; q < T; q++)
    for (let k = 0; k < T; k++) {
      const [R, G, B] = k > q ? MASKED_RGB : colourRGB(scale, data[(head * T + q) * T + k]);
      img.data.set([R, G, B, 255], (q * T + k) * 4);
    }
  ctx.putImageData(img, 0, 0);
  return canvas;
}

/** The key: the colour bar, and the hatched swatch that means "masked". */
function key(scale: Scale, label: string): HTMLElement {
  return el("div", { class: "attn-key" }, legend(scale, label), el("span", { class: "legend-masked" }, el("span", { class: "swatch masked" }), "masked: a future token, which the model cannot see (not a 0)"));
}

/**
 * Lines from each key token (left) to each query token (right), as thick and as dark as the probability: the
 * short-text view. Every query's lines start out drawn; choosing a query shows its lines alone.
 */
function lines(input: MapInput, query: number | null): SVGElement {
  const { T, data, head, labels } = input;
  const row = 18;
  const W = 300;
  const pad = 110;
  const y = (i: number) => 12 + i * row;
  const kids: SVGElement[] = [];
  for (let q = 0; q < T; q++) {
    if (query !== null && q !== query) continue;
    for (let k = 0; k <= q; k++) {
      const p = data[(head * T + q) * T + k];
      if (p < 0.01) continue;
      kids.push(svg("line", { class: "arc", "data-token": q, "data-query": q, "data-key": k, "data-value": p, x1: pad, y1: y(k), x2: W - pad, y2: y(q), stroke: "#1f5fa8", "stroke-opacity": Math.min(1, p), "stroke-width": 0.5 + 4 * p }));
    }
  }
  const text = (x: number, i: number, s: string, anchor: string, cls: string) => {
    const t = svg("text", { x, y: y(i) + 4, "text-anchor": anchor, "font-size": 12, class: cls, "data-token": i, "font-family": "ui-monospace, monospace" });
    t.textContent = s;
    return t;
  };
  for (let i = 0; i < T; i++) kids.push(text(pad - 6, i, `${short(labels[i])} ${i}`, "end", "key-label"), text(W - pad + 6, i, `${i} ${short(labels[i])}`, "start", "query-label"));
  const words = query === null ? "every query" : `query ${query}`;
  return svg("svg", { class: "attn-lines", viewBox: `0 0 ${W} ${y(T - 1) + 12}`, width: W, height: y(T - 1) + 12, role: "img", "aria-label": `Lines from the keys (left) to ${words} (right), as thick as the attention probability; the table below has the numbers` }, ...kids);
}

/**
 * A token-labelled map with its window controls; `update` draws new numbers (another text, layer or head) and
 * keeps the window where it was when it still fits. The overview (long text) or the lines (short text) are drawn
 * once per update; moving the window redraws the table and the box on the overview only.
 */
export function tokenMap(id: string, label: string, onDraw: (root: HTMLElement) => void = () => undefined): { root: HTMLElement; update(input: MapInput): void } {
  const root = el("div", { class: "token-map", id });
  const qFrom = numberSlider(`${id}-q`, "Queries from position", 0, 0, 0, () => drawWindow());
  const kFrom = numberSlider(`${id}-k`, "Keys from position", 0, 0, 0, () => drawWindow());
  const only = el("select", { id: `${id}-only` }) as HTMLSelectElement;
  const linesSlot = el("div", { class: "scroll" });
  only.addEventListener("change", () => {
    if (!input) return;
    linesSlot.replaceChildren(lines(input, only.value === "" ? null : Number(only.value)));
    onDraw(root);
  });
  const frame = el("div", { class: "attn-window" });
  const tableSlot = el("div", { class: "scroll" });
  const keySlot = el("div");
  let input: MapInput | null = null;
  let scale: Scale = { kind: "sequential", min: 0, max: 1 };

  function drawWindow(): void {
    if (!input) return;
    const { T } = input;
    const w = Math.min(WINDOW, T);
    const q0 = Math.max(0, Math.min(Number(qFrom.input.value) || 0, T - w));
    const k0 = Math.max(0, Math.min(Number(kFrom.input.value) || 0, T - w));
    const table = windowTable(input, scale, range(q0, q0 + w), range(k0, k0 + w));
    tableSlot.replaceChildren(table);
    frame.style.cssText = `left:${(k0 / T) * 100}%;top:${(q0 / T) * 100}%;width:${(w / T) * 100}%;height:${(w / T) * 100}%`;
    root.dataset.window = `${q0} ${k0} ${w}`;
    onDraw(root); // the linked views index the new cells
  }

  function overviewBox(current: MapInput): HTMLElement {
    const canvas = overview(current, scale);
    const box = el("div", { class: "attn-overview-box", title: "The whole map: click or drag to move the window" }, canvas, frame);
    const move = (e: PointerEvent) => {
      const r = canvas.getBoundingClientRect();
      const w = Math.min(WINDOW, current.T);
      const at = (v: number, size: number) => Math.max(0, Math.min(current.T - w, Math.round((v / size) * current.T - w / 2)));
      qFrom.input.value = qFrom.slider.value = String(at(e.clientY - r.top, r.height));
      kFrom.input.value = kFrom.slider.value = String(at(e.clientX - r.left, r.width));
      drawWindow();
    };
    box.addEventListener("pointerdown", (e) => {
      move(e);
      const drag = (m: PointerEvent) => move(m);
      window.addEventListener("pointermove", drag);
      window.addEventListener("pointerup", () => window.removeEventListener("pointermove", drag), { once: true });
    });
    return el("figure", { class: "attn-overview-figure" }, box, el("figcaption", { text: `The whole map, ${current.T} × ${current.T} tokens, masked cells grey; the box is the window in the table below. Click or drag to move it, or set the positions above.` }));
  }

  function linesBox(current: MapInput): HTMLElement {
    only.replaceChildren(el("option", { value: "", text: "every query" }), ...range(0, current.T).map((q) => el("option", { value: String(q), text: `${q} ${current.labels[q]}` })));
    linesSlot.replaceChildren(lines(current, null));
    return el("div", { class: "attn-lines-box" }, el("div", { class: "control" }, el("label", { for: only.id, text: "Lines for" }), only), linesSlot);
  }

  return {
    root,
    update(next) {
      input = next;
      scale = scaleOf(next);
      const top = String(Math.max(0, next.T - Math.min(WINDOW, next.T)));
      for (const s of [qFrom, kFrom]) {
        s.input.max = s.slider.max = top;
        if (Number(s.input.value) > Number(top)) s.input.value = s.slider.value = top;
      }
      const parts: HTMLElement[] = [];
      if (next.T > WINDOW) parts.push(el("div", { class: "controls" }, qFrom.control, kFrom.control), overviewBox(next));
      else if (next.kind === "probability") parts.push(linesBox(next));
      keySlot.replaceChildren(key(scale, label));
      root.replaceChildren(...parts, tableSlot, keySlot);
      root.dataset.scale = `${scale.kind} ${scale.min} ${scale.max}`;
      drawWindow();
    },
  };
}
