import "../site";
import forwardCode from "octlm:model/decoder.py#Decoder.forward";
import schemeCode from "octlm:positions/scheme.py#PositionScheme";
import buildCode from "octlm:positions/scheme.py#build_positions";
import addPositions from "octlm:positions/formulas.py#add_positions";
import learnedEmbed from "octlm:positions/absolute.py#LearnedPositions.embed";
import registerCode from "octlm:positions/scheme.py#register";
import tooLong from "octlm-raise:model/decoder.py#Decoder.check_ids#longer than the learned position table";
import { randomMatrix, sinusoidalTable } from "../math";
import { loadTokenizer, pipelineSteps } from "./positions-pipeline";
import { schemeRows, tooLongMessage } from "../schemes";
import { $, codeBlock, el, labelled, legend, live, numberSlider, numberTable, readNumber, scaleFor, select } from "../ui";

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
$("#pos-grid").style.setProperty("--channels", String(C)); // the three tables' shared column widths (style.css)
$("#code-add").append(codeBlock(addPositions));
$("#code-learned").append(codeBlock(learnedEmbed));
$("#code-forward").append(codeBlock(forwardCode, "self.positions.embed("));
$("#code-scheme").append(codeBlock(schemeCode));
$("#code-build").append(codeBlock(buildCode));
$("#code-register").append(codeBlock(registerCode));

// ---- from raw text to the model's input, step by step as it is built in PyTorch (positions-pipeline.ts)
const BATCH = 8; // batch_size: the playground's example batch
const pipeText = el("textarea", { id: "pipe-text", rows: 3, spellcheck: "false" }) as HTMLTextAreaElement;
pipeText.value = "def greet(name):\n    return 'Hello, ' + name + '!'\n\nfor who in ['Ada', 'Alan']:\n    print(greet(who))\n";
const ctxLen = numberSlider("pipe-t", "context_length", 4, 1, 16, () => renderPipe(), { hint: "starts at 4" });
const outDim = numberSlider("pipe-c", "output_dim", 256, 1, 512, () => renderPipe(), { hint: "starts at 256" });
$("#pipe-controls").append(el("div", { class: "control wide pipe-text" }, el("label", { for: "pipe-text", text: "Text" }), pipeText), ctxLen.control, outDim.control);
let tok: Awaited<ReturnType<typeof loadTokenizer>> | null = null;

function renderPipe(): void {
  if (tok) $("#pipe-steps").replaceChildren(...pipelineSteps(tok, pipeText.value, BATCH, readNumber(ctxLen.input), readNumber(outDim.input)));
}
live(renderPipe, pipeText);
$("#pipe-steps").replaceChildren(el("li", { id: "pipe-loading", text: "Loading octlm's tokenizer…" }));
loadTokenizer(`${import.meta.env.BASE_URL}models/learned/tokenizer.json`)
  .then((t) => {
    tok = t;
    renderPipe();
  })
  .catch((e: Error) => $("#pipe-steps").replaceChildren(el("li", { class: "error", role: "alert", text: `octlm's tokenizer could not be loaded (${e.message}), so this playground has no ids to start from.` })));

// ---- every registered scheme, from web/fixtures/schemes.json (octlm's registry, exported with the fixtures)
{
  // The columns of phrases wrap (table.plain keeps cells on one line), so that the table fits a desktop column; a phone
  // scrolls it sideways in its .scroll box, whose cue says so.
  const prose = "white-space: normal; min-width: 8rem; text-align: left";
  const columns = ["scheme", "acts in", "maximum length", "family", "cost beyond T²", "explained"];
  // every column is words, so every column reads from the left (table.plain right-aligns, for numbers)
  const head = el("tr", {}, ...columns.map((h) => el("th", { scope: "col", text: h, style: "text-align: left" })));
  const body = schemeRows().map((r) =>
    el(
      "tr",
      { "data-scheme": r.name },
      el("th", { scope: "row" }, el("code", { text: r.name })),
      el("td", { text: r.acts, style: prose }),
      el("td", { text: r.max, style: prose }),
      el("td", { text: r.family, style: "text-align: left" }),
      el("td", { text: r.cost, style: prose }),
      el("td", { style: "text-align: left" }, r.href ? el("a", { href: r.href, text: r.href.replace(/^\.\//, "") }) : "not yet"),
    ),
  );
  $("#scheme-table").replaceChildren(
    el("table", { class: "plain", id: "schemes" }, el("caption", { text: `The ${body.length} registered position schemes, in octlm's table order` }), el("thead", {}, head), el("tbody", {}, ...body)),
  );
}

/** Indices of the positions whose token also occurs at another position. */
export function repeated(ids: number[]): number[] {
  return ids.flatMap((id, t) => (ids.filter((x) => x === id).length > 1 ? [t] : []));
}

function render(): void {
  const ids = pickers.map((p) => Number(p.value));
  const which = (document.querySelector<HTMLInputElement>('input[name="scheme"]:checked')?.value ?? "learned") as "learned" | "sinusoidal";
  const rows = which === "learned" ? learned : sinusoidal;
  const tok = ids.map((id) => tokenTable[id]);
  const sum = tok.map((r, t) => r.map((v, c) => v + rows[t][c]));
  // one scale for the three tables, fitted to what they show, so equal numbers get equal colours across them
  const scale = scaleFor([...tok.flat(), ...rows.flat(), ...sum.flat()]);
  const same = repeated(ids);
  // no-break spaces: a narrow label column breaks between the position and the token, never inside either
  const labels = ids.map((id, t) => `pos\u00a0${t} "${TOKENS[id].replaceAll(" ", "\u00a0")}"`);
  const corner = "position \\ channel";
  $("#pos-tokens").replaceChildren(numberTable(tok, { caption: `token_embedding[ids] (${T} × ${C})`, rowLabels: labels, scale, highlight: same, corner }));
  $("#pos-rows").replaceChildren(numberTable(rows, { caption: `${which} rows 0..${T - 1} (${T} × ${C})`, rowLabels: rows.map((_, t) => `pos\u00a0${t}`), scale, highlight: same, corner }));
  const sumTable = numberTable(sum, { caption: `sum = model input (${T} × ${C})`, rowLabels: labels, scale, highlight: same, corner });
  sumTable.id = "pos-sum-table";
  $("#pos-sum").replaceChildren(sumTable);
  $("#pos-legend").replaceChildren(legend(scale, "values in all three tables"));

  let note = "Every token differs here, so the rows differ for two reasons at once. Pick the same token at two positions to isolate the position signal.";
  outer: for (let a = 0; a < T; a++) {
    for (let b = a + 1; b < T; b++) {
      if (ids[a] !== ids[b]) continue;
      const gap = Math.max(...sum[a].map((v, c) => Math.abs(v - sum[b][c] - (rows[a][c] - rows[b][c]))));
      note = `"${TOKENS[ids[a]]}" sits at positions ${a} and ${b} (the outlined rows): its token rows are identical, and the two sums differ by exactly position row ${a} minus position row ${b} (largest leftover: ${gap.toExponential(1)}).`;
      break outer;
    }
  }
  $("#pos-note").textContent = note;
}
for (const p of pickers) p.addEventListener("change", render);
scheme.addEventListener("change", render);
render();

// ---- past the last row: octlm's own message, cut from octlm/model/decoder.py when the site was built
const rowsCtl = numberSlider("end-rows", "Rows in the learned table", 128, 1, 512, () => renderEnd(), { hint: "Day 1: 128" });
const lenCtl = numberSlider("end-length", "Sequence length", 120, 1, 1024, () => renderEnd());
$("#end-controls").append(rowsCtl.control, lenCtl.control);
$("#end-source").textContent = `${tooLong.file}, line ${tooLong.line}`;

function renderEnd(): void {
  const limit = readNumber(rowsCtl.input);
  const length = readNumber(lenCtl.input);
  const out = $("#end-result");
  if (length <= limit) {
    out.replaceChildren(el("p", { class: "ok", id: "end-ok", text: `Positions 0 to ${length - 1} each have a row (the table has ${limit}, numbered 0 to ${limit - 1}). The model runs.` }));
    return;
  }
  const text = tooLongMessage(tooLong.parts, length, limit);
  out.replaceChildren(
    el("p", { text: `Position ${limit} is the first with no row: ${length - limit} of the ${length} positions have nothing to look up. octlm stops before the model runs and prints:` }),
    el("p", { class: "error", id: "end-error", role: "alert" }, el("strong", { text: "UserError: " }), text),
  );
}
renderEnd();
