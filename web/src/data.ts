/**
 * The exported result files the Results page reads, as TypeScript types plus checks. web/DATA.md says the same
 * in prose for whoever writes the files. Both live in web/public/data/ and are produced by octlm commands:
 *
 * - length.json: `octlm experiment length`
 * - embeddings.json: `octlm inspect runs/<name>`
 * - tasks.json: `octlm experiment tasks` (its --export-web option copies the file here)
 */

export interface LengthRow {
  scheme: string; // position scheme: learned, sinusoidal, rope, alibi, t5, nope
  variant: string; // e.g. "plain", "pi", "ntk", "yarn"; "" when the scheme has one variant
  length: number; // evaluation length in tokens
  bpb_mean: number | null; // bits per byte, mean over seeds (null: no result, see status)
  bpb_std: number | null;
  ppl_mean: number | null; // perplexity per token, mean over seeds
  n_seeds: number;
  status: "ok" | "no rows"; // "no rows": the scheme cannot run at this length (a learned table past its end)
}

export interface LengthData {
  schema: 1;
  command: string; // the command line that produced the file
  train_length: number;
  eval_lengths: number[];
  rows: LengthRow[];
}

export interface TokenInfo {
  id: number;
  text: string;
  count: number; // occurrences in the training data
}

export interface EmbeddingsData {
  schema: 1;
  run: string; // run folder name, e.g. "day1-learned"
  position: string; // the run's position scheme
  d_model: number;
  tokens: TokenInfo[];
  token_table: number[][]; // one row of width d_model per entry of `tokens`, same order
  position_similarity: number[][] | null; // [T, T] cosine similarity of learned position rows, or null
}

export const DATA_FILES = {
  length: { path: "data/length.json", command: "octlm experiment length" },
  embeddings: { path: "data/embeddings.json", command: "octlm inspect runs/<name>" },
  tasks: { path: "data/tasks.json", command: "octlm experiment tasks --export-web web/public/data/tasks.json" },
} as const;

type Result<T> = { ok: true; data: T } | { ok: false; errors: string[] };

const isNum = (v: unknown): v is number => typeof v === "number" && Number.isFinite(v);
const isNumOrNull = (v: unknown) => v === null || isNum(v);
const isObj = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v);

/** Check a parsed length.json; every problem is listed, so a producer can fix them in one go. */
export function checkLength(raw: unknown): Result<LengthData> {
  const errors: string[] = [];
  if (!isObj(raw)) return { ok: false, errors: ["the file is not a JSON object"] };
  if (raw.schema !== 1) errors.push(`schema must be 1, got ${JSON.stringify(raw.schema)}`);
  if (typeof raw.command !== "string") errors.push("command must be a string");
  if (!isNum(raw.train_length)) errors.push("train_length must be a number");
  if (!Array.isArray(raw.eval_lengths) || !raw.eval_lengths.every(isNum)) errors.push("eval_lengths must be a list of numbers");
  if (!Array.isArray(raw.rows)) errors.push("rows must be a list");
  else
    raw.rows.forEach((r, i) => {
      if (!isObj(r)) return errors.push(`rows[${i}] must be an object`);
      if (typeof r.scheme !== "string") errors.push(`rows[${i}].scheme must be a string`);
      if (typeof r.variant !== "string") errors.push(`rows[${i}].variant must be a string`);
      if (!isNum(r.length)) errors.push(`rows[${i}].length must be a number`);
      for (const k of ["bpb_mean", "bpb_std", "ppl_mean"]) if (!isNumOrNull(r[k])) errors.push(`rows[${i}].${k} must be a number or null`);
      if (!isNum(r.n_seeds)) errors.push(`rows[${i}].n_seeds must be a number`);
      if (r.status !== "ok" && r.status !== "no rows") errors.push(`rows[${i}].status must be "ok" or "no rows"`);
      if (r.status === "ok" && r.bpb_mean === null) errors.push(`rows[${i}] has status "ok" but no bpb_mean`);
    });
  return errors.length ? { ok: false, errors } : { ok: true, data: raw as unknown as LengthData };
}

export function checkEmbeddings(raw: unknown): Result<EmbeddingsData> {
  const errors: string[] = [];
  if (!isObj(raw)) return { ok: false, errors: ["the file is not a JSON object"] };
  if (raw.schema !== 1) errors.push(`schema must be 1, got ${JSON.stringify(raw.schema)}`);
  for (const k of ["run", "position"]) if (typeof raw[k] !== "string") errors.push(`${k} must be a string`);
  if (!isNum(raw.d_model)) errors.push("d_model must be a number");
  const tokens = raw.tokens;
  if (!Array.isArray(tokens) || !tokens.every((t) => isObj(t) && isNum(t.id) && typeof t.text === "string" && isNum(t.count)))
    errors.push("tokens must be a list of {id, text, count}");
  const table = raw.token_table;
  if (!Array.isArray(table) || !table.every((r) => Array.isArray(r) && r.every(isNum))) errors.push("token_table must be a list of rows of numbers");
  else {
    if (Array.isArray(tokens) && table.length !== tokens.length) errors.push(`token_table has ${table.length} rows but tokens has ${tokens.length} entries`);
    if (isNum(raw.d_model) && table.some((r) => r.length !== raw.d_model)) errors.push(`every token_table row must have d_model = ${raw.d_model} numbers`);
  }
  const sim = raw.position_similarity;
  if (sim !== null && !(Array.isArray(sim) && sim.every((r) => Array.isArray(r) && r.length === sim.length && r.every(isNum))))
    errors.push("position_similarity must be null or a square list of rows of numbers");
  return errors.length ? { ok: false, errors } : { ok: true, data: raw as unknown as EmbeddingsData };
}

export interface TaskSpec {
  train_sizes: [number, number]; // the sizes training draws from, both ends included
  counts: string; // what a size counts: "items", "digits", "filler characters", ...
  test_sizes: number[]; // the largest training size times each factor
  rows?: string[]; // the rows this task ran on, where fewer than all (absent in older files: every row)
  // What the tables are read beside (absent in older files): the per-token metric's name ("per token", or
  // "per query" for MQAR), the baselines at each test size, the rows that did not learn the task at its
  // largest training size (row -> why) and the step each seed reached the training target at (null: not
  // within the step cap).
  per_token?: string;
  baselines?: TaskBaseline[];
  not_learned?: Record<string, string>;
  learned_at?: Record<string, (number | null)[]>;
}

/** A score in both metrics: every answer token right (exact), and the share of answer tokens right. */
export interface BothMetrics {
  exact: number;
  per_token: number;
}

/** What guessing scores at one test size: uniform guesses (chance) and the best constant answer (majority). */
export interface TaskBaseline {
  size: number;
  chance: BothMetrics;
  majority: BothMetrics;
}

/** One paper's claim as the battery checked it (octlm/experiments/claims.py's claims_json). */
export interface TaskClaim {
  key: string;
  paper: string;
  year: number;
  statement: string;
  experiment: string;
  metric: string;
  verdict: "agree" | "disagree" | "inconclusive";
  reason: string;
  estimates: { label: string; value: number; lo: number | null; hi: number | null; n: number; seeds: number[] }[];
}

export interface TaskResult {
  task: string;
  scheme: string; // a row of the battery: a scheme, maybe with +random or +nopeK
  size: number;
  depth: number | null; // passkey's key depth (0: first, 1: last); null: every depth pooled
  mean: number | null; // exact match, mean over seeds; null: no rows (a learned table cannot run this long)
  interval: [number, number] | null; // 95 % Wilson interval of all seeds' examples pooled
  seeds: number[]; // each seed's exact match
  examples: number; // all seeds' examples pooled
  // per token (absent in older files): the share of answer tokens right, its interval and each seed's share
  token_mean?: number | null;
  token_interval?: [number, number] | null;
  token_seeds?: number[];
  tokens?: number;
}

export interface TasksData {
  schema: 1;
  command: string;
  seeds: number[];
  rows: string[];
  tasks: Record<string, TaskSpec>;
  depths: number[];
  results: TaskResult[];
  learned?: number; // the exact match at the largest training size a seed needs to count as having learned
  claims?: TaskClaim[];
}

/** The rows `task` ran on: its own list where it ran on fewer than all (older files list none: every row). */
export function rowsOf(data: TasksData, task: string): string[] {
  return data.tasks[task]?.rows ?? data.rows;
}

/** Check a parsed tasks.json (`octlm experiment tasks`, octlm/experiments/battery_results.py's web_json). */
export function checkTasks(raw: unknown): Result<TasksData> {
  const errors: string[] = [];
  if (!isObj(raw)) return { ok: false, errors: ["the file is not a JSON object"] };
  if (raw.schema !== 1) errors.push(`schema must be 1, got ${JSON.stringify(raw.schema)}`);
  if (typeof raw.command !== "string") errors.push("command must be a string");
  if (!Array.isArray(raw.seeds) || !raw.seeds.every(isNum)) errors.push("seeds must be a list of numbers");
  if (!Array.isArray(raw.rows) || !raw.rows.every((r) => typeof r === "string")) errors.push("rows must be a list of strings");
  if (!Array.isArray(raw.depths) || !raw.depths.every(isNum)) errors.push("depths must be a list of numbers");
  const tasks = isObj(raw.tasks) ? raw.tasks : null;
  if (!tasks) errors.push("tasks must be an object of task name to {train_sizes, counts, test_sizes}");
  else
    for (const [name, t] of Object.entries(tasks)) {
      if (!isObj(t)) errors.push(`tasks.${name} must be an object`);
      else {
        if (!Array.isArray(t.train_sizes) || t.train_sizes.length !== 2 || !t.train_sizes.every(isNum)) errors.push(`tasks.${name}.train_sizes must be two numbers`);
        if (typeof t.counts !== "string") errors.push(`tasks.${name}.counts must be a string`);
        if (!Array.isArray(t.test_sizes) || !t.test_sizes.length || !t.test_sizes.every(isNum)) errors.push(`tasks.${name}.test_sizes must be a list of numbers`);
        if (t.rows !== undefined && !(Array.isArray(t.rows) && t.rows.every((r) => typeof r === "string" && Array.isArray(raw.rows) && raw.rows.includes(r)))) errors.push(`tasks.${name}.rows must be a list of the file's rows`);
        errors.push(...checkReading(name, t));
      }
    }
  if (!Array.isArray(raw.results)) errors.push("results must be a list");
  else
    raw.results.forEach((r, i) => {
      if (!isObj(r)) return errors.push(`results[${i}] must be an object`);
      if (typeof r.task !== "string" || (tasks && !(r.task in tasks))) errors.push(`results[${i}].task must be one of the tasks`);
      if (typeof r.scheme !== "string" || (Array.isArray(raw.rows) && !raw.rows.includes(r.scheme))) errors.push(`results[${i}].scheme must be one of the rows`);
      if (!isNum(r.size)) errors.push(`results[${i}].size must be a number`);
      if (!isNumOrNull(r.depth)) errors.push(`results[${i}].depth must be a number or null`);
      if (!(isNumOrNull(r.mean) && (r.mean === null || (r.mean >= 0 && r.mean <= 1)))) errors.push(`results[${i}].mean must be a number in [0, 1] or null`);
      if (!(r.interval === null || (Array.isArray(r.interval) && r.interval.length === 2 && r.interval.every(isNum)))) errors.push(`results[${i}].interval must be two numbers or null`);
      if (!Array.isArray(r.seeds) || !r.seeds.every(isNum)) errors.push(`results[${i}].seeds must be a list of numbers`);
      if (!isNum(r.examples)) errors.push(`results[${i}].examples must be a number`);
      if (r.token_mean !== undefined && !(isNumOrNull(r.token_mean) && (r.token_mean === null || (r.token_mean >= 0 && r.token_mean <= 1)))) errors.push(`results[${i}].token_mean must be a number in [0, 1] or null`);
    });
  if (raw.claims !== undefined) errors.push(...checkClaims(raw.claims));
  return errors.length ? { ok: false, errors } : { ok: true, data: raw as unknown as TasksData };
}

const isShare = (v: unknown) => isNum(v) && v >= 0 && v <= 1;
const isBoth = (v: unknown) => isObj(v) && isShare(v.exact) && isShare(v.per_token);

/** The optional reading of one task (baselines, not_learned, learned_at, per_token): present fields checked. */
function checkReading(name: string, t: Record<string, unknown>): string[] {
  const errors: string[] = [];
  if (t.per_token !== undefined && typeof t.per_token !== "string") errors.push(`tasks.${name}.per_token must be a string`);
  if (t.baselines !== undefined && !(Array.isArray(t.baselines) && t.baselines.every((b) => isObj(b) && isNum(b.size) && isBoth(b.chance) && isBoth(b.majority))))
    errors.push(`tasks.${name}.baselines must be a list of {size, chance, majority}, each {exact, per_token} in [0, 1]`);
  if (t.not_learned !== undefined && !(isObj(t.not_learned) && Object.values(t.not_learned).every((v) => typeof v === "string"))) errors.push(`tasks.${name}.not_learned must map rows to reasons`);
  if (t.learned_at !== undefined && !(isObj(t.learned_at) && Object.values(t.learned_at).every((v) => Array.isArray(v) && v.every(isNumOrNull)))) errors.push(`tasks.${name}.learned_at must map rows to a step (or null) per seed`);
  return errors;
}

const VERDICTS = ["agree", "disagree", "inconclusive"];

function checkClaims(claims: unknown): string[] {
  if (!Array.isArray(claims)) return ["claims must be a list"];
  const errors: string[] = [];
  claims.forEach((c, i) => {
    if (!isObj(c)) return errors.push(`claims[${i}] must be an object`);
    for (const k of ["key", "paper", "statement", "metric", "reason"]) if (typeof c[k] !== "string") errors.push(`claims[${i}].${k} must be a string`);
    if (!VERDICTS.includes(c.verdict as string)) errors.push(`claims[${i}].verdict must be agree, disagree or inconclusive`);
    if (!Array.isArray(c.estimates)) errors.push(`claims[${i}].estimates must be a list`);
  });
  return errors;
}

export type Loaded<T> = { state: "ok"; data: T } | { state: "missing" } | { state: "invalid"; errors: string[] };

/** The result files present when the site was built (data/manifest.json, written by the build). */
export async function presentFiles(base: string): Promise<string[]> {
  try {
    const response = await fetch(`${base}data/manifest.json`, { cache: "no-store" });
    const raw: unknown = response.ok ? await response.json() : null;
    return isObj(raw) && Array.isArray(raw.files) ? raw.files.filter((f): f is string => typeof f === "string") : [];
  } catch {
    return [];
  }
}

/** Fetch and check one data file; a 404 (or an HTML fallback page) counts as missing. */
export async function loadData<T>(url: string, check: (raw: unknown) => Result<T>): Promise<Loaded<T>> {
  let response: Response;
  try {
    response = await fetch(url, { cache: "no-store" });
  } catch {
    return { state: "missing" };
  }
  if (!response.ok) return { state: "missing" };
  const text = await response.text();
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch {
    return text.trimStart().startsWith("<") ? { state: "missing" } : { state: "invalid", errors: ["the file is not valid JSON"] };
  }
  const result = check(raw);
  return result.ok ? { state: "ok", data: result.data } : { state: "invalid", errors: result.errors };
}

/** The k nearest tokens to token index `i` by cosine similarity (itself excluded), best first. */
export function nearest(table: number[][], i: number, k: number): { index: number; similarity: number }[] {
  const norm = (r: number[]) => Math.sqrt(r.reduce((s, v) => s + v * v, 0)) || 1;
  const a = table[i];
  const na = norm(a);
  return table
    .map((r, j) => ({ index: j, similarity: r.reduce((s, v, c) => s + v * a[c], 0) / (na * norm(r)) }))
    .filter((x) => x.index !== i)
    .sort((x, y) => y.similarity - x.similarity)
    .slice(0, k);
}
