import "../site";
import cosCode from "octlm:positions.py#cosine_similarity_matrix";
import tableCode from "octlm:positions.py#sinusoidal_table";
import { cosineSimilarityMatrix, sinusoidalTable } from "../math";
import { $, codeBlock, heatmap, labelled, numberInput, readNumber } from "../ui";

const width = numberInput("sin-width", 64, 2, 256, 2);
const length = numberInput("sin-length", 64, 1, 256);
const base = numberInput("sin-base", 10000, 10, 100000, 10);
$("#sin-controls").append(
  labelled("Width C (even)", width, "2 to 256"),
  labelled("Positions T", length, "1 to 256"),
  labelled("Base b", base),
);
const table = heatmap({ label: "Sinusoidal table", rowName: "position", colName: "column", maxSize: 420 });
const sim = heatmap({ label: "Cosine similarity of positions", rowName: "position", colName: "position", maxSize: 420 });
table.root.id = "sin-table";
sim.root.id = "sin-sim";
$("#sin-maps").append(table.root, sim.root);
$("#code-table").append(codeBlock(tableCode));
$("#code-cos").append(codeBlock(cosCode));

function render(): void {
  const c = readNumber(width);
  const t = readNumber(length);
  const b = readNumber(base);
  const rows = sinusoidalTable(t, c, b);
  table.update(rows, { kind: "diverging", min: -1, max: 1 });
  sim.update(cosineSimilarityMatrix(rows), { kind: "diverging", min: -1, max: 1 });
}
for (const input of [width, length, base]) input.addEventListener("change", render);
render();
