import "../site";
import addPositions from "octlm:positions.py#add_positions";
import learnedEmbed from "octlm:positions.py#LearnedPositions.embed";
import { randomMatrix, sinusoidalTable } from "../math";
import { $, codeBlock, divergingFor, el, labelled, legend, numberTable, select } from "../ui";

const TOKENS = ["the", " cat", " sat", " on", " a", " mat", ".", " dog"];
const T = 6;
const C = 8;
const tokenTable = randomMatrix(TOKENS.length, C, 7);
const learned = randomMatrix(T, C, 11);
const sinusoidal = sinusoidalTable(T, C);
const initial = [0, 1, 2, 3, 0, 5]; // "the" twice, so the page opens on the interesting case

const pickers = initial.map((id, t) =>
  select(`tok-${t}`, TOKENS.map((tok, i) => [String(i), `${i}: "${tok}"`]), String(id)),
);
const scheme = el(
  "fieldset",
  {},
  el("legend", { text: "Position rows" }),
  el("label", {}, el("input", { type: "radio", name: "scheme", value: "learned", checked: true }), " learned (random)"),
  el("label", {}, el("input", { type: "radio", name: "scheme", value: "sinusoidal" }), " sinusoidal"),
);
$("#pos-controls").append(...pickers.map((p, t) => labelled(`Token at position ${t}`, p)), scheme);
$("#code-add").append(codeBlock(addPositions));
$("#code-learned").append(codeBlock(learnedEmbed));

const all = [...tokenTable.flat(), ...learned.flat(), ...sinusoidal.flat()];
const scale = divergingFor(all.map((v) => v * 2));
$("#pos-legend").append(legend(scale, "values"));

function render(): void {
  const ids = pickers.map((p) => Number(p.value));
  const which = (document.querySelector<HTMLInputElement>('input[name="scheme"]:checked')?.value ?? "learned") as "learned" | "sinusoidal";
  const rows = which === "learned" ? learned : sinusoidal;
  const tok = ids.map((id) => tokenTable[id]);
  const sum = tok.map((r, t) => r.map((v, c) => v + rows[t][c]));
  const labels = ids.map((id, t) => `pos ${t} "${TOKENS[id]}"`);
  $("#pos-tokens").replaceChildren(numberTable(tok, { caption: `token_embedding[ids] (${T} × ${C})`, rowLabels: labels, scale }));
  $("#pos-rows").replaceChildren(numberTable(rows, { caption: `${which} rows 0..${T - 1} (${T} × ${C})`, rowLabels: rows.map((_, t) => `pos ${t}`), scale }));
  const sumTable = numberTable(sum, { caption: `sum = model input (${T} × ${C})`, rowLabels: labels, scale });
  sumTable.id = "pos-sum-table";
  $("#pos-sum").replaceChildren(sumTable);

  let note = "Every token differs here, so the rows differ for two reasons at once. Pick the same token at two positions to isolate the position signal.";
  outer: for (let a = 0; a < T; a++) {
    for (let b = a + 1; b < T; b++) {
      if (ids[a] !== ids[b]) continue;
      const gap = Math.max(...sum[a].map((v, c) => Math.abs(v - sum[b][c] - (rows[a][c] - rows[b][c]))));
      note = `"${TOKENS[ids[a]]}" sits at positions ${a} and ${b}: its token rows are identical, and the two sums differ by exactly position row ${a} minus position row ${b} (largest leftover: ${gap.toExponential(1)}).`;
      break outer;
    }
  }
  $("#pos-note").textContent = note;
}
for (const p of pickers) p.addEventListener("change", render);
scheme.addEventListener("change", render);
render();
