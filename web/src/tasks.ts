/**
 * Two tasks of octlm's task battery in the browser: their examples, spelled exactly as
 * octlm/experiments/tasks.py spells them, and greedy decoding of the answer by the exported task models
 * (public/task-models/, made by scripts/site-task-models) in onnxruntime-web.
 *
 * Every example is `<bos>`, the prompt, `<sep>`, then the answer and `<eos>`; a model reads the tokens through
 * `<sep>` and writes the rest.
 * - copy: `x1 .. xn <sep> x1 .. xn`, the items letters a to p.
 * - passkey: n characters of Mohtashami & Jaggi's digit-free filler with their needle
 *   " The pass key is KKKKK. Remember it. KKKKK is the pass key. " after round(depth × n) of them (a half rounds
 *   up), then `<sep>` and the five digits. Every printable ASCII character is one token.
 * web/tests/unit/tasks.test.ts checks both against examples the Python generators drew
 * (web/fixtures/task_examples.json, `octlm export fixtures`).
 */
import type { Progress } from "./engine";

// The engine (onnxruntime-web) only when a model runs: the examples above need none of it, and unit tests run
// them in Node, where the engine's build-time size import has no meaning.
const runtime = () => import("./engine");

export const SPECIALS = ["<pad>", "<bos>", "<sep>", "<eos>"] as const;
export const [PAD, BOS, SEP, EOS] = [0, 1, 2, 3];
export const COPY_SYMBOLS = Array.from({ length: 16 }, (_, i) => String.fromCharCode(97 + i)); // a .. p
export const PASSKEY_SYMBOLS = Array.from({ length: 95 }, (_, i) => String.fromCharCode(32 + i)); // " " .. "~"
export const KEY_DIGITS = 5;

export type TaskName = "copy" | "passkey";
export const SYMBOLS: Record<TaskName, string[]> = { copy: COPY_SYMBOLS, passkey: PASSKEY_SYMBOLS };

export interface Example {
  tokens: number[]; // <bos> first, <eos> last
  answer: boolean[]; // true where the token answers (the answer and its <eos>)
}

/** The task's ids of `text`, one symbol per character; a character outside the task's symbols throws. */
export function ids(task: TaskName, text: string): number[] {
  const symbols = SYMBOLS[task];
  return [...text].map((c) => {
    const i = symbols.indexOf(c);
    if (i < 0) throw new Error(`${JSON.stringify(c)} is not a ${task} symbol`);
    return SPECIALS.length + i;
  });
}

/** `<bos>` prompt, then the answer and `<eos>`, which are marked (tasks.py's Example.of). */
function exampleOf(prompt: number[], answer: number[]): Example {
  return {
    tokens: [BOS, ...prompt, ...answer, EOS],
    answer: [...Array<boolean>(prompt.length + 1).fill(false), ...Array<boolean>(answer.length + 1).fill(true)],
  };
}

/** The copy example of `items` (letters a to p): `<bos> x1 .. xn <sep> x1 .. xn <eos>`. */
export function copyExample(items: string): Example {
  const x = ids("copy", items);
  return exampleOf([...x, SEP], x);
}

/** Where the key sentence goes: after round(depth × size) filler characters, a half rounding up, as Python's floor(depth × size + 0.5). */
export const passkeyCut = (size: number, depth: number) => Math.floor(depth * size + 0.5);

/** The sentences that hide `key` in the filler, a space either side (Passkey.needle in tasks.py). */
export const passkeyNeedle = (key: string) => ` The pass key is ${key}. Remember it. ${key} is the pass key. `;

/** The passkey prompt's text (what sits between `<bos>` and `<sep>`). */
export function passkeyText(filler: string, key: string, depth: number): string {
  const cut = passkeyCut(filler.length, depth);
  return `${filler.slice(0, cut)}${passkeyNeedle(key)}${filler.slice(cut)}`;
}

/** The passkey example: `filler` (its length is the size) with the five-digit `key` at `depth` (0: first, 1: last). */
export function passkeyExample(filler: string, key: string, depth: number): Example {
  if (!new RegExp(`^\\d{${KEY_DIGITS}}$`).test(key)) throw new Error(`the key must be ${KEY_DIGITS} digits, got ${JSON.stringify(key)}`);
  return exampleOf([...ids("passkey", passkeyText(filler, key, depth)), SEP], ids("passkey", key));
}

/** The tokens a model reads before it answers: through `<sep>`. */
export const promptOf = (e: Example): number[] => e.tokens.slice(0, e.tokens.indexOf(SEP) + 1);
/** The tokens a right answer has: the marked ones (the answer and `<eos>`). */
export const answerOf = (e: Example): number[] => e.tokens.filter((_, i) => e.answer[i]);

/** A token spelled out: its symbol, or the special's name. */
export function spell(task: TaskName, id: number): string {
  return id < SPECIALS.length ? SPECIALS[id] : (SYMBOLS[task][id - SPECIALS.length] ?? "?");
}

/** The index of the largest of `row` (the first on a tie, as torch.argmax). */
export function argmax(row: ArrayLike<number>): number {
  let best = 0;
  for (let i = 1; i < row.length; i++) if (row[i] > row[best]) best = i;
  return best;
}

/**
 * Greedy decoding (octlm/experiments/task_export.py's greedy_answer): append the argmax of the last position's logits
 * until `<eos>` (included) or `maxNew` tokens, or until the input would pass `maxInput` tokens.
 * `lastLogits(ids)` gives the logits of the last position for the input `ids`.
 */
export async function greedy(prompt: number[], maxNew: number, maxInput: number, lastLogits: (ids: number[]) => Promise<ArrayLike<number>>): Promise<number[]> {
  const input = [...prompt];
  const out: number[] = [];
  while (out.length < maxNew && input.length <= maxInput) {
    const token = argmax(await lastLogits(input));
    out.push(token);
    input.push(token);
    if (token === EOS) break;
  }
  return out;
}

// ----------------------------------------------------------------------------------------------------------
// The shipped task models

export interface TaskModelEntry {
  parameters: number;
  train_seconds: number;
  steps: number; // steps trained
  learned_at: number | null; // the held-out check that reached the target (null: the cap came first)
  accuracy: Record<string, number | null>; // exact match at each test size (the battery's scoring)
  accuracy_by_depth: Record<string, number | null>; // "size@depth"
  examples: number;
  context_length: number; // the longest input the graph takes
  train_length: number;
  files: Record<string, number>;
}

export interface TaskManifest {
  schema: 1;
  command: string;
  seed: number;
  // steps: the cap; target: the held-out exact match at the largest training size that stops training
  settings: { steps: number; target: number; batch_size: number; lr: number; examples: number; model: Record<string, number> };
  tasks: Record<string, { test_sizes: number[]; models: Record<string, TaskModelEntry> }>;
  total_bytes: number;
}

const BASE = import.meta.env.BASE_URL;

export async function loadTaskManifest(): Promise<TaskManifest> {
  const response = await fetch(`${BASE}task-models/manifest.json`);
  if (!response.ok) throw new Error(`task-models/manifest.json: ${response.status}; run scripts/site-task-models and rebuild`);
  return response.json() as Promise<TaskManifest>;
}

/** The passkey filler sample the page draws from (task-models/passkey/filler.txt, cut from the battery's corpus). */
export async function loadFiller(): Promise<string> {
  const response = await fetch(`${BASE}task-models/passkey/filler.txt`);
  if (!response.ok) throw new Error(`task-models/passkey/filler.txt: ${response.status}`);
  return response.text();
}

/** Bytes still to download before `models` of `task` can run: the engine, unless loaded, and each model not yet loaded. */
export async function bytesToLoad(manifest: TaskManifest, task: TaskName, schemes: string[]): Promise<number> {
  const { ENGINE_BYTES, engineLoaded } = await runtime();
  const models = manifest.tasks[task].models;
  return (engineLoaded() ? 0 : ENGINE_BYTES) + schemes.filter((s) => !sessions.has(`${task}/${s}`)).reduce((n, s) => n + models[s].files["model.onnx"], 0);
}

type Session = import("onnxruntime-web").InferenceSession;
const sessions = new Map<string, Promise<Session>>();

/** The session of `task`/`scheme`, fetched (with `progress`) and created on first use, then kept. */
export function taskSession(manifest: TaskManifest, task: TaskName, scheme: string, progress: Progress = () => undefined): Promise<Session> {
  const key = `${task}/${scheme}`;
  let session = sessions.get(key);
  if (!session) {
    session = (async () => {
      const { engine, fetchBytes } = await runtime();
      const lib = await engine(progress);
      const bytes = await fetchBytes(`${BASE}task-models/${key}/model.onnx`, manifest.tasks[task].models[scheme].files["model.onnx"], progress);
      return lib.InferenceSession.create(bytes, { executionProviders: ["wasm"], graphOptimizationLevel: "all" });
    })();
    session.catch(() => sessions.delete(key)); // a failed download may be retried
    sessions.set(key, session);
  }
  return session;
}

/** `scheme`'s greedy answer to `prompt` for `task`: at most `maxNew` tokens, its input at most the graph's length. */
export async function modelAnswer(manifest: TaskManifest, task: TaskName, scheme: string, prompt: number[], maxNew: number): Promise<number[]> {
  const [session, lib] = await Promise.all([taskSession(manifest, task, scheme), runtime().then((r) => r.engine())]);
  const entry = manifest.tasks[task].models[scheme];
  return greedy(prompt, maxNew, entry.context_length, async (input) => {
    const out = await session.run({ ids: new lib.Tensor("int64", BigInt64Array.from(input, (i) => BigInt(i)), [1, input.length]) }, ["logits"]);
    const logits = out.logits.data as Float32Array; // [1, T, V]
    const vocab = logits.length / input.length;
    return logits.subarray((input.length - 1) * vocab, input.length * vocab);
  });
}
