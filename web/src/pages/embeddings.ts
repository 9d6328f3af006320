import "../site";
import { randomMatrix } from "../math";
import { $, el, labelled, legend, numberTable, scaleFor, select, type Scale } from "../ui";

export const TOKENS = ["the", " cat", " sat", " on", " a", " mat", ".", "\\n"];
const C = 6;
const table = randomMatrix(TOKENS.length, C, 2024);
const scale = scaleFor(table.flat());
// the one-hot vector holds only 0 and 1: its own scale, fixed, with its own key
const ONE_HOT: Scale = { kind: "sequential", min: 0, max: 1 };

/** Row vector times matrix, written out so that the page really computes the product. */
export function vecMat(v: number[], m: number[][]): number[] {
  return m[0].map((_, c) => v.reduce((s, vi, r) => s + vi * m[r][c], 0));
}

const picker = select("token", TOKENS.map((t, i) => [String(i), `${i}: "${t}"`]), "1");
$("#embed-controls").append(labelled("Token", picker, "its id is the row number"));
$("#embed-legend").append(legend(scale, "table values"));
$("#embed-onehot-legend").append(legend(ONE_HOT, "one-hot entries (each 0 or 1)"));

function render(): void {
  const id = Number(picker.value);
  const oneHot = TOKENS.map((_, j) => (j === id ? 1 : 0));
  const product = vecMat(oneHot, table);
  const cols = Array.from({ length: C }, (_, j) => `c${j}`);
  $("#embed-onehot").replaceChildren(
    numberTable([oneHot], { caption: `one-hot vector for id ${id} (1 × ${TOKENS.length})`, rowLabels: ["e"], colLabels: TOKENS.map((_, j) => String(j)), scale: ONE_HOT, digits: 1, corner: "vector \\ id" }),
  );
  $("#embed-table").replaceChildren(
    numberTable(table, { caption: `embedding table E (${TOKENS.length} × ${C}), row ${id} highlighted`, rowLabels: TOKENS.map((t, i) => `${i} "${t}"`), colLabels: cols, scale, highlight: [id], corner: "id \\ channel" }),
  );
  const result = numberTable([product], { caption: `product (1 × ${C})`, rowLabels: ["e·E"], colLabels: cols, scale, corner: "vector \\ channel" });
  result.id = "embed-product";
  $("#embed-result").replaceChildren(result);
  const same = product.every((v, c) => v === table[id][c]);
  $("#embed-check").replaceChildren(
    el("span", { text: same ? `The product equals row ${id} of E exactly: picking the row is the same as multiplying by the one-hot vector.` : "The product differs from the row (this should not happen)." }),
  );
}
picker.addEventListener("change", render);
render();
