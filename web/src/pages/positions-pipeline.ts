/**
 * The Positions page's first playground: the pipeline from raw text to the model's input, step by step as
 * PyTorch writes it (text → token ids → token embeddings → positional embeddings from
 * `nn.Embedding(context_length, output_dim)` over `torch.arange(context_length)` → their sum), computed in the page.
 * The ids come from octlm's own tokenizer (the byte-level BPE the live models share, its tokenizer.json read by
 * @huggingface/tokenizers); both embedding tables are random N(0, 1), as `nn.Embedding` starts.
 */
import { randomMatrix, type Matrix } from "../math";
import { sig } from "../scale";
import { el } from "../ui";

interface Tokenizer {
  encode(text: string, options?: { add_special_tokens?: boolean }): { ids: number[] };
  decode(ids: number[]): string;
}

/** octlm's tokenizer, as the models read text: a literal "<|endoftext|>" is bytes like any other text (lm.ts does the same for the models). */
export async function loadTokenizer(url: string): Promise<{ tokenizer: Tokenizer; vocab: number }> {
  const [{ Tokenizer }, json] = await Promise.all([
    import("@huggingface/tokenizers"),
    fetch(url).then((r) => {
      if (!r.ok) throw new Error(`${url}: ${r.status}`);
      return r.json();
    }),
  ]);
  const plain = { ...json, added_tokens: [], post_processor: null };
  return { tokenizer: new Tokenizer(plain, {}) as unknown as Tokenizer, vocab: Object.keys(json.model.vocab).length };
}

type Loaded = Awaited<ReturnType<typeof loadTokenizer>>;

export interface Pipeline {
  ids: number[];
  inputs: number[][]; // [B, T]: the ids cut into rows of context_length (stride = context_length, the rest dropped)
  tokenEmbeddings: number[][][]; // [B, T, C]
  posEmbeddings: Matrix; // [T, C]: rows 0 … T − 1 of the position table, i.e. the table itself
  inputEmbeddings: number[][][]; // [B, T, C]
  leftover: number; // max |input − token − position| over every entry: the sum is the broadcast one
  allclose: boolean; // torch.allclose(input_embeddings[b] − token_embeddings[b], pos_embeddings) for every b
}

// the token table of the last width asked for: typing re-tokenizes, but the V × C random table stays as it was
let cached: { key: string; rows: Matrix } | null = null;
function table(vocab: number, dim: number): Matrix {
  const key = `${vocab}x${dim}`;
  if (cached?.key !== key) cached = { key, rows: randomMatrix(vocab, dim, 123) };
  return cached.rows;
}

/**
 * The pipeline's numbers for `ids`: at most `maxBatch` rows of `contextLength` ids, token rows from a V × C table and
 * position rows from a T × C table (both random N(0, 1), fixed seeds), and their broadcast sum.
 */
export function pipeline(ids: number[], vocab: number, contextLength: number, outputDim: number, maxBatch: number): Pipeline {
  const rows = Math.min(maxBatch, Math.floor(ids.length / contextLength));
  const inputs = Array.from({ length: rows }, (_, b) => ids.slice(b * contextLength, (b + 1) * contextLength));
  const tokenTable = table(vocab, outputDim);
  const posEmbeddings = randomMatrix(contextLength, outputDim, 456); // pos_embedding_layer(torch.arange(T))
  const tokenEmbeddings = inputs.map((row) => row.map((id) => tokenTable[id]));
  const inputEmbeddings = tokenEmbeddings.map((seq) => seq.map((r, t) => r.map((v, c) => v + posEmbeddings[t][c])));
  let leftover = 0;
  let allclose = true;
  inputEmbeddings.forEach((seq, b) =>
    seq.forEach((r, t) =>
      r.forEach((v, c) => {
        const [gap, want] = [Math.abs(v - tokenEmbeddings[b][t][c] - posEmbeddings[t][c]), posEmbeddings[t][c]];
        leftover = Math.max(leftover, gap);
        allclose &&= gap <= 1e-8 + 1e-5 * Math.abs(want); // torch.allclose's default atol and rtol
      }),
    ),
  );
  return { ids, inputs, tokenEmbeddings, posEmbeddings, inputEmbeddings, leftover, allclose };
}

// PyTorch's print options: a tensor of more than THRESHOLD numbers is summarized, each long dimension shown as its
// first and last EDGE items with "..." between
const THRESHOLD = 1000;
const EDGE = 3;

/** A tensor printed in PyTorch's layout (4 decimals, aligned, summarized past THRESHOLD numbers); integers when `ints`. */
export function torchPrint(x: number[] | number[][], ints = false): string {
  const rows = (Array.isArray(x[0]) ? x : [x]) as number[][];
  const summarize = rows.length * rows[0].length > THRESHOLD;
  const edges = <T>(xs: T[]): (T | "...")[] => (summarize && xs.length > 2 * EDGE ? [...xs.slice(0, EDGE), "...", ...xs.slice(-EDGE)] : xs);
  const num = (v: number) => (ints ? String(v) : v.toFixed(4));
  // one width for every number printed, right-aligned; the "..." of a summarized row is " ..." as PyTorch has it
  const width = Math.max(...rows.flatMap((r) => edges(r)).map((v) => (v === "..." ? 0 : num(v).length)));
  const line = (r: number[]) => `[${edges(r).map((v) => (v === "..." ? " ..." : num(v).padStart(width))).join(", ")}]`;
  if (!Array.isArray(x[0])) return `tensor(${line(x as number[])})`;
  const body = edges(rows).map((r) => (r === "..." ? "..." : line(r)));
  return `tensor([${body.join(",\n        ")}])`;
}

/** A shape as PyTorch prints it. */
export const size = (dims: number[]) => `torch.Size([${dims.join(", ")}])`;

/** One step: the code, then what it prints, then a sentence. */
export function step(id: string, code: string, printed: string, words: string | Node): HTMLElement {
  return el(
    "li",
    { id },
    // focusable: a long line scrolls sideways, by keyboard too
    el("pre", { class: "pipe-code", tabindex: 0, "aria-label": "Python" }, el("code", { text: code })),
    el("pre", { class: "pipe-out", tabindex: 0, "aria-label": "what it prints" }, el("code", { text: printed })),
    el("p", {}, words),
  );
}

/** The tokens of a text as chips, each its text (spaces as ·, line ends as ↵) over its id. */
export function chips(tokenizer: Tokenizer, ids: number[]): HTMLElement {
  const show = (s: string) => s.replace(/ /g, "·").replace(/\n/g, "↵").replace(/\t/g, "→").replace(/\r/g, "␍");
  return el("div", { class: "tokens", role: "list", "aria-label": `${ids.length} tokens` }, ...ids.map((id) => el("span", { class: "token", role: "listitem" }, el("span", { class: "token-text", text: show(tokenizer.decode([id])) }), el("span", { class: "token-id", text: String(id) }))));
}

/**
 * The playground's steps for `text` at context_length `T` and output_dim `C`: each step's code, what it prints, and
 * a sentence; too few ids for one row of the batch stops after the ids, saying so.
 */
export function pipelineSteps({ tokenizer, vocab }: Loaded, text: string, batch: number, T: number, C: number): HTMLElement[] {
  const ids = Array.from(tokenizer.encode(text, { add_special_tokens: false }).ids);
  const p = pipeline(ids, vocab, T, C, batch);
  const B = p.inputs.length;
  const steps = [step("pipe-ids", "ids = tokenizer.encode(text)\nprint(len(ids))", String(ids.length), chips(tokenizer, ids))];
  if (B === 0) return [...steps, el("li", { class: "missing", id: "pipe-short", text: `One row needs context_length = ${T} ids and the text has ${ids.length}: type more, or lower context_length.` })];
  const rest = ids.length - B * T;
  return [
    ...steps,
    step(
      "pipe-inputs",
      `batch_size, context_length = ${batch}, ${T}\nn = min(batch_size, len(ids) // context_length) * context_length\ninputs = torch.tensor(ids[:n]).view(-1, context_length)\nprint(inputs.shape)\nprint(inputs)`,
      `${size([B, T])}\n${torchPrint(p.inputs, true)}`,
      `The ids cut into rows of ${T}: one row per sequence of the batch, ${B} of them${B < batch ? ` (${ids.length} ids make ${B} full rows, not ${batch})` : ""}${rest > 0 ? `; the last ${rest} ids wait for the next batch` : ""}.`,
    ),
    step(
      "pipe-tokens",
      `vocab_size, output_dim = ${vocab}, ${C}\ntoken_embedding_layer = torch.nn.Embedding(vocab_size, output_dim)\ntoken_embeddings = token_embedding_layer(inputs)\nprint(token_embeddings.shape)`,
      size([B, T, C]),
      `A table of ${vocab} rows (one per token of the vocabulary) and ${C} columns; each id is replaced by its row, so every id becomes a vector of ${C} numbers.`,
    ),
    step(
      "pipe-positions",
      "pos_embedding_layer = torch.nn.Embedding(context_length, output_dim)\npos_embeddings = pos_embedding_layer(torch.arange(context_length))\nprint(torch.arange(context_length))\nprint(pos_embeddings.shape)\nprint(pos_embeddings)",
      `${torchPrint(Array.from({ length: T }, (_, t) => t), true)}\n${size([T, C])}\n${torchPrint(p.posEmbeddings)}`,
      `A second table, with one row per position: ${T} rows of ${C}. torch.arange(${T}) asks for rows 0 to ${T - 1} in order, so pos_embeddings is the whole table, row t for position t. Nothing in it depends on the text.`,
    ),
    step(
      "pipe-sum",
      "input_embeddings = token_embeddings + pos_embeddings\nprint(input_embeddings.shape)\nprint(all(torch.allclose(x - e, pos_embeddings) for x, e in zip(input_embeddings, token_embeddings)))",
      `${size([B, T, C])}\n${p.allclose ? "True" : "False"}`,
      `The [${T}, ${C}] table is added to each of the ${B} sequences (broadcasting, drawn on the shapes page), so the sum keeps the token shape, and taking the token rows away from any sequence leaves the position table (the largest leftover over all ${B * T * C} numbers is ${sig(p.leftover, 2)}, rounding only).`,
    ),
  ];
}
