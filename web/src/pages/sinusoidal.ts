import "../site";
import cosCode from "octlm:positions/formulas.py#cosine_similarity_matrix";
import tableCode from "octlm:positions/formulas.py#sinusoidal_table";
import { diagonalMeans, heatmap, linePlot, type PlotOptions } from "../charts";
import { cosineSimilarityMatrix, sinusoidalTable, type Matrix } from "../math";
import { scaleAttr, scaleOf, sig } from "../scale";
import { $, codeBlock, el, labelled, live, numberInput, numberSlider, readNumber } from "../ui";

/** Offsets from here on count as "distant" in the measured claim. */
export const FAR = 20;

/**
 * What a wider table changes, measured on the similarity matrix `sim` `[T, T]` of a sinusoidal table: the
 * similarity of positions one step apart (mean over the pairs), and the highest similarity of any two positions
 * at least FAR apart, with the offset where it occurs.
 */
export function measure(sim: Matrix): { near: number; far: number; farOffset: number } {
  const byOffset = diagonalMeans(sim);
  let far = -Infinity;
  let farOffset = -1;
  for (let t = 0; t < sim.length; t++)
    for (let s = t + FAR; s < sim.length; s++)
      if (sim[t][s] > far) {
        far = sim[t][s];
        farOffset = s - t;
      }
  return { near: byOffset[1] ?? NaN, far, farOffset };
}

const base = numberInput("sin-base", 10000, 10, 100000, 10);
const width = numberSlider("sin-width", "Width C (even)", 64, 2, 256, () => render(), { step: 2, hint: "2 to 256" });
const length = numberSlider("sin-length", "Positions T", 64, 1, 256, () => render(), { hint: "1 to 256" });
// the two cases the text measures, one press away: a narrow table, whose similarity swings below 0 and back, and
// a wide one, whose slow pairs hold every similarity up
const presets = [8, 256].map((c) => el("button", { type: "button", id: `sin-preset-${c}`, text: `C = ${c}, T = 256` }));
$("#sin-controls").append(width.control, length.control, labelled("Base b", base), el("div", { class: "control", role: "group", "aria-label": "The cases the text measures" }, ...presets));
const table = heatmap({ label: "Sinusoidal table", rowName: "position", colName: "column", maxSize: 420, square: false, format: (v) => sig(v, 4) });
const sim = heatmap({ label: "Cosine similarity of positions", rowName: "position", colName: "position", maxSize: 420, cosine: true, format: (v) => sig(v, 4) });
table.root.id = "sin-table";
sim.root.id = "sin-sim";
// the table's numbers are signed values added to token vectors: the site's scale for embedding values
const tableMap = el("div", { class: "map", "data-quantity": "embedding" }, table.root);
// under the similarity map: the range its cells span on the key, and why (sinusoidal.html's "What to look for")
const simRange = el("p", { class: "map-note", id: "sin-sim-range", "aria-live": "polite" });
const plotOpts = (byOffset: number[]): PlotOptions => ({
  id: "sin-offset-plot",
  label: "Cosine similarity of two positions against the offset between them; the readout under it gives the figures",
  xLabel: "offset between the two positions",
  yLabel: "cosine similarity",
  series: [{ name: "similarity", colour: "#1f5fa8", points: byOffset.map((v, d) => [d, v]) }],
  marker: byOffset.length > FAR ? { x: FAR, label: `offset ${FAR}` } : undefined,
  maxWidth: 460,
});
const plot = linePlot(plotOpts([1]));
$("#sin-maps").append(tableMap, el("div", { class: "with-plot" }, el("div", { class: "map-with-note" }, sim.root, simRange), plot.root));
$("#code-table").append(codeBlock(tableCode));
$("#code-cos").append(codeBlock(cosCode));

function render(): void {
  const c = readNumber(width.input);
  const t = readNumber(length.input);
  const b = readNumber(base);
  const rows = sinusoidalTable(t, c, b);
  const s = cosineSimilarityMatrix(rows);
  const scale = scaleOf("embedding", rows.flat());
  table.update(rows, scale);
  tableMap.dataset.scale = scaleAttr(scale);
  sim.update(s);
  simRange.textContent = rangeNote(s, c, t, b);
  plot.update(plotOpts(diagonalMeans(s)));
  const m = measure(s);
  $("#sin-measured").textContent =
    t < 2
      ? "With one position there is no pair to compare."
      : `At C = ${c}, b = ${b}, T = ${t}: positions one step apart have similarity ${sig(m.near, 3)}; ` +
        (t > FAR ? `the most similar pair at least ${FAR} apart reaches ${sig(m.far, 3)} (offset ${m.farOffset}).` : `no pair is ${FAR} or more apart (raise T).`);
}
live(render, base);
presets.forEach((button, i) =>
  button.addEventListener("click", () => {
    width.input.value = width.slider.value = String([8, 256][i]);
    length.input.value = length.slider.value = "256";
    render();
  }),
);
render();

/**
 * What the similarity map spans, in words: its lowest cell against the key's −1 … 1, and how many channel pairs
 * turn less than a quarter turn over the T positions (their cosines stay above 0 and hold every similarity up,
 * which is why a wide table over few positions draws a nearly uniform map).
 */
export function rangeNote(s: Matrix, c: number, t: number, b: number): string {
  if (t < 2) return "One position: its similarity with itself is 1.";
  const lo = Math.min(...s.flat());
  const pairs = c / 2;
  const slow = Array.from({ length: pairs }, (_, i) => Math.pow(b, (-2 * i) / c) * (t - 1)).filter((turn) => turn < Math.PI / 2).length;
  const span = `The cells run from ${sig(lo, 2)} to 1, on the key's whole −1 to 1 (every cosine on this site uses this one key).`;
  const why = `${slow} of the ${pairs} channel pairs turn less than a quarter turn over these ${t} positions, so their cosines stay above 0 for every pair of positions`;
  return lo > 0 ? `${span} ${why}: they hold every similarity up, and the map is nearly uniform. Fewer, faster pairs (the C = 8 button) or more positions show the swings.` : `${span} ${why}; the faster pairs swing the similarity below 0 and back.`;
}

// The comparison the text quotes, computed here from the same formula at b = 10000 over 256 positions.
const WIDTHS = [8, 16, 32, 64, 128, 256];
const measured = WIDTHS.map((c) => ({ c, ...measure(cosineSimilarityMatrix(sinusoidalTable(256, c))) }));
const at = (c: number) => measured.find((m) => m.c === c)!;
const put = (id: string, v: number, decimals: number) => {
  const node = $(id);
  node.textContent = v.toFixed(decimals);
  node.dataset.value = String(v);
};
put("#near-8", at(8).near, 3);
put("#near-256", at(256).near, 3);
put("#far-8", at(8).far, 2);
put("#far-256", at(256).far, 2);
$("#width-table").replaceChildren(
  el(
    "table",
    { class: "plain", id: "sin-width-table" },
    el("caption", { text: `Measured on 256 positions, b = 10000` }),
    el("thead", {}, el("tr", {}, ...["width C", "similarity one step apart", `highest similarity at offset ≥ ${FAR}`, "at offset"].map((h) => el("th", { scope: "col", text: h })))),
    el("tbody", {}, ...measured.map((m) => el("tr", {}, el("td", { text: String(m.c) }), el("td", { text: sig(m.near, 3), "data-value": String(m.near) }), el("td", { text: sig(m.far, 3), "data-value": String(m.far) }), el("td", { text: String(m.farOffset) })))),
  ),
);
