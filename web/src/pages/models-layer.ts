/**
 * The Models page's first layer: the seed's constructor in PyTorch with the chosen model's sizes, and the numbers
 * the model's own graph returns for the user's text — each token's row of the token table (`token_rows`), the
 * scheme's position signal (rows added: embedded − token_rows; a rotation: q and k of a head before and after;
 * a bias: layer 0's additive term; or what the scheme does instead), and the sum entering block 0 (`embedded`).
 * Every number is sliced from the graph's outputs (src/lm.ts), never recomputed here.
 *
 * The layer is drawn as one flow (models-flow.ts): tokens and ids, token rows, the position signal as what it is
 * (rows added before x; a rotation or a bias inside attention, after x), x, block 0's attention and the
 * next-token probabilities, for one window of tokens, each view linked to the others by token.
 */
import type { Forward, ModelInfo, Signal } from "../engine";
import { block, difference, largestMagnitude, nextTokenDistribution, range } from "../lm";
import type { SchemeInfo } from "../schemes";
import { divergingFor, sig, type Scale } from "../scale";
import { el, labelled, legend, numberSlider, numberTable, select } from "../ui";
import { attentionLines, windowMap } from "./models-attention";
import { explainNext, explainRotation, explainSum, markTable, stage, tensorLabel, tokenChips, type Linker } from "./models-flow";

/**
 * A diverging scale twice as wide as the values: they then stay in the scale's light half, where dark text keeps a
 * contrast of 4.5:1 or more (at the scale's dark ends neither dark nor white text reaches it). The key states it.
 */
const readable = (values: number[]): Scale => {
  const s = divergingFor(values);
  return { ...s, min: 2 * s.min, max: 2 * s.max };
};

const ROWS = 8; // tokens per table
const COLS = 8; // channels per table
export const SHOWN = `${ROWS} tokens and ${COLS} channels (${COLS / 2} on a phone) at a time`;

/** The line(s) the chosen scheme runs instead of the seed's `pos` lines, as PyTorch with a comment. */
function instead(name: string, signal: Signal): string[] {
  if (name === "learned") return ["# octlm's learned scheme runs the code above as it is."];
  if (name === "sinusoidal") return ["x = tok(ids) + sinusoidal_scale * sinusoidal_table(T, C)  # fixed rows from a formula, not learned"];
  if (signal === "embed") return ["x = tok(ids) + rows(torch.arange(T))  # the scheme's own rows, added the same way"];
  const why: Record<Exclude<Signal, "embed">, string> = {
    rotate: "no pos: every attention layer rotates q and k by their positions",
    bias: "no pos: every attention layer adds a position term to its scores",
    attend: "no pos: every attention layer weighs the tokens by the scheme's own rule",
    none: "no pos, and nothing in its place: the causal mask alone",
  };
  return [`x = tok(ids)  # ${why[signal]}`];
}

/**
 * The embedding constructor as PyTorch, with the model's sizes and (the first 12 of) the text's ids, then what the
 * chosen scheme runs in place of its `pos` lines.
 */
export function constructorCode(info: ModelInfo, ids: number[], signal: Signal): string {
  const shown = ids.length > 12 ? `${ids.slice(0, 12).join(", ")}, ...` : ids.join(", ");
  return [
    "import torch",
    "from torch import nn",
    "",
    `vocab_size, C = ${info.vocab_size}, ${info.d_model}  # this model's vocabulary and width (model.json)`,
    `context_length = ${info.train_length}  # the length it was trained at`,
    `ids = torch.tensor([[${shown}]])  # [1, T]: your text, T = ${ids.length}`,
    "T = ids.shape[1]",
    "",
    "tok = nn.Embedding(vocab_size, C)  # the token table: one row of C numbers per id",
    "pos = nn.Embedding(context_length, C)  # the position table: one row per position",
    "pos_rows = pos(torch.arange(context_length))  # [context_length, C]: every row",
    "x = tok(ids) + pos(torch.arange(T))  # [1, T, C]: the sum entering the first block",
    "",
    `# the ${info.scheme} model, in place of the pos lines:`,
    ...instead(info.scheme, signal),
  ].join("\n");
}

/** What the chosen scheme does with position, in words: its docstring's summary and where its signal enters. */
export function constructorNote(scheme: SchemeInfo | undefined, signal: Signal, info: ModelInfo): string {
  const said = scheme?.doc.replace(/\.?$/, ".") ?? "";
  // a summary that opens with the scheme's own name ("FoX: ...") needs no name before it
  const doc = !said ? "" : said.toLowerCase().startsWith(info.scheme.replace("-", "")) ? `${said} ` : `${info.scheme}: ${said} `;
  const where: Record<Signal, string> = {
    embed: info.scheme === "learned" ? `Positions past the table's ${info.train_length} rows have no row at all.` : "Its rows are added to the token rows, as the seed adds pos's.",
    rotate: "Its signal is a rotation of the queries and keys inside attention, so q·k depends on how far apart two tokens are; the token rows enter the first block unchanged.",
    bias: "Its signal is a term added to the attention scores before the softmax; the token rows enter the first block unchanged.",
    attend: "It computes the attention weights by its own rule; the token rows enter the first block unchanged.",
    none: "It has no position signal: the causal mask alone tells the model about order.",
  };
  return doc + where[signal];
}

export interface LayerInput {
  info: ModelInfo;
  signal: Signal;
  out: Forward;
  labels: string[]; // the tokens, as shown
  ids: number[]; // the token ids the model ran on, [T]
  names(ids: number[]): Promise<string[]>; // tokens of other ids (the next-token candidates), as shown
}

/** Channels a table shows: fewer on a phone, so that a table fits its width instead of scrolling sideways. */
const NARROW = "(max-width: 560px)";
const colsNow = () => (window.matchMedia(NARROW).matches ? COLS / 2 : COLS);

/** Why a scheme adds nothing to x, for a cell's explanation. */
const WHY: Record<Signal, string> = {
  embed: "",
  rotate: "this scheme rotates q and k inside attention instead",
  bias: "this scheme adds its bias to the attention scores instead",
  attend: "this scheme weighs the tokens by its own attention rule instead",
  none: "this scheme has no position signal at all",
};

/**
 * The first layer as one flow, 8 tokens at a time: tokens and ids, token rows, the position signal as what it is,
 * x, block 0's attention and the next-token probabilities; each view registered with `link` by token.
 */
export function layerView(link: Linker): { controls: HTMLElement[]; root: HTMLElement; update(input: LayerInput): void; reveal(k: number): void } {
  const root = el("div", { class: "layer flow-stages" });
  const from = numberSlider("lm-layer-from", "Tokens from position", 0, 0, 0, () => draw());
  const channel = numberSlider("lm-layer-channel", "Channels from", 0, 0, 0, () => draw(), { step: COLS });
  const head = select("lm-layer-head", [["0", "0"]], "0");
  head.addEventListener("change", () => draw());
  window.matchMedia(NARROW).addEventListener("change", () => draw());
  let input: LayerInput | null = null;
  let drawn = 0; // bumped per draw, so that late token names never fill an older table

  function table(caption: string, data: number[][], rows: number[], c0: number, id: string, labels: string[], scale: Scale, words: (k: number, c: number, i: number, j: number) => string): HTMLElement {
    const t = numberTable(data, { caption, rowLabels: rows.map((r) => `${r} ${clip(labels[r], colsNow() < COLS ? 6 : 14)}`), colLabels: range(c0, c0 + (data[0]?.length ?? 0)).map(String), scale, format: (v) => sig(v, 3), corner: "token \\ channel" });
    t.id = id;
    return el("div", { class: "scroll" }, markTable(t, rows, c0, words));
  }

  function draw(): void {
    if (!input) return;
    const { out, info, signal, labels, ids } = input;
    const T = out.length;
    const C = info.d_model;
    const cols = colsNow();
    channel.input.step = channel.slider.step = String(cols);
    channel.input.max = channel.slider.max = String(Math.max(0, C - cols));
    const t0 = Math.max(0, Math.min(Number(from.input.value) || 0, T - Math.min(ROWS, T)));
    const rows = range(t0, Math.min(T, t0 + ROWS));
    const c0 = Math.max(0, Math.min(Number(channel.input.value) || 0, C - cols));
    const tokenRows = block(out.first.token_rows!.data, C, rows, c0, c0 + cols);
    const embedded = block(out.first.embedded!.data, C, rows, c0, c0 + cols);
    const added = signal === "embed" ? difference(embedded, tokenRows) : null;
    // one scale for the three tables, so that a colour is one number in each (the key below them says which)
    const scale = readable([...tokenRows.flat(), ...embedded.flat(), ...(added?.flat() ?? [])]);
    const channels = `channels ${c0}–${c0 + (tokenRows[0]?.length ?? 0) - 1} of ${C}`;
    const sum = (k: number, c: number, i: number, j: number) => explainSum(k, labels[k], c, tokenRows[i][j], added ? added[i][j] : null, embedded[i][j], WHY[signal]);
    const dims = out.first.embedded!.dims;
    const parts: HTMLElement[] = [
      stage("flow-ids", "ids", `Your text → tokens → token ids (tokens ${rows[0]}–${rows[rows.length - 1]} of ${T})`, [tensorLabel("ids", ["B", "T"], [1, T])], tokenChips(rows, labels, ids)),
      stage("flow-token-rows", "token-rows", "tok(ids): each id picks its row of the token table", [tensorLabel("tok.weight", ["V", "C"], [info.vocab_size, C]), tensorLabel("token_rows", ["B", "T", "C"], out.first.token_rows!.dims)], table(`tok(ids): the token table's rows (token_rows), ${channels}`, tokenRows, rows, c0, "lm-token-rows", labels, scale, sum)),
    ];
    const largest = sig(largestMagnitude(diffAll(out)), 3);
    if (added) parts.push(op("+ the position signal, embedded − token_rows:"), stage("flow-signal", "signal", addedTitle(info.scheme), [tensorLabel("pos rows", ["T", "C"], [T, C], true)], broadcast(T, C), table(`The position rows added (embedded − token_rows), ${channels}`, added, rows, c0, "lm-signal", labels, scale, sum)));
    else parts.push(op(`+ nothing: x = tok(ids) (largest |embedded − token_rows| = ${largest}). ${signal === "none" ? "NoPE has no position signal." : "This scheme's position signal enters inside attention, below."}`));
    parts.push(op("="), stage("flow-x", "x", "x: the sum entering block 0", [tensorLabel("x", ["B", "T", "C"], dims)], table(`x: the sum entering block 0 (embedded), ${channels}`, embedded, rows, c0, "lm-embedded", labels, scale, sum), legend(scale, added ? "token rows, position signal and sum" : "token rows and sum")));
    // a scheme that adds nothing to x puts its position signal inside attention: shown after the sum, not in it
    if (!added) parts.push(...signalParts(input, rows));
    if (signal !== "attend") parts.push(attentionStage(input, rows, Number(head.value)));
    parts.push(nextStage(input, rows));
    root.replaceChildren(...parts);
    root.dataset.signal = signal;
    root.dataset.rows = `${t0} ${rows.length}`;
    root.dataset.channels = `${c0} ${cols}`;
    for (const part of parts) if (part.dataset.view) link.register(part.dataset.view, part);
  }

  function signalParts(current: LayerInput, rows: number[]): HTMLElement[] {
    const { out, signal, labels } = current;
    const T = out.length;
    const h = Number(head.value);
    if (signal === "rotate") return [rotation(current, rows, h)];
    if (signal === "none") return [el("p", { class: "signal-line", text: "NoPE has no position signal anywhere: the causal mask alone tells the model about order." })];
    const bias = out.first.bias_0!;
    const gates = signal === "attend" && largestMagnitude(bias.data) > 0; // FoX's summed log forget gates
    const map = (id: string, data: Float32Array, kind: "bias" | "probability", caption: string, label: string) => windowMap(id, { data, T, head: h, labels, kind, caption }, rows, rows, label);
    const biasShape = tensorLabel("bias_0", bias.dims.length === 4 ? ["B", "H", "T", "T"] : ["H", "T", "T"], bias.dims);
    const parts: HTMLElement[] = [];
    if (signal === "bias" || gates)
      parts.push(
        stage("flow-bias", "signal", `Inside block 0's attention: the position bias goes onto the scores, not onto x`, [biasShape], el("p", { class: "signal-line", text: `scores[q, k] = q·k / √d + bias[q, k], then a softmax over the keys k. The bias depends on the positions q and k alone: one T × T map per head, the same for every sequence of a batch. Head ${h}, the window's tokens:` }), map("lm-bias-map", bias.data, "bias", `Layer 0, head ${h}: the position term added to the scores (bias_0), query by key`, "layer 0 position bias")),
      );
    if (signal === "attend")
      parts.push(
        stage("flow-attend", "attention", `Inside block 0's attention: the scheme's own rule gives the weights`, [attnShape(out, T)], el("p", { class: "signal-line", text: `The position signal is not in x: the scheme computes attention by its own rule. For head ${h}, ${gates ? "after its additive term on the scores (bias_0, above), " : ""}the layer-0 weights that rule gives:` }), map("lm-attend-map", out.attention[0], "probability", `Layer 0, head ${h}: the attention weights its rule gives, query by key`, "attention probability"), attentionLines("lm-attend-lines", { data: out.attention[0], T, head: h, labels, kind: "probability", caption: "" }, rows), windowNote(rows)),
      );
    return parts;
  }

  function rotation(current: LayerInput, rows: number[], h: number): HTMLElement {
    const { out, labels } = current;
    const T = out.length;
    const pairs = ([["q_0", "q_rot_0", out.first.q_0!.dims[1]], ["k_0", "k_rot_0", out.first.k_0!.dims[1]]] as const).map(([name, rotated, heads]) => {
      const D = out.first[name]!.dims[3];
      const hh = Math.min(h, heads - 1); // keys may have fewer heads (grouped queries)
      const cols = Math.min(ROT_COLS, D);
      return { name, rotated, hh, D, cols, before: block(out.first[name]!.data, D, rows, 0, cols, hh * T * D), after: block(out.first[rotated]!.data, D, rows, 0, cols, hh * T * D) };
    });
    const scale = readable(pairs.flatMap((p) => [...p.before.flat(), ...p.after.flat()]));
    const body = pairs.map((p) => {
      const words = (k: number, c: number, i: number, j: number) => explainRotation(p.name[0], k, labels[k], p.hh, c, p.before[i][j], p.after[i][j]);
      return el("div", { class: "flow-pair" }, table(`${p.name}, head ${p.hh}: before the rotation, channels 0–${p.cols - 1} of ${p.D}`, p.before, rows, 0, `lm-${p.name}`, labels, scale, words), el("span", { class: "op", "aria-hidden": "true", text: "→" }), table(`${p.rotated}, head ${p.hh}: after it`, p.after, rows, 0, `lm-${p.rotated}`, labels, scale, words));
    });
    const q = out.first.q_0!.dims;
    return stage("flow-rotation", "signal", "Inside block 0's attention: q and k rotated by their position, not added to x", [tensorLabel("q_0", ["B", "H", "T", "D"], q), tensorLabel("k_0", ["B", "H", "T", "D"], out.first.k_0!.dims)], el("p", { class: "signal-line", text: `The position signal is not in x: x makes q = x·W_q and k = x·W_k, and then each pair of channels of q and k is turned by an angle that grows with the token's position, so that q·k depends on how far apart two tokens are. Head ${h}, before (q_0, k_0) and after (q_rot_0, k_rot_0), two channel pairs:` }), ...body, legend(scale, "queries and keys"));
  }

  function attentionStage(current: LayerInput, rows: number[], h: number): HTMLElement {
    const { out, labels } = current;
    const T = out.length;
    const input = { data: out.attention[0], T, head: h, labels, kind: "probability" as const, caption: `Layer 0, head ${h}: the attention weights, query by key` };
    return stage("flow-attn", "attention", `Block 0's attention: how much each token takes from each earlier one`, [attnShape(out, T)], windowMap("flow-attn-map", input, rows, rows, "attention probability"), attentionLines("flow-attn-lines", input, rows), windowNote(rows));
  }

  function nextStage(current: LayerInput, rows: number[]): HTMLElement {
    const { out, labels, ids } = current;
    const T = out.length;
    const V = out.logits.length / T;
    const mine = ++drawn;
    const candidates = rows.map((t) => nextTokenDistribution(out.logits.subarray(t * V, (t + 1) * V), 1, 0));
    const body = el("tbody");
    const tableEl = el("table", { class: "plain flow-next", id: "flow-next" }, el("caption", { text: "After each token: the model's three most likely next tokens, and the probability it gave the text's own next token (temperature 1)" }), el("thead", {}, el("tr", {}, el("th", { scope: "col", text: "after token" }), el("th", { scope: "col", text: "most likely next" }), el("th", { scope: "col", text: "the text's next" }))), body);
    const wanted = [...new Set(candidates.flatMap((c) => c.slice(0, 3).map((x) => x.id)))];
    void current.names(wanted).then((names) => {
      if (mine !== drawn) return;
      const name = new Map(wanted.map((id, i) => [id, names[i]]));
      body.replaceChildren(...rows.map((t, i) => nextRow(t, labels, ids, candidates[i], name, T)));
      link.register("next", tableEl.closest("[data-view]") ?? tableEl);
    });
    return stage("flow-next", "next", "Next-token probabilities: a softmax over the vocabulary at every position", [tensorLabel("logits", ["B", "T", "V"], [1, T, V])], el("div", { class: "scroll" }, tableEl));
  }

  const headControl = labelled("Head", head);
  return {
    controls: [from.control, channel.control, headControl],
    root,
    reveal(k) {
      // a token chosen elsewhere (the text's tokens, the full map) is brought into the window: as its last row, so
      // that the keys it attends to are the window's other rows; a token already in the window leaves it be
      if (!input) return;
      const T = input.out.length;
      const [t0, n] = (root.dataset.rows ?? "0 0").split(" ").map(Number);
      if (k >= T || (k >= t0 && k < t0 + n)) return;
      const start = String(Math.max(0, Math.min(k - ROWS + 1, T - Math.min(ROWS, T))));
      from.input.value = from.slider.value = start;
      draw();
    },
    update(next) {
      input = next;
      const T = next.out.length;
      from.input.max = from.slider.max = String(Math.max(0, T - Math.min(ROWS, T)));
      if (head.options.length !== next.info.n_heads) head.replaceChildren(...range(0, next.info.n_heads).map((i) => el("option", { value: String(i), text: String(i) })));
      draw();
    },
  };
}

/** A token label cut to `n` characters (a phone's row labels stay narrow; the explanation line has it whole). */
const clip = (label: string, n: number) => (label.length > n ? `${label.slice(0, n - 1)}…` : label);

const ROT_COLS = 4; // two rotated channel pairs: a before and an after table side by side at 1280 px

/** The title of the added rows, as what they are for the scheme. */
function addedTitle(scheme: string): string {
  if (scheme === "learned") return "+ pos(arange(T)): row t of the learned position table, for each position t";
  if (scheme === "sinusoidal") return "+ sin and cos waves of the position (times a learned scale), one row per position";
  return `+ the ${scheme} scheme's rows, one per position`;
}

/** The broadcast, in words: the [T, C] rows have no batch dimension, so the same rows go onto every sequence. */
function broadcast(T: number, C: number): HTMLElement {
  return el("p", { class: "signal-line", text: `pos rows are [T, C] = [${T}, ${C}]: one row per position and no batch dimension. Added to token_rows [B, T, C] = [1, ${T}, ${C}], they are broadcast: the same ${T} rows go onto every sequence of the batch ([T, C] → [1, T, C]; here B = 1).` });
}

/** attn_0's shape, from its numbers: [B, H, T, T]. */
const attnShape = (out: Forward, T: number) => tensorLabel("attn_0", ["B", "H", "T", "T"], [1, out.attention[0].length / (T * T), T, T]);

/** Under a flow map: which keys its window leaves out. */
function windowNote(rows: number[]): HTMLElement | null {
  if (!rows.length || rows[0] === 0) return null;
  return el("p", { class: "hint", text: `Keys before position ${rows[0]} lie outside this window; the full map is under “Attention between tokens”.` });
}

/** One row of the next-token table: token t, its three likeliest successors, and the text's own next token. */
function nextRow(t: number, labels: string[], ids: number[], dist: { id: number; prob: number }[], name: Map<number, string>, T: number): HTMLElement {
  const actual = t + 1 < T ? ids[t + 1] : null;
  const top = dist.slice(0, 3).map((c) => el("span", { class: "flow-candidate", "data-explain": explainNext(t, labels[t], name.get(c.id) ?? "?", c.prob, c.id === actual) }, el("code", { text: name.get(c.id) ?? "?" }), ` ${sig(c.prob, 3)}`));
  const own = actual === null ? null : dist.find((c) => c.id === actual);
  const ownCell = own ? el("td", { "data-explain": explainNext(t, labels[t], labels[t + 1], own.prob, true) }, el("code", { text: labels[t + 1] }), ` ${sig(own.prob, 3)}`) : el("td", { text: "the text ends here: see “The next token”" });
  return el("tr", { "data-token": t }, el("th", { scope: "row", text: `${t} ${clip(labels[t], 10)}` }), el("td", {}, ...top), ownCell);
}

/** One step of the sum's equation ("+ ...", "="), on a line of its own. */
function op(text: string): HTMLElement {
  return el("p", { class: "op-line", text });
}

/** embedded − token_rows over every token and channel (flat). */
function diffAll(out: Forward): Float32Array {
  const a = out.first.embedded!.data;
  const b = out.first.token_rows!.data;
  return a.map((v, i) => v - b[i]);
}
