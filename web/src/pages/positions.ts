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
import { scaleAttr, scaleOf, sig, type Scale } from "../scale";
import { $, codeBlock, el, labelled, legend, live, numberSlider, numberTable, readNumber, select } from "../ui";

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

/**
 * What each registered scheme does, in one line a learner can follow (from its module in octlm/positions/). A
 * scheme the registry gains before this list does shows its own docstring instead, so no row is left blank.
 */
export const WHAT_IT_DOES: Record<string, string> = {
  learned: "A second table, one learned row per position, added to the token vectors; it has no row past its last one.",
  sinusoidal: "Rows from a formula: sines and cosines of the position at falling frequencies, added to the token vectors; nothing to learn.",
  rope: "Turns each pair of query and key channels by an angle proportional to the position, so a score depends only on the distance.",
  "p-rope": "RoPE on the fastest fraction p of the channel pairs only; the slowest pairs never turn and carry content alone.",
  xpos: "RoPE whose queries and keys are also scaled per pair, so every score shrinks exponentially with the distance.",
  alibi: "Adds a fixed penalty to each score, the distance times a slope that differs per head; nothing is learned.",
  t5: "Adds a learned number to each score, one per head and distance bucket; far distances share wide buckets.",
  fire: "Adds a bias computed by a small learned network from the log of the distance, divided by the log of the query's position.",
  cope: "Counts positions by content: a gate from q·k decides how much each key counts, and the count looks up a learned bias.",
  fox: "Each token sets a forget gate from its content; a key's weight loses the gates of every token after it, a learned decay.",
  path: "Each token turns every earlier key by a reflection-like matrix read from its own input; a query sees the product of those between.",
  "stick-breaking": "Replaces the softmax: each key, nearest first, takes a share (σ of its score) of what the nearer keys left over.",
  nope: "No position signal at all: the causal mask alone tells a token which tokens came before it.",
};

// the links' words: the page (or section) a learner will land on
const PAGE_NAME: Record<string, string> = {
  "./positions.html#limits": "the limits of a learned table",
  "./sinusoidal.html": "the sinusoidal table page",
  "./rope.html": "the RoPE page",
  "./bias.html": "the ALiBi and T5 page",
};

{
  // The phrases wrap (table.plain keeps cells on one line), so that the table fits a desktop column; on a phone each
  // row reflows into a card (style.css, "issue 46" block), its cells labelled by their column: nothing scrolls.
  const prose = "white-space: normal; min-width: 8rem; text-align: left";
  const columns = ["scheme", "acts in", "maximum length", "family", "cost beyond T²", "what it does"];
  // every column is words, so every column reads from the left (table.plain right-aligns, for numbers)
  const head = el("tr", {}, ...columns.map((h) => el("th", { scope: "col", text: h, style: "text-align: left" })));
  const cell = (label: string, style: string, ...kids: (Node | string)[]) => el("td", { style, "data-label": label }, ...kids);
  const body = schemeRows().map((r) =>
    el(
      "tr",
      { "data-scheme": r.name },
      el("th", { scope: "row" }, el("code", { text: r.name })),
      cell(columns[1], prose, r.acts),
      cell(columns[2], prose, r.max),
      cell(columns[3], "text-align: left", r.family),
      cell(columns[4], prose, r.cost),
      cell(columns[5], `${prose}; min-width: 14rem`, WHAT_IT_DOES[r.name] ?? r.doc, ...(r.href ? [" ", el("a", { href: r.href, text: `More: ${PAGE_NAME[r.href] ?? r.href}` })] : [])),
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

// On a phone the eight channels do not fit beside the row labels: the tables show four at a time, and a control
// picks which four (nothing scrolls sideways). The note below still compares whole rows.
const phone = window.matchMedia("(max-width: 480px)");
const half = el(
  "fieldset",
  { id: "pos-half" },
  el("legend", { text: "Channels shown" }),
  el("label", {}, el("input", { type: "radio", name: "pos-half", value: "0", checked: true, id: "pos-half-0" }), " 0–3"),
  el("label", {}, el("input", { type: "radio", name: "pos-half", value: "1", id: "pos-half-1" }), " 4–7"),
);
$("#pos-controls").append(half);

/** The channels the tables show: all eight, or on a phone the chosen four. */
function shownChannels(): number[] {
  half.hidden = !phone.matches;
  if (!phone.matches) return Array.from({ length: C }, (_, c) => c);
  const first = Number(document.querySelector<HTMLInputElement>('input[name="pos-half"]:checked')?.value ?? 0) * (C / 2);
  return Array.from({ length: C / 2 }, (_, c) => first + c);
}

/** A coloured table of the rows `m` (channels `cols` only), declared for the colours test, every cell to 2 significant digits. */
function posTable(m: number[][], cols: number[], caption: string, rowLabels: string[], scale: Scale, highlight: number[], init?: string): HTMLTableElement {
  const t = numberTable(m.map((r) => cols.map((c) => r[c])), { caption, rowLabels, colLabels: cols.map(String), scale, highlight, corner: "position \\ channel" });
  Object.assign(t.dataset, { quantity: "embedding", scale: scaleAttr(scale), key: "pos-legend" }, init ? { init } : {});
  for (const td of t.querySelectorAll<HTMLElement>("td")) td.textContent = sig(Number(td.dataset.value), 2);
  return t;
}

function render(): void {
  const ids = pickers.map((p) => Number(p.value));
  const which = (document.querySelector<HTMLInputElement>('input[name="scheme"]:checked')?.value ?? "learned") as "learned" | "sinusoidal";
  const rows = which === "learned" ? learned : sinusoidal;
  const tok = ids.map((id) => tokenTable[id]);
  const sum = tok.map((r, t) => r.map((v, c) => v + rows[t][c]));
  // the site's one scale for embedding values, over all three tables, so equal numbers get equal colours across them
  const scale = scaleOf("embedding", [...tok.flat(), ...rows.flat(), ...sum.flat()]);
  const same = repeated(ids);
  const cols = shownChannels();
  $("#pos-grid").style.setProperty("--channels", String(cols.length)); // the three tables' shared column widths (style.css)
  // no-break spaces: a narrow label column breaks between the position and the token, never inside either
  const labels = ids.map((id, t) => `pos\u00a0${t} "${TOKENS[id].replaceAll(" ", "\u00a0")}"`);
  const span = cols.length < C ? `, channels ${cols[0]}–${cols[cols.length - 1]} of ${C}` : "";
  $("#pos-tokens").replaceChildren(posTable(tok, cols, `token_embedding[ids] (${T} × ${C}${span})`, labels, scale, same, "pos-init"));
  $("#pos-rows").replaceChildren(posTable(rows, cols, `${which} rows 0..${T - 1} (${T} × ${C}${span})`, rows.map((_, t) => `pos\u00a0${t}`), scale, same, "pos-init"));
  const sumTable = posTable(sum, cols, `sum = model input (${T} × ${C}${span})`, labels, scale, same, "pos-init");
  sumTable.id = "pos-sum-table";
  $("#pos-sum").replaceChildren(sumTable);
  $("#pos-legend").replaceChildren(legend(scale, "values in all three tables"));

  let note = "Every token differs here, so the rows differ for two reasons at once. Pick the same token at two positions to isolate the position signal.";
  outer: for (let a = 0; a < T; a++) {
    for (let b = a + 1; b < T; b++) {
      if (ids[a] !== ids[b]) continue;
      const gap = Math.max(...sum[a].map((v, c) => Math.abs(v - sum[b][c] - (rows[a][c] - rows[b][c]))));
      note = `"${TOKENS[ids[a]]}" sits at positions ${a} and ${b} (the outlined rows): its token rows are identical, and the two sums differ by exactly position row ${a} minus position row ${b} (largest leftover: ${sig(gap, 2)}, rounding only).`;
      break outer;
    }
  }
  $("#pos-note").textContent = note;
}
for (const p of pickers) p.addEventListener("change", render);
scheme.addEventListener("change", render);
half.addEventListener("change", render);
phone.addEventListener("change", render);
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
