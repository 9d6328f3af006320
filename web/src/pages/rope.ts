import "../site";
import applyCode from "octlm:positions/formulas.py#apply_rope";
import freqCode from "octlm:positions/formulas.py#rope_frequencies";
import { linePlot, type PlotOptions } from "../charts";
import { dot, randomMatrix, ropeFrequencies, ropePair, ropeRotate, type RopeLayout } from "../math";
import { sig } from "../scale";
import { $, codeBlock, el, fmt, labelled, live, numberInput, numberSlider, readNumber, select, svg } from "../ui";

const dim = select("rope-dim", [["8", "8"], ["16", "16"], ["32", "32"], ["64", "64"]], "16");
const layout = select("rope-layout", [["half", "half (Llama, HF)"], ["interleaved", "interleaved (paper)"]], "half");
const base = numberInput("rope-base", 10000, 10, 1000000, 10);
const pair = select("rope-pair", [], "0");
const m = numberSlider("rope-m", "Query position m", 5, 0, 256, () => render());
const n = numberSlider("rope-n", "Key position n", 2, 0, 256, () => render());
const minus = el("button", { type: "button", id: "rope-shift-down", text: "Shift both −1" });
const plus = el("button", { type: "button", id: "rope-shift-up", text: "Shift both +1" });
$("#rope-controls").append(
  labelled("Head size D", dim),
  labelled("Pair layout", layout),
  labelled("Base b", base),
  labelled("Channel pair i", pair),
  m.control,
  n.control,
  el("div", { class: "control", role: "group", "aria-label": "Shift both positions" }, plus, minus),
);
$("#code-freq").append(codeBlock(freqCode));
$("#code-apply").append(codeBlock(applyCode));

// The query and key before rotation: random per head size, then moved by dragging their arrows.
let vectors = { d: 0, q: [] as number[], k: [] as number[] };

function fillPairs(d: number): void {
  const keep = Math.min(Number(pair.value) || 0, d / 2 - 1);
  pair.replaceChildren(...Array.from({ length: d / 2 }, (_, i) => el("option", { value: String(i), text: String(i) })));
  pair.value = String(keep);
}

const R = 90;
const C0 = 110;
const deg = (a: number) => ((((a * 180) / Math.PI) % 360) + 360) % 360;

type Point = [number, number];
// two labels closer than this (13 px bold letters) would touch
const LABEL_GAP = 18;

/**
 * Where q's and k's labels go: 14 px past the tip of each arrow (arrow ends at (x, y) of the unit disc). When the
 * two would touch (arrows on top of each other, or nearly), both move apart by half the shortfall, along the line
 * between them, or across q's arrow when they coincide.
 */
function labelPoints(q: Point, k: Point): [Point, Point] {
  const at = ([x, y]: Point): Point => {
    const len = Math.hypot(x, y) || 1;
    return [C0 + (x / len) * (len * R + 14), C0 - (y / len) * (len * R + 14)];
  };
  const [a, b] = [at(q), at(k)];
  const d = Math.hypot(b[0] - a[0], b[1] - a[1]);
  if (d >= LABEL_GAP) return [a, b];
  const qLen = Math.hypot(...q) || 1;
  const [ux, uy] = d > 0.01 ? [(b[0] - a[0]) / d, (b[1] - a[1]) / d] : [q[1] / qLen, q[0] / qLen];
  const half = (LABEL_GAP - d) / 2;
  const inside = (v: number) => Math.min(212, Math.max(8, v)); // within the 220 × 220 drawing
  return [
    [inside(a[0] - ux * half), inside(a[1] - uy * half)],
    [inside(b[0] + ux * half), inside(b[1] + uy * half)],
  ];
}

/**
 * An arrow from the centre to (x, y) on the unit circle, with a tip that can be dragged or turned by keys, and
 * its name at `label` (past its tip, unless the other arrow's name would touch it: labelPoints).
 */
function arrow(x: number, y: number, colour: string, name: "q" | "k", angle: number, label: Point): SVGElement {
  const [tx, ty] = [C0 + x * R, C0 - y * R];
  const text = svg("text", { x: label[0], y: label[1] + 4, "text-anchor": "middle", "font-size": 13, "font-weight": 700, "pointer-events": "none" });
  text.textContent = name;
  const handle = svg(
    "g",
    {
      class: "drag-handle",
      id: `rope-drag-${name}`,
      tabindex: 0,
      role: "slider",
      "aria-label": `Direction of ${name} in this pair, degrees (drag, or use the arrow keys)`,
      "aria-valuemin": 0,
      "aria-valuemax": 360,
      "aria-valuenow": Math.round(deg(angle)),
      "aria-valuetext": `${Math.round(deg(angle))} degrees`,
    },
    svg("circle", { cx: tx, cy: ty, r: 14, fill: "transparent" }),
    svg("circle", { class: "grip", cx: tx, cy: ty, r: 6, fill: colour, stroke: "#fff", "stroke-width": 1.5 }),
  );
  return svg("g", {}, svg("line", { x1: C0, y1: C0, x2: tx, y2: ty, stroke: colour, "stroke-width": 3, "stroke-dasharray": name === "k" ? "5 4" : undefined }), handle, text);
}

/** Turn pair i of `v` (a vector at position `pos`) so that, once rotated by pos·θᵢ, it points at angle `beta`. */
function aim(v: number[], p0: number, p1: number, beta: number, pos: number, theta: number): void {
  const len = Math.hypot(v[p0], v[p1]) || 1;
  const a = beta - pos * theta;
  v[p0] = len * Math.cos(a);
  v[p1] = len * Math.sin(a);
}

let dragging: "q" | "k" | null = null;
const picture = $("#rope-picture");

function pointerAngle(e: PointerEvent): number {
  const box = picture.querySelector("svg")!.getBoundingClientRect();
  const x = ((e.clientX - box.left) / box.width) * 220 - C0;
  const y = C0 - ((e.clientY - box.top) / box.height) * 220;
  return Math.atan2(y, x);
}

function turn(name: "q" | "k", beta: number): void {
  const d = Number(dim.value);
  const i = Number(pair.value);
  const [p0, p1] = ropePair(i, d, layout.value as RopeLayout);
  const theta = ropeFrequencies(d, readNumber(base))[i];
  aim(name === "q" ? vectors.q : vectors.k, p0, p1, beta, readNumber(name === "q" ? m.input : n.input), theta);
  render();
  (document.getElementById(`rope-drag-${name}`) as SVGElement | null)?.focus({ preventScroll: true });
}

picture.addEventListener("pointerdown", (e) => {
  // grab the tip nearer the pointer (within 24 px), whatever is drawn on top there: the tips and the other
  // arrow's label may overlap
  const near = (name: "q" | "k") => {
    const r = document.querySelector(`#rope-drag-${name} circle.grip`)!.getBoundingClientRect();
    return Math.hypot(e.clientX - (r.left + r.width / 2), e.clientY - (r.top + r.height / 2));
  };
  const [dq, dk] = [near("q"), near("k")];
  if (Math.min(dq, dk) > 24) return;
  dragging = dq <= dk ? "q" : "k";
  picture.setPointerCapture(e.pointerId);
  e.preventDefault();
});
picture.addEventListener("pointermove", (e) => {
  if (dragging) turn(dragging, pointerAngle(e));
});
const stop = () => (dragging = null);
picture.addEventListener("pointerup", stop);
picture.addEventListener("pointercancel", stop);
picture.addEventListener("keydown", (e) => {
  const target = (e.target as Element).closest(".drag-handle");
  if (!target) return;
  const step = { ArrowLeft: 5, ArrowUp: 5, ArrowRight: -5, ArrowDown: -5 }[e.key];
  if (step === undefined) return;
  e.preventDefault();
  const name = target.id.endsWith("q") ? "q" : "k";
  turn(name, ((Number(target.getAttribute("aria-valuenow")) + step) * Math.PI) / 180);
});

/** q·k over the head and over pair i, for a query `offset` positions after the key (the key at 0). */
export function scoreAtOffset(q: number[], k: number[], offset: number, b: number, lay: RopeLayout, i: number): [number, number] {
  const [qr] = ropeRotate([q], [offset], b, lay);
  const [kr] = ropeRotate([k], [0], b, lay);
  const [p0, p1] = ropePair(i, q.length, lay);
  return [dot(qr, kr), qr[p0] * kr[p0] + qr[p1] * kr[p1]];
}

const plotOpts = (points: [number, number, number][], offset: number): PlotOptions => ({
  id: "rope-offset-plot",
  label: "Attention score q·k against the offset m − n, over the whole head and for the chosen pair; the readout gives the value at the current offset",
  xLabel: "offset m − n",
  yLabel: "score q·k",
  series: [
    { name: "whole head", colour: "#1f5fa8", points: points.map(([o, s]) => [o, s]) },
    { name: "this pair", colour: "#b3478b", dash: "5 4", points: points.map(([o, , p]) => [o, p]) },
  ],
  marker: { x: offset, label: `m − n = ${offset}` },
  maxWidth: 520,
});
const plot = linePlot(plotOpts([[0, 0, 0], [1, 0, 0]], 0));
$("#rope-plot").append(plot.root);

function render(): void {
  const d = Number(dim.value);
  if (pair.options.length !== d / 2) fillPairs(d);
  if (vectors.d !== d) {
    const [q, k] = randomMatrix(2, d, 100 + d);
    vectors = { d, q, k };
  }
  const { q, k } = vectors;
  const lay = layout.value as RopeLayout;
  const b = readNumber(base);
  const i = Number(pair.value);
  const [qm, kn] = [readNumber(m.input), readNumber(n.input)];
  const [qr] = ropeRotate([q], [qm], b, lay);
  const [kr] = ropeRotate([k], [kn], b, lay);
  const theta = ropeFrequencies(d, b);
  const [p0, p1] = ropePair(i, d, lay);
  const norm = Math.max(Math.hypot(qr[p0], qr[p1]), Math.hypot(kr[p0], kr[p1])) || 1;
  const turned = (t: number) => deg(t * theta[i]);
  const [aq, ak] = [Math.atan2(qr[p1], qr[p0]), Math.atan2(kr[p1], kr[p0])];
  const [lq, lk] = labelPoints([qr[p0] / norm, qr[p1] / norm], [kr[p0] / norm, kr[p1] / norm]);
  const focused = document.activeElement?.id;
  picture.replaceChildren(
    svg(
      "svg",
      { width: 220, height: 220, viewBox: "0 0 220 220", role: "group", "aria-label": `Pair ${i}: q points at ${fmt(deg(aq), 3)} degrees, k at ${fmt(deg(ak), 3)} degrees` },
      svg("circle", { cx: C0, cy: C0, r: R, fill: "none", stroke: "#8a8a84" }),
      svg("line", { x1: 15, x2: 205, y1: C0, y2: C0, stroke: "#d0d0ca" }),
      svg("line", { y1: 15, y2: 205, x1: C0, x2: C0, stroke: "#d0d0ca" }),
      arrow(qr[p0] / norm, qr[p1] / norm, "#2166ac", "q", aq, lq),
      arrow(kr[p0] / norm, kr[p1] / norm, "#c8510a", "k", ak, lk),
    ),
  );
  if (focused?.startsWith("rope-drag-")) (document.getElementById(focused) as SVGElement | null)?.focus({ preventScroll: true });
  const stat = (label: string, value: string, id: string) => [el("dt", { text: label }), el("dd", { class: "stat", id, text: value })];
  const score = dot(qr, kr);
  $("#rope-stats").replaceChildren(
    ...stat(`channels of pair ${i}`, `${p0} and ${p1}`, "rope-channels"),
    ...stat("θᵢ (radians per position)", sig(theta[i], 4), "rope-theta"),
    ...stat("q turned by m·θᵢ", `${fmt(turned(qm))}°`, "rope-q-angle"),
    ...stat("k turned by n·θᵢ", `${fmt(turned(kn))}°`, "rope-k-angle"),
    ...stat("offset m − n", String(qm - kn), "rope-offset"),
    ...stat("this pair's part of q·k", fmt(qr[p0] * kr[p0] + qr[p1] * kr[p1], 8), "rope-pair-dot"),
    ...stat("q·k over the whole head", fmt(score, 8), "rope-dot"),
  );
  $("#rope-dot").dataset.value = String(score);
  const offset = qm - kn;
  const [lo, hi] = [Math.min(0, offset - 4), Math.max(64, offset + 4)];
  const points = Array.from({ length: hi - lo + 1 }, (_, j) => [lo + j, ...scoreAtOffset(q, k, lo + j, b, lay, i)] as [number, number, number]);
  plot.update(plotOpts(points, offset));
  const here = points.find((p) => p[0] === offset)!;
  const out = $("#rope-plot-readout");
  out.textContent = `At m − n = ${offset}: q·k = ${fmt(here[1], 6)} over the head, ${fmt(here[2], 6)} from pair ${i}. Any m and n with this difference give the same score.`;
  out.dataset.value = String(here[1]);
  const rows = theta.map((th, j) => {
    const [a, c] = ropePair(j, d, lay);
    return el(
      "tr",
      { class: j === i ? "hl" : undefined },
      el("td", { text: String(j) }),
      el("td", { text: `${a}, ${c}` }),
      // one rule per column: 4 significant digits, no exponent (1.987e+4 is 19870)
      el("td", { text: sig(th, 4), "data-value": String(th) }),
      el("td", { text: sig((2 * Math.PI) / th, 4), "data-value": String((2 * Math.PI) / th) }),
    );
  });
  $("#rope-freqs").replaceChildren(
    el(
      "table",
      { class: "plain", id: "rope-freq-table" },
      el("caption", { text: `θᵢ = ${b}^(−2i/${d}), ${lay} layout` }),
      el("thead", {}, el("tr", {}, ...["pair i", "channels", "θᵢ (radians per position)", "positions per turn"].map((h) => el("th", { scope: "col", text: h })))),
      el("tbody", {}, ...rows),
    ),
  );
}
const shift = (by: number) => {
  const [a, b] = [readNumber(m.input), readNumber(n.input)];
  if (Math.min(a, b) + by < 0 || Math.max(a, b) + by > Number(m.input.max)) return;
  m.input.value = m.slider.value = String(a + by);
  n.input.value = n.slider.value = String(b + by);
  render();
};
plus.addEventListener("click", () => shift(1));
minus.addEventListener("click", () => shift(-1));
live(render, dim, layout, base, pair);
fillPairs(16);
render();
