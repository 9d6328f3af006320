/**
 * How the Tasks page reads tasks.json (pure: no DOM, so vitest checks it directly). A task's table is read beside
 * its baselines and the rows that learned it: a score past the training size says something about positions only
 * when the row learned the task at that size; a row that did not fails longer inputs for that reason alone. The
 * rules are octlm/experiments/battery_results.py's (results.md), so the page and results.md say the same.
 */
import { rowsOf, type TaskClaim, type TaskResult, type TasksData } from "./data";

export type Metric = "exact" | "per_token";

export interface Cell {
  size: number;
  value: number | null; // null: no rows (a learned table cannot run this long)
  interval: [number, number] | null;
  seeds: number[]; // each seed's score: the seeds that learned the task, or every seed in a row that none did
  past: boolean; // past the largest training size
  meaningless: boolean; // past training in a row that did not learn: says nothing about positions
  belowMajority: boolean; // its 95 % interval does not clear the best constant answer
}

export interface TaskRow {
  row: string;
  learned: boolean;
  reason: string | null; // why not learned, as the battery wrote it
  learnedAt: (number | null)[]; // the step each seed reached the training target at (null: not within the cap)
  cells: Cell[];
}

export interface BaselineRow {
  name: "chance" | "majority";
  label: string;
  values: (number | null)[]; // per test size; null where the file has no baseline for it
}

export const BASELINE_LABELS = { chance: "chance", majority: "best constant answer (majority)" } as const;

/** A result's score in `metric`: its mean, interval and seeds (per token from the token_ fields). */
function scoreOf(r: TaskResult, metric: Metric): Pick<Cell, "value" | "interval" | "seeds"> {
  if (metric === "exact") return { value: r.mean, interval: r.interval, seeds: r.seeds };
  return { value: r.token_mean ?? null, interval: r.token_interval ?? null, seeds: r.token_seeds ?? [] };
}

/** The baseline of `task` at `size` in `metric`, or null where the file has none. */
export function baselineAt(data: TasksData, task: string, size: number, name: "chance" | "majority", metric: Metric): number | null {
  const b = data.tasks[task]?.baselines?.find((x) => x.size === size);
  return b ? b[name][metric] : null;
}

/** Every row of `task` in `metric` at each test size (pooled over depths), flagged as results.md flags it. */
export function taskRows(data: TasksData, task: string, metric: Metric): TaskRow[] {
  const spec = data.tasks[task];
  const trained = spec.train_sizes[1];
  const index = new Map(data.results.filter((r) => r.task === task && r.depth === null).map((r) => [`${r.scheme}|${r.size}`, r]));
  return rowsOf(data, task).map((row) => {
    const reason = spec.not_learned?.[row] ?? null;
    const cells = spec.test_sizes.map((size): Cell => {
      const r = index.get(`${row}|${size}`);
      const score = r ? scoreOf(r, metric) : { value: null, interval: null, seeds: [] };
      const floor = baselineAt(data, task, size, "majority", metric);
      // results.md's mark: the interval's lower bound is not above the majority baseline (baselines.clears)
      // (a 0 is below every baseline, and saying so under every 0 would hide the marks that tell something)
      const below = score.value !== null && score.value > 0 && floor !== null && (score.interval?.[0] ?? score.value) <= floor;
      return { size, ...score, past: size > trained, meaningless: reason !== null && size > trained, belowMajority: below };
    });
    return { row, learned: reason === null, reason, learnedAt: spec.learned_at?.[row] ?? [], cells };
  });
}

/** The chance and majority rows of `task` in `metric`, one value per test size. */
export function baselineRows(data: TasksData, task: string, metric: Metric): BaselineRow[] {
  return (["chance", "majority"] as const).map((name) => ({
    name,
    label: BASELINE_LABELS[name],
    values: data.tasks[task].test_sizes.map((size) => baselineAt(data, task, size, name, metric)),
  }));
}

/** Each seed's step, "–" where it did not reach the target within the cap: "1200 / – / 800". */
export function learnedAtText(steps: (number | null)[]): string {
  return steps.map((s) => (s === null ? "–" : String(s))).join(" / ") || "–";
}

/** A share in % as the tables print it: whole numbers, one decimal under 10 (baselines sit there), "<0.1" near 0. */
export function percent(v: number): string {
  const p = 100 * v;
  if (p === 0) return "0";
  if (p < 0.05) return "<0.1";
  return p < 10 ? String(Math.round(p * 10) / 10) : String(Math.round(p));
}

/** The reason without the prefix that repeats the row and task ("not learned: nope copy, "). */
export function shortReason(reason: string, row: string, task: string): string {
  const prefix = `not learned: ${row} ${task}, `;
  return reason.startsWith(prefix) ? reason.slice(prefix.length) : reason.replace(/^not learned:\s*/, "");
}

/** The value of `--flag` in a command line, or null. */
export function flagOf(command: string, flag: string): string | null {
  const words = command.split(/\s+/);
  const i = words.indexOf(flag);
  return i >= 0 && i + 1 < words.length && !words[i + 1].startsWith("--") ? words[i + 1] : null;
}

/** A piece of a sentence: words, or a row's name (the page sets it as code: "learned" is a row as well as a word). */
export type Part = string | { row: string };

/** "a, b and c" with each name a row part, `after` (e.g. " (best seed 92 %)") following each. */
export function rowList(rows: string[], after: (row: string) => string = () => ""): Part[] {
  return rows.flatMap((row, i): Part[] => [...(i === 0 ? [] : [i === rows.length - 1 ? " and " : ", "]), { row }, after(row)].filter((p) => p !== ""));
}

/**
 * The registered schemes (`registry`, in its order) that no row of the battery is built on: a row names its scheme
 * first (`rope+random`, `rope+pi4` are RoPE's), so these are the schemes the page has no numbers for.
 */
export const schemesNotRun = (rows: string[], registry: string[]): string[] => registry.filter((name) => !rows.some((row) => row.split("+")[0] === name));

/** The sentence as plain text (the row names as they are). */
export const partsText = (parts: Part[]): string => parts.map((p) => (typeof p === "string" ? p : p.row)).join("");

/** The plain-words reading of one task: which rows learned it, which did not, and the best learned row past training. */
export function whoLearned(data: TasksData, task: string): { learned: string[]; notLearned: string[]; sentences: Part[][] } {
  const spec = data.tasks[task];
  const rows = taskRows(data, task, "exact");
  const trained = spec.train_sizes[1];
  const learned = rows.filter((r) => r.learned).map((r) => r.row);
  const notLearned = rows.filter((r) => !r.learned).map((r) => r.row);
  const at = `${trained} ${spec.counts}`;
  const threshold = data.learned === undefined ? "" : ` (at least one seed at ${percent(data.learned)} % exact match)`;
  const sentences: Part[][] = [];
  if (!spec.not_learned) return { learned, notLearned, sentences: [["This tasks.json does not say which rows learned the task."]] };
  if (notLearned.length === 0) sentences.push([`Every row learned it at ${at}${threshold}.`]);
  else if (learned.length === 0) sentences.push([`No row learned it at ${at}${threshold}.`]);
  else sentences.push([`Learned at ${at}${threshold} by ${learned.length} of ${rows.length} rows: `, ...rowList(learned), "."]);
  if (notLearned.length) {
    const best = (row: string) => Math.max(...(rows.find((r) => r.row === row)?.cells.find((c) => c.size === trained)?.seeds ?? [0]));
    sentences.push(["Not learned: ", ...rowList(notLearned, (row) => ` (best seed ${percent(best(row))} %)`), "."]);
    sentences.push([`Their numbers past ${at} are in brackets: a model that cannot do the task at the length it trained on fails longer inputs for that reason alone, so those numbers say nothing about its positions.`]);
  }
  const next = spec.test_sizes.find((n) => n > trained);
  const scored = rows.filter((r) => r.learned).map((r) => ({ row: r.row, v: r.cells.find((c) => c.size === next)?.value ?? null })).filter((x): x is { row: string; v: number } => x.v !== null);
  if (next !== undefined && scored.length) {
    const top = Math.max(...scored.map((x) => x.v));
    const who = scored.filter((x) => x.v === top).map((x) => x.row);
    const where = `At ${next} ${spec.counts} (${next / trained}×), `;
    sentences.push(top === 0 ? [`${where}no learned row gets a single answer wholly right.`] : [`${where}the best learned row${who.length > 1 ? "s get" : " gets"} ${percent(top)} % exact match: `, ...rowList(who), "."]);
  }
  return { learned, notLearned, sentences };
}

export const VERDICT_MARKS: Record<TaskClaim["verdict"], { symbol: string; word: string }> = {
  agree: { symbol: "✓", word: "agree" },
  disagree: { symbol: "✗", word: "disagree" },
  inconclusive: { symbol: "?", word: "inconclusive" },
};

/** The claims table's rows: who, what, how measured, the verdict in words and a symbol, why, and the estimates. */
export function claimRows(data: TasksData): { key: string; paper: string; claim: string; metric: string; verdict: TaskClaim["verdict"]; mark: string; reasons: string[]; estimates: string[] }[] {
  return (data.claims ?? []).map((c) => ({
    key: c.key,
    paper: `${c.paper}, ${c.year}`,
    claim: c.statement,
    metric: c.metric,
    verdict: c.verdict,
    mark: `${VERDICT_MARKS[c.verdict].symbol} ${VERDICT_MARKS[c.verdict].word}`,
    reasons: c.reason.split("; ").filter((r) => r.length > 0), // the battery joins its reasons with "; "
    // a comparison names its reference row once per comparison: each estimate once
    estimates: [...new Set(c.estimates.map((e) => `${e.label}: ${percent(e.value)} %` + (e.lo !== null && e.hi !== null ? ` (95 % interval ${percent(e.lo)}–${percent(e.hi)} %)` : "")))],
  }));
}
