import "../site";
import applyCode from "octlm:positions.py#apply_rope";
import freqCode from "octlm:positions.py#rope_frequencies";
import { dot, randomMatrix, ropeFrequencies, ropePair, ropeRotate, type RopeLayout } from "../math";
import { $, codeBlock, el, fmt, labelled, numberInput, readNumber, select, svg } from "../ui";

const dim = select("rope-dim", [["8", "8"], ["16", "16"], ["32", "32"], ["64", "64"]], "16");
const layout = select("rope-layout", [["half", "half (Llama, HF)"], ["interleaved", "interleaved (paper)"]], "half");
const base = numberInput("rope-base", 10000, 10, 1000000, 10);
const pair = select("rope-pair", [], "0");
const m = numberInput("rope-m", 5, 0, 4096);
const n = numberInput("rope-n", 2, 0, 4096);
const minus = el("button", { type: "button", id: "rope-shift-down", text: "Shift both −1" });
const plus = el("button", { type: "button", id: "rope-shift-up", text: "Shift both +1" });
$("#rope-controls").append(
  labelled("Head size D", dim),
  labelled("Pair layout", layout),
  labelled("Base b", base),
  labelled("Channel pair i", pair),
  labelled("Query position m", m),
  labelled("Key position n", n),
  el("div", { class: "control", role: "group", "aria-label": "Shift both positions" }, plus, minus),
);
$("#code-freq").append(codeBlock(freqCode));
$("#code-apply").append(codeBlock(applyCode));

function fillPairs(d: number): void {
  const keep = Math.min(Number(pair.value) || 0, d / 2 - 1);
  pair.replaceChildren(...Array.from({ length: d / 2 }, (_, i) => el("option", { value: String(i), text: String(i) })));
  pair.value = String(keep);
}

function arrow(x: number, y: number, colour: string, label: string, dash = false): SVGElement {
  const R = 90;
  const tx = 110 + x * R;
  const ty = 110 - y * R;
  const text = svg("text", { x: 110 + x * (R + 14), y: 114 - y * (R + 14), "text-anchor": "middle", "font-size": 13, "font-weight": 700 });
  text.textContent = label;
  return svg(
    "g",
    {},
    svg("line", { x1: 110, y1: 110, x2: tx, y2: ty, stroke: colour, "stroke-width": 3, "stroke-dasharray": dash ? "5 4" : undefined }),
    svg("circle", { cx: tx, cy: ty, r: 4, fill: colour }),
    text,
  );
}

function render(): void {
  const d = Number(dim.value);
  if (pair.options.length !== d / 2) fillPairs(d);
  const lay = layout.value as RopeLayout;
  const b = readNumber(base);
  const i = Number(pair.value);
  const [qm, kn] = [readNumber(m), readNumber(n)];
  const [q, k] = randomMatrix(2, d, 100 + d);
  const [qr] = ropeRotate([q], [qm], b, lay);
  const [kr] = ropeRotate([k], [kn], b, lay);
  const theta = ropeFrequencies(d, b);
  const [p0, p1] = ropePair(i, d, lay);
  const norm = Math.max(Math.hypot(qr[p0], qr[p1]), Math.hypot(kr[p0], kr[p1]));
  const angle = (t: number) => ((((t * theta[i]) % (2 * Math.PI)) + 2 * Math.PI) % (2 * Math.PI)) * (180 / Math.PI);
  $("#rope-picture").replaceChildren(
    svg(
      "svg",
      { width: 220, height: 220, viewBox: "0 0 220 220", role: "img", "aria-label": `Pair ${i}: q rotated to ${fmt(angle(qm))} degrees beyond its start, k rotated ${fmt(angle(kn))} degrees` },
      svg("circle", { cx: 110, cy: 110, r: 90, fill: "none", stroke: "#c9c9c2" }),
      svg("line", { x1: 15, x2: 205, y1: 110, y2: 110, stroke: "#e0e0da" }),
      svg("line", { y1: 15, y2: 205, x1: 110, x2: 110, stroke: "#e0e0da" }),
      arrow(qr[p0] / norm, qr[p1] / norm, "#2166ac", "q"),
      arrow(kr[p0] / norm, kr[p1] / norm, "#e66101", "k", true),
    ),
  );
  const stat = (label: string, value: string, id: string) => [el("dt", { text: label }), el("dd", { class: "stat", id, text: value })];
  $("#rope-stats").replaceChildren(
    ...stat(`channels of pair ${i}`, `${p0} and ${p1}`, "rope-channels"),
    ...stat("θᵢ (radians per position)", fmt(theta[i], 6), "rope-theta"),
    ...stat("q turned by m·θᵢ", `${fmt(angle(qm))}°`, "rope-q-angle"),
    ...stat("k turned by n·θᵢ", `${fmt(angle(kn))}°`, "rope-k-angle"),
    ...stat("offset m − n", String(qm - kn), "rope-offset"),
    ...stat("this pair's part of q·k", fmt(qr[p0] * kr[p0] + qr[p1] * kr[p1], 8), "rope-pair-dot"),
    ...stat("q·k over the whole head", fmt(dot(qr, kr), 8), "rope-dot"),
  );
  const rows = theta.map((th, j) => {
    const [a, c] = ropePair(j, d, lay);
    return el(
      "tr",
      { class: j === i ? "hl" : undefined },
      el("td", { text: String(j) }),
      el("td", { text: `${a}, ${c}` }),
      el("td", { text: fmt(th, 6), "data-value": String(th) }),
      el("td", { text: fmt((2 * Math.PI) / th, 4) }),
    );
  });
  $("#rope-freqs").replaceChildren(
    el(
      "table",
      { class: "plain", id: "rope-freq-table" },
      el("caption", { text: `θᵢ = ${b}^(−2i/${d}), ${lay} layout` }),
      el("thead", {}, el("tr", {}, ...["pair i", "channels", "θᵢ", "positions per turn"].map((h) => el("th", { scope: "col", text: h })))),
      el("tbody", {}, ...rows),
    ),
  );
}
const shift = (by: number) => {
  const [a, b] = [readNumber(m), readNumber(n)];
  if (Math.min(a, b) + by < 0) return;
  m.value = String(a + by);
  n.value = String(b + by);
  render();
};
plus.addEventListener("click", () => shift(1));
minus.addEventListener("click", () => shift(-1));
for (const c of [dim, layout, base, pair, m, n]) c.addEventListener("change", render);
fillPairs(16);
render();
