/**
 * The Models page's engine: the shipped models (public/models/, made by scripts/site-models) run in
 * onnxruntime-web's WebAssembly backend, and their tokenizer.json read by @huggingface/tokenizers.
 *
 * Nothing large is fetched until the page asks: the tokenizer (about 60 kB) on first use, the engine (its .wasm,
 * ENGINE_BYTES, measured when the site is built) and each model.onnx only through `load`, which streams them with
 * a progress callback and keeps them for the rest of the session. The .wasm is bundled by Vite from node_modules
 * (the `?url` import) and served by this site: nothing is fetched from elsewhere.
 */
import type { InferenceSession } from "onnxruntime-web";
import engineBytes from "octlm-bytes:onnxruntime-web/ort-wasm-simd-threaded.wasm";
import { promptTokenizerJson } from "./lm";

const BASE = import.meta.env.BASE_URL;

/** The engine's WebAssembly file in bytes, as built into this site. */
export const ENGINE_BYTES: number = engineBytes;

export interface ModelEntry {
  steps: number;
  batch_size: number;
  context_length: number;
  tokens_seen: number;
  val_bpb: number;
  max_length: number;
  train_seconds: number;
  files: Record<string, number>;
}

export interface Manifest {
  schema: number;
  corpus: string;
  models: Record<string, ModelEntry>;
  total_bytes: number;
}

/**
 * How a scheme's position signal enters the model: model.json's "signal", written by `octlm export onnx`. Rows added to
 * the token rows; a rotation of q and k; a term added to the scores; an attention rule of its own; nothing.
 */
export type Signal = "embed" | "rotate" | "bias" | "attend" | "none";

export interface ModelInfo {
  scheme: string;
  context_length: number; // the longest input the graph takes
  train_length: number; // the length it was trained at
  vocab_size: number;
  n_layers: number;
  n_heads: number;
  d_model: number;
  eot_id: number;
  // an export with the first layer's outputs lists them in order; older ones map logits and attn_* to their dims
  outputs: string[] | Record<string, string[]>;
  signal?: Signal;
  files: Record<string, number>;
}

/** The outputs of the graph that show the first layer; an export without them needs `octlm export onnx` again. */
export const FIRST_LAYER = ["token_rows", "embedded", "q_0", "k_0", "q_rot_0", "k_rot_0", "bias_0"] as const;
export type FirstLayerName = (typeof FIRST_LAYER)[number];

export const outputNames = (info: ModelInfo): string[] => (Array.isArray(info.outputs) ? info.outputs : Object.keys(info.outputs ?? {}));
export const hasFirstLayer = (info: ModelInfo): boolean => info.signal !== undefined && FIRST_LAYER.every((n) => outputNames(info).includes(n));

export interface Forward {
  logits: Float32Array; // [T, V], row t predicts token t + 1
  attention: Float32Array[]; // one per layer, [H, T, T]
  length: number;
  first: Partial<Record<FirstLayerName, { data: Float32Array; dims: readonly number[] }>>; // present when exported
}

export interface Encoded {
  ids: number[];
  tokens: string[];
}

async function json<T>(path: string): Promise<T> {
  const response = await fetch(`${BASE}${path}`);
  if (!response.ok) throw new Error(`${path}: ${response.status}; run scripts/site-models and rebuild`);
  return response.json() as Promise<T>;
}

export const loadManifest = () => json<Manifest>("models/manifest.json");

const infos = new Map<string, Promise<ModelInfo>>();
/** A model's model.json (about 1 kB): its sizes and outputs, read before anything large is fetched. */
export function modelInfo(scheme: string): Promise<ModelInfo> {
  let info = infos.get(scheme);
  if (!info) {
    info = json<ModelInfo>(`models/${scheme}/model.json`);
    info.catch(() => infos.delete(scheme));
    infos.set(scheme, info);
  }
  return info;
}

export type Progress = (received: number, total: number) => void;

/**
 * The bytes at `url`, read as a stream so that `progress` hears every chunk: received so far and the total,
 * `expected` (the file's size, which the page stated before asking), else the response's Content-Length. (A
 * compressed response's Content-Length counts compressed bytes, but the stream yields the file's own.)
 */
export async function fetchBytes(url: string, expected: number, progress: Progress): Promise<Uint8Array> {
  const response = await fetch(url);
  if (!response.ok || !response.body) throw new Error(`${url}: ${response.status}`);
  const total = expected || Number(response.headers.get("Content-Length")) || 0;
  const reader = response.body.getReader();
  const chunks: Uint8Array[] = [];
  let received = 0;
  progress(0, total);
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    chunks.push(value);
    received += value.length;
    progress(received, Math.max(total, received));
  }
  const bytes = new Uint8Array(received);
  let at = 0;
  for (const c of chunks) {
    bytes.set(c, at);
    at += c.length;
  }
  return bytes;
}

type Ort = typeof import("onnxruntime-web");
let ortPromise: Promise<Ort> | null = null;

export const engineLoaded = () => ortPromise !== null;

/**
 * onnxruntime-web's WASM build, given the .wasm this site serves as bytes the page fetched itself (so that the
 * download has a progress bar); one thread (the site is not cross-origin isolated).
 */
export function engine(progress: Progress = () => undefined): Promise<Ort> {
  ortPromise ??= (async () => {
    const [lib, wasm] = await Promise.all([import("onnxruntime-web/wasm"), import("onnxruntime-web/ort-wasm-simd-threaded.wasm?url")]);
    lib.env.wasm.wasmBinary = await fetchBytes(new URL(wasm.default, location.href).href, ENGINE_BYTES, progress);
    lib.env.wasm.numThreads = 1;
    lib.env.wasm.proxy = false;
    lib.env.logLevel = "error";
    return lib as unknown as Ort;
  })();
  ortPromise.catch(() => (ortPromise = null)); // a failed download may be retried
  return ortPromise;
}

interface Tok {
  encode(text: string, options?: { add_special_tokens?: boolean }): { ids: number[]; tokens: string[] };
}
let tokenizerPromise: Promise<{ tok: Tok; vocab: Map<number, string> }> | null = null;

/**
 * The tokenizer every shipped model shares (scripts/site-models checks that they do), read from `scheme`'s folder,
 * made to encode as `octlm generate` does (`promptTokenizerJson`): EOT first, then the text, a literal
 * "<|endoftext|>" in the text tokenised byte by byte like any other. Also its vocabulary, id to token.
 */
function tokenizer(scheme: string) {
  tokenizerPromise ??= (async () => {
    const [{ Tokenizer }, file] = await Promise.all([import("@huggingface/tokenizers"), json<{ model: { vocab: Record<string, number> }; added_tokens: unknown[]; post_processor: unknown }>(`models/${scheme}/tokenizer.json`)]);
    const tok = new Tokenizer(promptTokenizerJson(file), {}) as unknown as Tok;
    return { tok, vocab: new Map(Object.entries(file.model.vocab).map(([t, i]) => [i, t])) };
  })();
  tokenizerPromise.catch(() => (tokenizerPromise = null));
  return tokenizerPromise;
}

/** The ids the models read for `text`: EOT, then the text's tokens (octlm.generation.generate.encode_prompt). */
export async function encode(scheme: string, text: string): Promise<Encoded> {
  const { ids, tokens } = (await tokenizer(scheme)).tok.encode(text, { add_special_tokens: true });
  return { ids: Array.from(ids), tokens: Array.from(tokens) };
}

/** The byte-level token string of an id (for display; "?" if the vocabulary has none). */
export const tokenOf = async (scheme: string, id: number): Promise<string> => (await tokenizer(scheme)).vocab.get(id) ?? "?";

interface Loaded {
  session: InferenceSession;
  info: ModelInfo;
}
const models = new Map<string, Promise<Loaded>>();
const ready = new Set<string>(); // the models whose session exists

export const isLoaded = (scheme: string) => ready.has(scheme);
/** Where a model stands in this session: fetched and ready, on its way, or not asked for. */
export const loadState = (scheme: string) => (ready.has(scheme) ? "loaded" : models.has(scheme) ? "loading" : "not loaded");

export interface LoadProgress {
  engine: Progress;
  model: Progress;
}

/** The engine (once) and `scheme`'s model.onnx (once per session), each with its own progress callback. */
export function load(scheme: string, progress: Partial<LoadProgress> = {}): Promise<Loaded> {
  let model = models.get(scheme);
  if (!model) {
    model = (async () => {
      const lib = await engine(progress.engine);
      const info = await modelInfo(scheme);
      const bytes = await fetchBytes(`${BASE}models/${scheme}/model.onnx`, info.files["model.onnx"], progress.model ?? (() => undefined));
      const session = await lib.InferenceSession.create(bytes, { executionProviders: ["wasm"], graphOptimizationLevel: "all" });
      ready.add(scheme);
      return { session, info };
    })();
    model.catch(() => models.delete(scheme)); // a failed download may be retried
    models.set(scheme, model);
  }
  return model;
}

// One run at a time: the WASM backend has one thread, and queued runs keep their order.
let queue: Promise<unknown> = Promise.resolve();

/** The model's logits, attention and (when exported) first-layer outputs for `ids`, at most its context length. */
export function forward(scheme: string, ids: number[]): Promise<Forward> {
  const job = queue.then(async () => {
    const [{ session, info }, lib] = await Promise.all([load(scheme), engine()]);
    if (ids.length < 1 || ids.length > info.context_length) throw new Error(`${ids.length} tokens: the ${scheme} model takes 1 to ${info.context_length}`);
    const input = new lib.Tensor("int64", BigInt64Array.from(ids, (i) => BigInt(i)), [1, ids.length]);
    const out = await session.run({ ids: input });
    const attention = Array.from({ length: info.n_layers }, (_, l) => out[`attn_${l}`].data as Float32Array);
    const first: Forward["first"] = {};
    for (const name of FIRST_LAYER) if (name in out) first[name] = { data: out[name].data as Float32Array, dims: out[name].dims };
    return { logits: out.logits.data as Float32Array, attention, length: ids.length, first };
  });
  queue = job.catch(() => undefined);
  return job;
}
