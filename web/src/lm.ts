/**
 * The language-model arithmetic of the Models page, with no DOM and no engine so that vitest checks it exactly:
 * log-softmax, next-token probabilities under temperature and top-k, sampling from them, bits per token along a
 * text, and the bytes behind a byte-level BPE token (for display only: tokenising is @huggingface/tokenizers').
 */

/** log softmax of one row of logits, in float64: x − max − log Σ exp(x − max). */
export function logSoftmax(row: ArrayLike<number>): Float64Array {
  let max = -Infinity;
  for (let i = 0; i < row.length; i++) if (row[i] > max) max = row[i];
  let sum = 0;
  for (let i = 0; i < row.length; i++) sum += Math.exp(row[i] - max);
  const lse = max + Math.log(sum);
  const out = new Float64Array(row.length);
  for (let i = 0; i < row.length; i++) out[i] = row[i] - lse;
  return out;
}

export interface Candidate {
  id: number;
  prob: number;
}

/**
 * The next-token distribution sampling draws from: keep the `topK` largest logits (ties: the lower id first;
 * `topK` ≤ 0 or ≥ V keeps all), divide them by `temperature` and softmax. Temperature 0 is greedy: the largest
 * logit gets probability 1. Returned most probable first; ids outside the top k have probability 0 and are left out.
 */
export function nextTokenDistribution(logits: ArrayLike<number>, temperature: number, topK: number): Candidate[] {
  if (!(temperature >= 0)) throw new Error(`temperature ${temperature} must be 0 or more`);
  const order = Array.from({ length: logits.length }, (_, i) => i).sort((a, b) => logits[b] - logits[a] || a - b);
  const k = topK > 0 ? Math.min(topK, logits.length) : logits.length;
  const kept = order.slice(0, k);
  if (temperature === 0) return [{ id: kept[0], prob: 1 }];
  const scaled = kept.map((i) => logits[i] / temperature);
  const logp = logSoftmax(scaled);
  return kept.map((id, j) => ({ id, prob: Math.exp(logp[j]) }));
}

/** The candidate that a uniform draw `u` in [0, 1) selects: the first whose cumulative probability exceeds u. */
export function sampleFrom(candidates: Candidate[], u: number): number {
  let cumulative = 0;
  for (const c of candidates) {
    cumulative += c.prob;
    if (u < cumulative) return c.id;
  }
  return candidates[candidates.length - 1].id; // u within rounding of 1
}

/** The seeded generator the sampler draws from: math.ts's mulberry32, so a seed gives the same samples. */
export { rng as mulberry32 } from "./math";

/**
 * Bits per token along a text: for logits `[T, V]` (row-major, row t predicts token t + 1) and the text's ids
 * `[T]`, entry t − 1 is −log₂ p(ids[t] | ids[0..t−1]) for t = 1 … T − 1. The first token has no prediction.
 */
export function bitsPerToken(logits: ArrayLike<number>, ids: number[], vocab: number): number[] {
  if (logits.length !== ids.length * vocab) throw new Error(`logits hold ${logits.length} numbers, not ${ids.length} × ${vocab}`);
  const bits: number[] = [];
  for (let t = 1; t < ids.length; t++) {
    const row = Array.prototype.slice.call(logits, (t - 1) * vocab, t * vocab) as number[];
    bits.push(-logSoftmax(row)[ids[t]] / Math.LN2);
  }
  return bits;
}

/** Trailing mean over `window` values (fewer at the start): a readable line through noisy per-token bits. */
export function movingMean(values: number[], window: number): number[] {
  const w = Math.max(1, Math.floor(window));
  let sum = 0;
  return values.map((v, i) => {
    sum += v;
    if (i >= w) sum -= values[i - w];
    return sum / Math.min(i + 1, w);
  });
}

/** Mean of values[from .. to − 1]; NaN for an empty range. */
export function meanOf(values: number[], from = 0, to = values.length): number {
  const part = values.slice(Math.max(0, from), Math.min(values.length, to));
  return part.length ? part.reduce((a, b) => a + b, 0) / part.length : NaN;
}

// GPT-2's byte-level alphabet: each byte is one printable character (printable bytes stand for themselves, the
// rest are shifted to 256 + n). octlm/data/tokenizer.py's byte_of_char is the same table.
let BYTE_OF: Map<string, number> | null = null;
export function byteOfChar(): Map<string, number> {
  if (BYTE_OF) return BYTE_OF;
  const printable = (b: number) => (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
  const map = new Map<string, number>();
  let n = 0;
  for (let b = 0; b < 256; b++) map.set(String.fromCodePoint(printable(b) ? b : 256 + n++), b);
  BYTE_OF = map;
  return map;
}

/** The token octlm puts before every text: training streams put it before each document, so it marks a start. */
export const EOT = "<|endoftext|>";

// tokenizer.json's parts this page reads or writes (the file is tokenizers' own format).
interface TokenizerJson {
  model: { vocab: Record<string, number> };
  added_tokens: unknown[];
  post_processor: unknown;
  [key: string]: unknown;
}

/**
 * The tokenizer.json the page encodes with: octlm's, with the post-processor octlm's exports carry
 * (octlm/interop/hf.py, prompt_tokenizer), which puts EOT before the text as `octlm generate` does, and without
 * its added-token entry. octlm encodes a literal "<|endoftext|>" in a text as plain text, byte by byte;
 * @huggingface/tokenizers would match it as the special token, so the entry goes (the vocabulary keeps EOT's id).
 * Encode with `add_special_tokens: true` to get EOT first, `false` for the text's ids alone.
 */
export function promptTokenizerJson<T extends TokenizerJson>(json: T): T {
  const id = json.model.vocab[EOT];
  if (id === undefined) throw new Error(`tokenizer.json has no ${EOT} token`);
  const special = { SpecialToken: { id: EOT, type_id: 0 } };
  const template = {
    type: "TemplateProcessing",
    single: [special, { Sequence: { id: "A", type_id: 0 } }],
    pair: [special, { Sequence: { id: "A", type_id: 0 } }, { SpecialToken: { id: EOT, type_id: 1 } }, { Sequence: { id: "B", type_id: 1 } }],
    special_tokens: { [EOT]: { id: EOT, ids: [id], tokens: [EOT] } },
  };
  return { ...json, added_tokens: [], post_processor: template };
}

/** The bytes a byte-level token string stands for (a token not in the alphabet, e.g. `<|endoftext|>`, as UTF-8). */
export function tokenBytes(token: string): Uint8Array {
  const map = byteOfChar();
  const chars = [...token];
  if (!chars.every((c) => map.has(c))) return new TextEncoder().encode(token);
  return Uint8Array.from(chars.map((c) => map.get(c)!));
}

/**
 * A token's bytes as a learner can read them: whitespace made visible (space ·, tab →, CR ␍, LF ↵), and bytes that
 * are not a whole UTF-8 character on their own (part of an emoji, say) as hex, e.g. `F0 9F`.
 */
export function showBytes(bytes: Uint8Array): string {
  let text: string;
  try {
    text = new TextDecoder("utf-8", { fatal: true }).decode(bytes);
  } catch {
    return [...bytes].map((b) => b.toString(16).toUpperCase().padStart(2, "0")).join(" ");
  }
  return text.replace(/ /g, "·").replace(/\t/g, "→").replace(/\r/g, "␍").replace(/\n/g, "↵");
}

// ---------------------------------------------------------------------------------------------------------
// Reading the first layer's outputs for display. Each function only slices or subtracts what the graph returned;
// none recomputes a position formula.

/** Megabytes with 3 significant digits, as the page states download sizes: 2374532 → "2.37 MB". */
export function megabytes(bytes: number): string {
  const mb = bytes / 1e6;
  return `${mb >= 100 ? mb.toFixed(0) : mb.toPrecision(3)} MB`;
}

/** A download's progress in words, both numbers in MB to one decimal place: "1.2 of 2.3 MB". */
export function progressText(received: number, total: number): string {
  return `${(received / 1e6).toFixed(1)} of ${(total / 1e6).toFixed(1)} MB`;
}

/** The kind of position signal a scheme's hooks give (schemes.json's `hooks`), as model.json's "signal" spells it. */
export function signalOfHooks(hooks: string[]): "embed" | "rotate" | "bias" | "attend" | "none" {
  if (hooks.includes("attend")) return "attend";
  if (hooks.includes("embed")) return "embed";
  if (hooks.includes("rotate")) return "rotate";
  if (hooks.includes("bias") || hooks.includes("contextual_bias")) return "bias";
  return "none";
}

/**
 * Rows `rows` and columns [c0, c1) of a row-major `[..., R, C]` block that starts at `offset` (e.g. one head of
 * `[H, T, D]` at `h × T × D`): a small matrix for a table. Out-of-range columns are dropped.
 */
export function block(data: ArrayLike<number>, C: number, rows: number[], c0: number, c1: number, offset = 0): number[][] {
  const hi = Math.min(c1, C);
  return rows.map((r) => Array.from({ length: Math.max(0, hi - c0) }, (_, j) => data[offset + r * C + c0 + j]));
}

/** a − b, entry by entry (the position signal: embedded − token_rows). */
export function difference(a: number[][], b: number[][]): number[][] {
  return a.map((row, i) => row.map((v, j) => v - b[i][j]));
}

/** Largest |entry| of a flat array: how far from zero a signal is (0 for NoPE's embedded − token_rows). */
export function largestMagnitude(values: ArrayLike<number>): number {
  let m = 0;
  for (let i = 0; i < values.length; i++) m = Math.max(m, Math.abs(values[i]));
  return m;
}

/**
 * The window of one head's `[H, T, T]` map (attention, or a bias): queries `qs`, keys `ks`, with each cell's
 * value and whether it lies in the future (key after query), which the causal mask removes.
 */
export function headWindow(data: ArrayLike<number>, T: number, head: number, qs: number[], ks: number[]): { value: number; masked: boolean }[][] {
  return qs.map((q) => ks.map((k) => ({ value: data[(head * T + q) * T + k], masked: k > q })));
}

/** The integers from .. to − 1 (a window of positions). */
export const range = (from: number, to: number): number[] => Array.from({ length: Math.max(0, to - from) }, (_, i) => from + i);
