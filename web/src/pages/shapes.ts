import "../site";
import addCode from "octlm:positions/formulas.py#add_positions";
import { heatmap } from "../charts";
import { addPositionsError, randomMatrix } from "../math";
import { $, codeBlock, el, labelled, live, numberInput, readNumber, scaleFor, svg } from "../ui";

// The article's example is [8, 4, 256]: eight sequences of four tokens, 256 channels. The page opens on it.
const ARTICLE = [8, 4, 256];
const MAX_T = 1024;
const MAX_C = 1024;
const B = numberInput("shape-b", ARTICLE[0], 1, 64);
const T = numberInput("shape-t", ARTICLE[1], 1, MAX_T);
const C = numberInput("shape-c", ARTICLE[2], 1, MAX_C);
const Tp = numberInput("shape-tp", ARTICLE[1], 1, MAX_T);
const Cp = numberInput("shape-cp", ARTICLE[2], 1, MAX_C);
const follow = el("input", { type: "checkbox", id: "shape-follow", checked: true }) as HTMLInputElement;
const mismatch = el("button", { type: "button", id: "shape-mismatch", text: "Make a mismatch" });
const article = el("button", { type: "button", id: "shape-article", text: "The article's [8, 4, 256]" });
$("#shape-controls").append(
  labelled("Batch B", B),
  labelled("Length T", T),
  labelled("Width C", C),
  el("div", { class: "control" }, el("label", { for: "shape-follow" }, follow, " position table follows T and C")),
  labelled("Table rows T′", Tp),
  labelled("Table width C′", Cp),
  el("div", { class: "control", role: "group", "aria-label": "Presets" }, mismatch, article),
);
const table = heatmap({ label: "The position table, one row per position", rowName: "position", colName: "channel", maxSize: 640, square: false, minWidth: 240 });
table.root.id = "shape-table";
$("#shape-table-slot").append(table.root);
$("#code-add").append(codeBlock(addCode));

const shape = (s: number[]) => `[${s.join(", ")}]`;
const stage = (title: string, s: string, bad = false) =>
  el("div", { class: bad ? "stage bad" : "stage" }, el("div", { text: title }), el("div", { class: "shape", text: s }));

function picture(b: number, t: number, c: number, tp: number, cp: number): SVGElement {
  // the batch as a stack of T × C sheets, the position table as one sheet beside it; widths and heights are
  // scaled apart (and drawn at least 3 px) so that [8, 4, 256] stays a readable picture on a phone
  const ux = Math.min(10, 110 / Math.max(c, cp));
  const uy = Math.min(10, 80 / Math.max(t, tp));
  const [cw, ch, pw, ph] = [Math.max(3, c * ux), Math.max(3, t * uy), Math.max(3, cp * ux), Math.max(3, tp * uy)];
  const shown = Math.min(b, 8);
  const sheets = Array.from({ length: shown }, (_, i) =>
    svg("rect", { x: 10 + i * 6, y: 10 + i * 6, width: cw, height: ch, fill: "#92c5de", stroke: "#2166ac" }),
  ).reverse();
  const x0 = 40 + cw + shown * 6;
  const table = svg("rect", { x: x0, y: 10, width: pw, height: ph, fill: "#fdb863", stroke: "#c8510a" });
  const w = Math.max(x0 + pw + 20, x0 + 150);
  const h = Math.max(ch + shown * 6, ph) + 30;
  const text = (x: number, s: string) => {
    const node = svg("text", { x, y: h - 6, "font-size": 12 });
    node.textContent = s;
    return node;
  };
  return svg(
    "svg",
    { width: w, height: h, viewBox: `0 0 ${w} ${h}`, role: "img", "aria-label": `token vectors ${shape([b, t, c])} drawn as ${b} sheets of ${t} by ${c}; position table ${shape([tp, cp])} drawn beside them` },
    ...sheets,
    table,
    text(10, `tokens ${shape([b, t, c])}`),
    text(x0, `positions ${shape([tp, cp])}`),
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
  $("#shape-picture").replaceChildren(picture(b, t, c, tp, cp));
  // the position table itself, random as at initialization (octlm starts every row at std 0.02)
  const rows = randomMatrix(tp, cp, 4242).map((r) => r.map((v) => 0.02 * v));
  table.update(rows, scaleFor(rows.flat()));
  $("#shape-table-note").textContent = `${tp} rows, one per position 0 … ${tp - 1}, each a vector of ${cp} numbers: [${tp}, ${cp}].`;
}
live(render, B, T, C, Tp, Cp, follow);
mismatch.addEventListener("click", () => {
  follow.checked = false;
  Tp.value = String(readNumber(T) === MAX_T ? MAX_T - 1 : readNumber(T) + 1);
  render();
});
article.addEventListener("click", () => {
  [B.value, T.value, C.value] = ARTICLE.map(String);
  follow.checked = true;
  render();
});
render();
