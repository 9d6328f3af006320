import "../site";
import { randomMatrix } from "../math";
import { PROBABILITY, scaleAttr, scaleOf, sig, type Scale } from "../scale";
import { $, el, labelled, legend, numberTable, select } from "../ui";

export const TOKENS = ["the", " cat", " sat", " on", " a", " mat", ".", "\\n"];
const C = 6;
const table = randomMatrix(TOKENS.length, C, 2024);
// embedding values are signed: the site's one diverging scale for them, white at 0, round ends stated in the key
const scale = scaleOf("embedding", table.flat());
// the one-hot vector holds only 0 and 1: the site's probability scale (0 the light end, 1 the dark end)
const ONE_HOT: Scale = PROBABILITY;

/** Row vector times matrix, written out so that the page really computes the product. */
export function vecMat(v: number[], m: number[][]): number[] {
  return m[0].map((_, c) => v.reduce((s, vi, r) => s + vi * m[r][c], 0));
}

/**
 * Say what a coloured table shows and on which scale (the colours test reads these), where its key is, which
 * note gives the distribution of its random numbers; and print every cell with the same count of significant
 * digits, so a column reads 1.0 beside 0.21, not 1 beside 0.21.
 */
function declare(t: HTMLTableElement, quantity: string, s: Scale, key: string, digits: number, init?: string): HTMLTableElement {
  Object.assign(t.dataset, { quantity, scale: scaleAttr(s), key }, init ? { init } : {});
  for (const td of t.querySelectorAll<HTMLElement>("td")) td.textContent = digits ? sig(Number(td.dataset.value), digits) : td.dataset.value!;
  return t;
}

const picker = select("token", TOKENS.map((t, i) => [String(i), `${i}: "${t}"`]), "1");
$("#embed-controls").append(labelled("Token", picker, "its id is the row number"));
$("#embed-legend").append(legend(scale, "table values (E and the product)"));
$("#embed-onehot-legend").append(legend(ONE_HOT, "one-hot entries (each 0 or 1)"));

function render(): void {
  const id = Number(picker.value);
  const oneHot = TOKENS.map((_, j) => (j === id ? 1 : 0));
  const product = vecMat(oneHot, table);
  const cols = Array.from({ length: C }, (_, j) => `c${j}`);
  // the one-hot's entries are exact 0s and 1s: printed as they are
  $("#embed-onehot").replaceChildren(
    declare(numberTable([oneHot], { caption: `one-hot vector for id ${id} (1 × ${TOKENS.length})`, rowLabels: ["e"], colLabels: TOKENS.map((_, j) => String(j)), scale: ONE_HOT, digits: 1, corner: "vector \\ id" }), "one-hot", ONE_HOT, "embed-onehot-legend", 0),
  );
  $("#embed-table").replaceChildren(
    declare(numberTable(table, { caption: `embedding table E (${TOKENS.length} × ${C}), row ${id} highlighted`, rowLabels: TOKENS.map((t, i) => `${i} "${t}"`), colLabels: cols, scale, highlight: [id], corner: "id \\ channel" }), "embedding", scale, "embed-legend", 2, "embed-init"),
  );
  const result = declare(numberTable([product], { caption: `product (1 × ${C})`, rowLabels: ["e·E"], colLabels: cols, scale, corner: "vector \\ channel" }), "embedding", scale, "embed-legend", 2, "embed-init");
  result.id = "embed-product";
  $("#embed-result").replaceChildren(result);
  const same = product.every((v, c) => v === table[id][c]);
  $("#embed-check").replaceChildren(
    el("span", { text: same ? `The product equals row ${id} of E exactly: picking the row is the same as multiplying by the one-hot vector.` : "The product differs from the row (this should not happen)." }),
  );
}
picker.addEventListener("change", render);
render();
