import "../site";
import addCode from "octlm:positions.py#add_positions";
import { addPositionsError } from "../math";
import { $, codeBlock, el, labelled, numberInput, readNumber, svg } from "../ui";

const B = numberInput("shape-b", 2, 1, 8);
const T = numberInput("shape-t", 4, 1, 16);
const C = numberInput("shape-c", 8, 1, 32);
const Tp = numberInput("shape-tp", 4, 1, 16);
const Cp = numberInput("shape-cp", 8, 1, 32);
const follow = el("input", { type: "checkbox", id: "shape-follow", checked: true }) as HTMLInputElement;
const mismatch = el("button", { type: "button", id: "shape-mismatch", text: "Make a mismatch" });
$("#shape-controls").append(
  labelled("Batch B", B),
  labelled("Length T", T),
  labelled("Width C", C),
  el("div", { class: "control" }, el("label", { for: "shape-follow" }, follow, " position table follows T and C")),
  labelled("Table rows T′", Tp),
  labelled("Table width C′", Cp),
  mismatch,
);
$("#code-add").append(codeBlock(addCode));

const shape = (s: number[]) => `[${s.join(", ")}]`;
const stage = (title: string, s: string, bad = false) =>
  el("div", { class: bad ? "stage bad" : "stage" }, el("div", { text: title }), el("div", { class: "shape", text: s }));

function picture(b: number, t: number, c: number, tp: number, cp: number): SVGElement {
  // the batch as a stack of T × C sheets, the position table as one sheet beside it
  const u = Math.max(3, Math.min(10, Math.floor(120 / Math.max(t, c, tp, cp))));
  const sheets = Array.from({ length: b }, (_, i) =>
    svg("rect", { x: 10 + i * 8, y: 10 + i * 8, width: c * u, height: t * u, fill: "#92c5de", stroke: "#2166ac" }),
  ).reverse();
  const x0 = 40 + c * u + b * 8;
  const table = svg("rect", { x: x0, y: 10, width: cp * u, height: tp * u, fill: "#fdb863", stroke: "#e66101" });
  const w = x0 + cp * u + 20;
  const h = Math.max(t * u + b * 8, tp * u) + 30;
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
}
for (const input of [B, T, C, Tp, Cp, follow]) input.addEventListener("change", render);
mismatch.addEventListener("click", () => {
  follow.checked = false;
  Tp.value = String(readNumber(T) === 16 ? 15 : readNumber(T) + 1);
  render();
});
render();
