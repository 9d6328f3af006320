import "../site";
import addCode from "octlm:positions/formulas.py#add_positions";
import { heatmap } from "../charts";
import { addPositionsError, randomMatrix } from "../math";
import { scaleAttr, scaleOf, sig } from "../scale";
import { $, codeBlock, el, labelled, live, numberInput, readNumber, svg } from "../ui";

// The opening example is [8, 4, 256]: eight sequences of four tokens, 256 channels, the example of the project's
// source text "Input Embeddings". The page opens on it.
const OPENING = [8, 4, 256];
// octlm (as GPT-2) starts every row of a position table at standard deviation 0.02
const INIT_STD = 0.02;
const MAX_T = 1024;
const MAX_C = 1024;
const B = numberInput("shape-b", OPENING[0], 1, 64);
const T = numberInput("shape-t", OPENING[1], 1, MAX_T);
const C = numberInput("shape-c", OPENING[2], 1, MAX_C);
const Tp = numberInput("shape-tp", OPENING[1], 1, MAX_T);
const Cp = numberInput("shape-cp", OPENING[2], 1, MAX_C);
const follow = el("input", { type: "checkbox", id: "shape-follow", checked: true }) as HTMLInputElement;
const mismatch = el("button", { type: "button", id: "shape-mismatch", text: "Make a mismatch" });
const article = el("button", { type: "button", id: "shape-article", text: "Back to [8, 4, 256]" });
$("#shape-controls").append(
  labelled("Batch B", B),
  labelled("Length T", T),
  labelled("Width C", C),
  el("div", { class: "control" }, el("label", { for: "shape-follow" }, follow, " position table follows T and C")),
  labelled("Table rows T′", Tp),
  labelled("Table width C′", Cp),
  el("div", { class: "control", role: "group", "aria-label": "Presets" }, mismatch, article),
);
const table = heatmap({ label: "The position table, one row per position", rowName: "position", colName: "channel", maxSize: 640, square: false, minWidth: 240, format: (v) => sig(v, 3) });
table.root.id = "shape-table";
// embedding values, on the site's one scale for them; the note beside the map says which random numbers these are
const tableMap = el("div", { class: "map", "data-quantity": "embedding", "data-init": "shape-init" }, table.root);
$("#shape-table-slot").append(tableMap);
$("#code-add").append(codeBlock(addCode));

const shape = (s: number[]) => `[${s.join(", ")}]`;
const stage = (title: string, s: string, bad = false) =>
  el("div", { class: bad ? "stage bad" : "stage" }, el("div", { text: title }), el("div", { class: "shape", text: s }));

const BLUE = { fill: "#92c5de", stroke: "#2166ac" };
const ORANGE = { fill: "#fdb863", stroke: "#c8510a" };
const SUM = { fill: "#cbb7dc", stroke: "#5e3c99" };
const FONT = 12;

/** SVG text at (x, y); `mono` for shapes. */
function words(x: number, y: number, s: string, opts: { anchor?: string; mono?: boolean; bold?: boolean; fill?: string } = {}): SVGElement {
  const node = svg("text", { x, y, "text-anchor": opts.anchor ?? "middle", "font-size": FONT, "font-family": opts.mono ? "ui-monospace, monospace" : undefined, "font-weight": opts.bold ? 700 : undefined, fill: opts.fill });
  node.textContent = s;
  return node;
}

/**
 * The broadcast, drawn: one row per sequence of the batch (the first three and the last when B > 4), each its
 * [T, C] token block, plus the position table, equals the sum. The table is drawn solid once, on the first row,
 * and dashed on every other row with a line down from it: the same rows are added to every sequence, not copies.
 * Blocks are scaled to T and C (clamped, so [8, 4, 256] stays readable on a phone); every label has a column of
 * its own width, so labels never run into each other, however small C is. A mismatch draws the table with its own
 * shape, in red, and no sum.
 */
function picture(b: number, t: number, c: number, tp: number, cp: number, bad: boolean): SVGElement {
  const longest = Math.max(...[shape([b, t, c]), shape([tp, cp])].map((x) => x.length));
  const col = Math.max(96, Math.ceil(0.62 * FONT * longest) + 8); // every column fits its longest label
  const [gap, lab] = [22, 34]; // the + and = columns; the sequence labels
  const blockW = (w: number) => Math.max(10, Math.min(col - 12, (col - 12) * (w / Math.max(c, cp))));
  const blockH = (h: number) => Math.max(8, Math.min(34, 34 * (h / Math.max(t, tp))));
  const [tw, th, pw, ph] = [blockW(c), blockH(t), blockW(cp), blockH(tp)];
  const rowH = Math.max(th, ph) + 12;
  const shown = b <= 4 ? Array.from({ length: b }, (_, i) => i) : [0, 1, 2, b - 1];
  const x = [lab, lab + col + gap, lab + 2 * (col + gap)]; // left edges of the three columns
  const top = 44;
  const kids: SVGElement[] = [
    words(x[0] + col / 2, 14, "token vectors", { bold: true }),
    words(x[0] + col / 2, 30, shape([b, t, c]), { mono: true }),
    words(x[1] + col / 2, 14, "position table", { bold: true, fill: bad ? "#a1160a" : undefined }),
    words(x[1] + col / 2, 30, shape([tp, cp]), { mono: true, fill: bad ? "#a1160a" : undefined }),
    words(x[2] + col / 2, 14, "model input", { bold: true }),
    words(x[2] + col / 2, 30, bad ? "error" : shape([b, t, c]), { mono: true, fill: bad ? "#a1160a" : undefined }),
  ];
  let y = top;
  shown.forEach((seq, k) => {
    if (k === 3) {
      kids.push(words(lab / 2, y + 6, "⋮"), words(x[0] + col / 2, y + 6, `${b - 4} more`), words(x[1] + col / 2, y + 6, "⋮"));
      y += 16;
    }
    const mid = y + rowH / 2;
    kids.push(words(4, mid + 4, `b=${seq}`, { anchor: "start" }));
    kids.push(svg("rect", { x: x[0] + (col - tw) / 2, y: mid - th / 2, width: tw, height: th, fill: BLUE.fill, stroke: BLUE.stroke }));
    kids.push(words(x[0] + col + gap / 2, mid + 5, "+", { bold: true }));
    const first = k === 0;
    kids.push(svg("rect", { x: x[1] + (col - pw) / 2, y: mid - ph / 2, width: pw, height: ph, fill: first ? ORANGE.fill : "none", stroke: bad ? "#a1160a" : ORANGE.stroke, "stroke-width": first ? 1 : 1.5, "stroke-dasharray": first ? undefined : "4 3" }));
    kids.push(words(x[1] + col + gap / 2, mid + 5, "=", { bold: true }));
    if (bad) kids.push(words(x[2] + col / 2, mid + 5, "✗", { bold: true, fill: "#a1160a" }));
    else kids.push(svg("rect", { x: x[2] + (col - tw) / 2, y: mid - th / 2, width: tw, height: th, fill: SUM.fill, stroke: SUM.stroke }));
    y += rowH;
  });
  // the one table, reaching every row: a line down the table's column from the solid block
  const lineX = x[1] + col / 2 + pw / 2 + 5;
  const end = y - rowH / 2;
  if (shown.length > 1) kids.push(svg("path", { d: `M${lineX},${top + rowH / 2}V${end}M${lineX - 4},${end - 6}L${lineX},${end}L${lineX + 4},${end - 6}`, fill: "none", stroke: ORANGE.stroke, "stroke-width": 1.5, class: "broadcast" }));
  const h = y + 22;
  kids.push(words(x[1] + col / 2, h - 6, b > 1 ? `the same ${shape([tp, cp])}, added to all ${b}` : "one sequence: nothing to broadcast"));
  const w = x[2] + col + 4;
  return svg(
    "svg",
    { class: "shape-picture", width: w, height: h, viewBox: `0 0 ${w} ${h}`, role: "img", "aria-label": bad ? `token vectors ${shape([b, t, c])} and a position table ${shape([tp, cp])} that does not fit them: no sum` : `the one position table ${shape([tp, cp])} added to each of the ${b} sequences of token vectors ${shape([b, t, c])}, giving ${shape([b, t, c])}` },
    ...kids,
  );
}

function render(): void {
  Tp.disabled = follow.checked;
  Cp.disabled = follow.checked;
  if (follow.checked) {
    Tp.value = T.value;
    Cp.value = C.value;
  }
  const [b, t, c, tp, cp] = [B, T, C, Tp, Cp].map(readNumber);
  const error = addPositionsError([b, t, c], [tp, cp]);
  $("#shape-pipeline").replaceChildren(
    stage("token ids", shape([b, t])),
    el("span", { "aria-hidden": "true", text: "→" }),
    stage("token vectors", shape([b, t, c])),
    el("span", { "aria-hidden": "true", text: "+" }),
    stage("position rows", shape([tp, cp]), error !== null),
    el("span", { "aria-hidden": "true", text: "→" }),
    stage("model input", error ? "error" : shape([b, t, c]), error !== null),
  );
  $("#shape-result").replaceChildren(
    error
      ? el("p", { class: "error", id: "shape-error", role: "alert" }, el("strong", { text: "UserError: " }), error)
      : el("p", { class: "ok", id: "shape-ok", text: `The table is broadcast over the batch: ${shape([tp, cp])} acts as ${shape([1, tp, cp])} and is added to each of the ${b} sequences. The result is ${shape([b, t, c])}.` }),
  );
  $("#shape-picture").replaceChildren(picture(b, t, c, tp, cp, error !== null));
  // the position table itself, random as octlm initialises it (std 0.02), on the site's scale for embedding values
  const rows = randomMatrix(tp, cp, 4242).map((r) => r.map((v) => INIT_STD * v));
  const scale = scaleOf("embedding", rows.flat());
  table.update(rows, scale);
  tableMap.dataset.scale = scaleAttr(scale);
  $("#shape-table-note").textContent = `${tp} rows, one per position 0 … ${tp - 1}, each a vector of ${cp} numbers: [${tp}, ${cp}].`;
}
live(render, B, T, C, Tp, Cp, follow);
mismatch.addEventListener("click", () => {
  follow.checked = false;
  Tp.value = String(readNumber(T) === MAX_T ? MAX_T - 1 : readNumber(T) + 1);
  render();
});
article.addEventListener("click", () => {
  [B.value, T.value, C.value] = OPENING.map(String);
  follow.checked = true;
  render();
});
render();
