/**
 * The Models page's first layer: the seed's constructor in PyTorch with the chosen model's sizes, and the numbers
 * the model's own graph returns for the user's text — each token's row of the token table (`token_rows`), the
 * scheme's position signal (rows added: embedded − token_rows; a rotation: q and k of a head before and after;
 * a bias: layer 0's additive term; or what the scheme does instead), and the sum entering block 0 (`embedded`).
 * Every number is sliced from the graph's outputs (src/lm.ts), never recomputed here.
 */
import type { Forward, ModelInfo, Signal } from "../engine";
import { block, difference, largestMagnitude, range } from "../lm";
import type { SchemeInfo } from "../schemes";
import { divergingFor, type Scale } from "../scale";
import { el, fmt, labelled, legend, numberSlider, numberTable, select } from "../ui";
import { tokenMap } from "./models-attention";

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
export const SHOWN = `${ROWS} tokens and ${COLS} channels at a time`;

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
}

/** The three (or more) tables and maps of the first layer, with their window controls. */
export function layerView(): { controls: HTMLElement[]; root: HTMLElement; update(input: LayerInput): void } {
  const root = el("div", { class: "layer" });
  const from = numberSlider("lm-layer-from", "Tokens from position", 0, 0, 0, () => draw());
  const channel = numberSlider("lm-layer-channel", "Channels from", 0, 0, 0, () => draw(), { step: COLS });
  const head = select("lm-layer-head", [["0", "0"]], "0");
  head.addEventListener("change", () => draw());
  const biasMap = tokenMap("lm-bias-map", "layer 0 position bias");
  const attendMap = tokenMap("lm-attend-map", "attention probability");
  let input: LayerInput | null = null;

  function table(caption: string, data: number[][], rows: number[], c0: number, id: string, labels: string[], scale: Scale): HTMLElement {
    const t = numberTable(data, { caption, rowLabels: rows.map((r) => `${r} ${labels[r]}`), colLabels: range(c0, c0 + (data[0]?.length ?? 0)).map(String), scale, digits: 3, corner: "token \\ channel" });
    t.id = id;
    return el("div", { class: "scroll" }, t);
  }

  function draw(): void {
    if (!input) return;
    const { out, info, signal, labels } = input;
    const T = out.length;
    const C = info.d_model;
    const t0 = Math.max(0, Math.min(Number(from.input.value) || 0, T - Math.min(ROWS, T)));
    const rows = range(t0, Math.min(T, t0 + ROWS));
    const c0 = Math.max(0, Math.min(Number(channel.input.value) || 0, C - COLS));
    const tokenRows = block(out.first.token_rows!.data, C, rows, c0, c0 + COLS);
    const embedded = block(out.first.embedded!.data, C, rows, c0, c0 + COLS);
    const added = signal === "embed" ? difference(embedded, tokenRows) : null;
    // one scale for the three tables, so that a colour is one number in each (the key below them says which)
    const scale = readable([...tokenRows.flat(), ...embedded.flat(), ...(added?.flat() ?? [])]);
    const channels = `channels ${c0}–${c0 + (tokenRows[0]?.length ?? 0) - 1} of ${C}`;
    const parts: HTMLElement[] = [table(`tok(ids): the token table's rows (token_rows), ${channels}`, tokenRows, rows, c0, "lm-token-rows", labels, scale)];
    const largest = fmt(largestMagnitude(diffAll(out)), 3);
    if (added) parts.push(op("+ the position signal, embedded − token_rows:"), table(`The position rows added (embedded − token_rows), ${channels}`, added, rows, c0, "lm-signal", labels, scale));
    else parts.push(op(`+ nothing: x = tok(ids) (largest |embedded − token_rows| = ${largest})`));
    parts.push(op("="), table(`x: the sum entering block 0 (embedded), ${channels}`, embedded, rows, c0, "lm-embedded", labels, scale), legend(scale, added ? "token rows, position signal and sum" : "token rows and sum"));
    // a scheme that adds nothing to x puts its position signal inside attention: shown after the sum, not in it
    if (!added) parts.push(...signalParts(input, rows));
    root.replaceChildren(...parts);
    root.dataset.signal = signal;
    root.dataset.rows = `${t0} ${rows.length}`;
    root.dataset.channels = `${c0} ${COLS}`;
  }

  function signalParts(current: LayerInput, rows: number[]): HTMLElement[] {
    const { out, signal, labels } = current;
    const T = out.length;
    const h = Number(head.value);
    if (signal === "rotate") return rotation(current, rows, h);
    const words = el("p", { class: "signal-line" });
    const parts: HTMLElement[] = [words];
    const gates = signal === "attend" && largestMagnitude(out.first.bias_0!.data) > 0; // FoX's summed log forget gates
    if (signal === "bias" || gates) {
      biasMap.update({ data: out.first.bias_0!.data, T, head: h, labels, kind: "bias", caption: `Layer 0, head ${h}: the position term added to the scores (bias_0), query by key` });
      parts.push(biasMap.root);
    }
    if (signal === "attend") {
      attendMap.update({ data: out.attention[0], T, head: h, labels, kind: "probability", caption: `Layer 0, head ${h}: the attention weights its rule gives, query by key` });
      parts.push(attendMap.root);
    }
    words.textContent =
      signal === "bias"
        ? `The position signal is not in x: it is added to layer 0's attention scores, query by key, before the softmax. For head ${h}:`
        : signal === "attend"
          ? `The position signal is not in x: the scheme computes attention by its own rule. For head ${h}, ${gates ? "its additive term on the scores (bias_0), then " : ""}the layer-0 weights that rule gives:`
          : "NoPE has no position signal anywhere: the causal mask alone tells the model about order.";
    return parts;
  }

  function rotation(current: LayerInput, rows: number[], h: number): HTMLElement[] {
    const { out, labels } = current;
    const T = out.length;
    const parts: HTMLElement[] = [el("p", { class: "signal-line", text: `The position signal is not in x: it rotates layer 0's queries and keys. Head ${h}, before (q_0, k_0) and after (q_rot_0, k_rot_0):` })];
    const pairs = ([["q_0", "q_rot_0", out.first.q_0!.dims[1]], ["k_0", "k_rot_0", out.first.k_0!.dims[1]]] as const).map(([name, rotated, heads]) => {
      const D = out.first[name]!.dims[3];
      const hh = Math.min(h, heads - 1); // keys may have fewer heads (grouped queries)
      const cols = Math.min(COLS, D);
      return { name, rotated, hh, D, cols, before: block(out.first[name]!.data, D, rows, 0, cols, hh * T * D), after: block(out.first[rotated]!.data, D, rows, 0, cols, hh * T * D) };
    });
    const scale = readable(pairs.flatMap((p) => [...p.before.flat(), ...p.after.flat()]));
    for (const p of pairs)
      parts.push(table(`${p.name}, head ${p.hh}: before the rotation, channels 0–${p.cols - 1} of ${p.D}`, p.before, rows, 0, `lm-${p.name}`, labels, scale), table(`${p.rotated}, head ${p.hh}: after it`, p.after, rows, 0, `lm-${p.rotated}`, labels, scale));
    parts.push(legend(scale, "queries and keys"));
    return parts;
  }

  const headControl = labelled("Head", head);
  return {
    controls: [from.control, channel.control, headControl],
    root,
    update(next) {
      input = next;
      headControl.hidden = next.signal === "embed" || next.signal === "none"; // no head to choose: rows are per token
      const T = next.out.length;
      from.input.max = from.slider.max = String(Math.max(0, T - Math.min(ROWS, T)));
      channel.input.max = channel.slider.max = String(Math.max(0, next.info.d_model - COLS));
      if (head.options.length !== next.info.n_heads) head.replaceChildren(...range(0, next.info.n_heads).map((i) => el("option", { value: String(i), text: String(i) })));
      draw();
    },
  };
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
