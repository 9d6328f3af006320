/**
 * The Models page's engine: the shipped models (public/models/, made by scripts/site-models) run in
 * onnxruntime-web's WebAssembly backend, and their tokenizer.json read by @huggingface/tokenizers. Both libraries
 * are imported only when first needed, and each model is fetched only when first run. The .wasm file is bundled
 * by Vite from node_modules (the `?url` import) and served by this site: nothing is fetched from elsewhere.
 */
import type { InferenceSession } from "onnxruntime-web";
import { promptTokenizerJson } from "./lm";

const BASE = import.meta.env.BASE_URL;

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

export interface ModelInfo {
  scheme: string;
  context_length: number;
  train_length: number;
  vocab_size: number;
  n_layers: number;
  n_heads: number;
  files: Record<string, number>;
}

export interface Forward {
  logits: Float32Array; // [T, V], row t predicts token t + 1
  attention: Float32Array[]; // one per layer, [H, T, T]
  length: number;
}

export interface Encoded {
  ids: number[];
  tokens: string[];
}

export async function loadManifest(): Promise<Manifest> {
  const response = await fetch(`${BASE}models/manifest.json`);
  if (!response.ok) throw new Error(`models/manifest.json: ${response.status}; run scripts/site-models and rebuild`);
  return response.json();
}

type Ort = typeof import("onnxruntime-web");
let ortPromise: Promise<Ort> | null = null;

/** onnxruntime-web's WASM build, pointed at the .wasm this site serves; one thread (no cross-origin isolation). */
function ort(): Promise<Ort> {
  ortPromise ??= (async () => {
    const [lib, wasm] = await Promise.all([import("onnxruntime-web/wasm"), import("onnxruntime-web/ort-wasm-simd-threaded.wasm?url")]);
    lib.env.wasm.wasmPaths = { wasm: new URL(wasm.default, location.href).href };
    lib.env.wasm.numThreads = 1;
    lib.env.wasm.proxy = false;
    lib.env.logLevel = "error";
    return lib as unknown as Ort;
  })();
  return ortPromise;
}

interface Tok {
  encode(text: string, options?: { add_special_tokens?: boolean }): { ids: number[]; tokens: string[] };
}
let tokenizerPromise: Promise<Tok> | null = null;

/**
 * The tokenizer every shipped model shares (scripts/site-models checks that they do), read from `scheme`'s folder,
 * made to encode as `octlm generate` does (`promptTokenizerJson`): EOT first, then the text, a literal
 * "<|endoftext|>" in the text tokenised byte by byte like any other.
 */
export function tokenizer(scheme: string): Promise<Tok> {
  tokenizerPromise ??= (async () => {
    const [{ Tokenizer }, json] = await Promise.all([
      import("@huggingface/tokenizers"),
      fetch(`${BASE}models/${scheme}/tokenizer.json`).then((r) => {
        if (!r.ok) throw new Error(`models/${scheme}/tokenizer.json: ${r.status}`);
        return r.json();
      }),
    ]);
    return new Tokenizer(promptTokenizerJson(json), {}) as unknown as Tok;
  })();
  return tokenizerPromise;
}

/** The ids the models read for `text`: EOT, then the text's tokens (octlm.generation.generate.encode_prompt). */
export async function encode(scheme: string, text: string): Promise<Encoded> {
  const { ids, tokens } = (await tokenizer(scheme)).encode(text, { add_special_tokens: true });
  return { ids: Array.from(ids), tokens: Array.from(tokens) };
}

interface Loaded {
  session: InferenceSession;
  info: ModelInfo;
}
const models = new Map<string, Promise<Loaded>>();

export const isLoaded = (scheme: string) => models.has(scheme);

export function load(scheme: string): Promise<Loaded> {
  let model = models.get(scheme);
  if (!model) {
    model = (async () => {
      const lib = await ort();
      const [info, bytes] = await Promise.all([
        fetch(`${BASE}models/${scheme}/model.json`).then((r) => r.json() as Promise<ModelInfo>),
        fetch(`${BASE}models/${scheme}/model.onnx`).then(async (r) => {
          if (!r.ok) throw new Error(`models/${scheme}/model.onnx: ${r.status}`);
          return new Uint8Array(await r.arrayBuffer());
        }),
      ]);
      const session = await lib.InferenceSession.create(bytes, { executionProviders: ["wasm"], graphOptimizationLevel: "all" });
      return { session, info };
    })();
    model.catch(() => models.delete(scheme)); // a failed download may be retried
    models.set(scheme, model);
  }
  return model;
}

// One run at a time: the WASM backend has one thread, and queued runs keep their order.
let queue: Promise<unknown> = Promise.resolve();

/** The model's logits and attention for `ids` (at most its context length, which the caller ensures). */
export function forward(scheme: string, ids: number[]): Promise<Forward> {
  const job = queue.then(async () => {
    const [{ session, info }, lib] = await Promise.all([load(scheme), ort()]);
    if (ids.length < 1 || ids.length > info.context_length) throw new Error(`${ids.length} tokens: the ${scheme} model takes 1 to ${info.context_length}`);
    const input = new lib.Tensor("int64", BigInt64Array.from(ids, (i) => BigInt(i)), [1, ids.length]);
    const out = await session.run({ ids: input });
    const attention = Array.from({ length: info.n_layers }, (_, l) => out[`attn_${l}`].data as Float32Array);
    return { logits: out.logits.data as Float32Array, attention, length: ids.length };
  });
  queue = job.catch(() => undefined);
  return job;
}

export const info = async (scheme: string) => (await load(scheme)).info;
