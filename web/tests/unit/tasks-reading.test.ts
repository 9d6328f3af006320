/**
 * src/tasks-reading.ts: how the Tasks page reads tasks.json. A small hand-made file with every case (a row that
 * learned, one that did not, a learned table with no rows past its end, a seed left out), exact values expected;
 * then the committed tasks.json, whose rows the page must mark exactly as its not_learned lists them.
 */
import { readFileSync } from "node:fs";
import { resolve } from "node:path";
import { describe, expect, test } from "vitest";
import type { TaskResult, TasksData } from "../../src/data";
import { baselineRows, claimRows, flagOf, learnedAtText, partsText, percent, rowList, schemesNotRun, shortReason, taskRows, whoLearned } from "../../src/tasks-reading";

const result = (scheme: string, size: number, mean: number | null, lo: number, seeds: number[], token: number | null, tokenLo: number): TaskResult => ({
  task: "copy",
  scheme,
  size,
  depth: null,
  mean,
  interval: mean === null ? null : [lo, Math.min(1, mean + 0.05)],
  seeds,
  examples: 100 * seeds.length,
  token_mean: token,
  token_interval: token === null ? null : [tokenLo, Math.min(1, token + 0.05)],
  token_seeds: seeds.map(() => token ?? 0),
  tokens: 800,
});

const DATA: TasksData = {
  schema: 1,
  command: "octlm experiment tasks --steps 2000 --target 0.99 --check-every 200 --seeds 2",
  seeds: [0, 1],
  rows: ["learned", "rope", "nope"],
  learned: 0.95,
  depths: [],
  tasks: {
    copy: {
      train_sizes: [1, 8],
      counts: "items",
      test_sizes: [8, 16],
      per_token: "per token",
      baselines: [
        { size: 8, chance: { exact: 0, per_token: 0.0625 }, majority: { exact: 0, per_token: 0.0613 } },
        { size: 16, chance: { exact: 0, per_token: 0.0625 }, majority: { exact: 0, per_token: 0.0642 } },
      ],
      not_learned: { nope: "not learned: nope copy, no seed at 95 % exact match at 8 (seeds: 92 %, 91 %)" },
      learned_at: { learned: [1800, 1000], rope: [1200, null], nope: [null, null] },
    },
  },
  results: [
    result("learned", 8, 1, 0.96, [1, 1], 1, 0.98),
    result("learned", 16, null, 0, [], null, 0),
    result("rope", 8, 0.98, 0.9, [0.98], 0.99, 0.95), // one seed of two learned
    result("rope", 16, 0.1, 0, [0.1], 0.3, 0.2),
    result("nope", 8, 0.915, 0.85, [0.92, 0.91], 0.97, 0.9),
    result("nope", 16, 0, 0, [0, 0], 0.05, 0.01),
  ],
  claims: [
    { key: "a", paper: "Someone et al.", year: 2023, statement: "A beats B", experiment: "tasks", metric: "exact match past training", verdict: "inconclusive", reason: "x overlap; missing rows: y at 8", estimates: [
      { label: "a past 8", value: 0.5, lo: 0.25, hi: 0.75, n: 100, seeds: [0, 1] },
      { label: "b past 8", value: 0.0123, lo: 0, hi: 0.04, n: 100, seeds: [0, 1] },
      { label: "a past 8", value: 0.5, lo: 0.25, hi: 0.75, n: 100, seeds: [0, 1] },
    ] },
    { key: "b", paper: "Other", year: 2024, statement: "C holds", experiment: "tasks", metric: "per token", verdict: "agree", reason: "c above d", estimates: [] },
  ],
};

describe("taskRows", () => {
  test("exact match: flags, learned-at steps and which cells say nothing", () => {
    const rows = taskRows(DATA, "copy", "exact");
    expect(rows.map((r) => [r.row, r.learned, r.reason !== null, r.learnedAt])).toEqual([
      ["learned", true, false, [1800, 1000]],
      ["rope", true, false, [1200, null]],
      ["nope", false, true, [null, null]],
    ]);
    // [value, past, meaningless, belowMajority] per size
    expect(rows.map((r) => r.cells.map((c) => [c.value, c.past, c.meaningless, c.belowMajority]))).toEqual([
      [[1, false, false, false], [null, true, false, false]],
      [[0.98, false, false, false], [0.1, true, false, true]], // 10 % but its interval reaches 0, the majority
      [[0.915, false, false, false], [0, true, true, false]], // a 0 is not marked: it is below every baseline
    ]);
  });

  test("per token reads the token_ fields and the per-token majority", () => {
    const rows = taskRows(DATA, "copy", "per_token");
    expect(rows.map((r) => r.cells.map((c) => [c.value, c.interval?.[0] ?? null, c.belowMajority]))).toEqual([
      [[1, 0.98, false], [null, null, false]],
      [[0.99, 0.95, false], [0.3, 0.2, false]],
      [[0.97, 0.9, false], [0.05, 0.01, true]], // 0.01 ≤ 0.0642
    ]);
  });

  test("baselines: chance and majority per size, in each metric, labelled as the page labels them", () => {
    expect(baselineRows(DATA, "copy", "per_token")).toEqual([
      { name: "chance", label: "chance", values: [0.0625, 0.0625] },
      { name: "majority", label: "best constant answer (majority)", values: [0.0613, 0.0642] },
    ]);
    expect(baselineRows(DATA, "copy", "exact").map((b) => b.values)).toEqual([[0, 0], [0, 0]]);
  });
});

describe("the words", () => {
  test("who learned, who did not, and why the brackets", () => {
    const reading = whoLearned(DATA, "copy");
    expect([reading.learned, reading.notLearned]).toEqual([["learned", "rope"], ["nope"]]);
    expect(reading.sentences.map(partsText)).toEqual([
      "Learned at 8 items (at least one seed at 95 % exact match) by 2 of 3 rows: learned and rope.",
      "Not learned: nope (best seed 92 %).",
      "Their numbers past 8 items are in brackets: a model that cannot do the task at the length it trained on fails longer inputs for that reason alone, so those numbers say nothing about its positions.",
      "At 16 items (2×), the best learned row gets 10 % exact match: rope.",
    ]);
    expect(reading.sentences[0].filter((p) => typeof p !== "string")).toEqual([{ row: "learned" }, { row: "rope" }]);
  });

  test("every row learned; no learned row right past training", () => {
    const all = structuredClone(DATA);
    all.tasks.copy.not_learned = {};
    all.results[3].mean = 0;
    expect(whoLearned(all, "copy").sentences.map(partsText)).toEqual([
      "Every row learned it at 8 items (at least one seed at 95 % exact match).",
      "At 16 items (2×), no learned row gets a single answer wholly right.",
    ]);
  });

  test("lists, steps, percentages, reasons and flags", () => {
    expect(partsText(rowList(["a", "b", "c"], (r) => (r === "b" ? " (x)" : "")))).toBe("a, b (x) and c");
    expect(learnedAtText([1200, null, 800])).toBe("1200 / – / 800");
    expect(learnedAtText([])).toBe("–");
    expect([0, 0.0004, 0.0613, 0.0625, 0.1, 0.915, 1].map(percent)).toEqual(["0", "<0.1", "6.1", "6.3", "10", "92", "100"]);
    expect(shortReason(DATA.tasks.copy.not_learned!.nope, "nope", "copy")).toBe("no seed at 95 % exact match at 8 (seeds: 92 %, 91 %)");
    expect(shortReason("not learned: something else", "nope", "copy")).toBe("something else");
    expect([flagOf(DATA.command, "--target"), flagOf(DATA.command, "--steps"), flagOf(DATA.command, "--every-row"), flagOf("x --every-row --steps 3", "--every-row")]).toEqual(["0.99", "2000", null, null]);
  });

  test("claims: verdict in a word and a symbol, reasons split, each estimate once", () => {
    expect(claimRows(DATA)).toEqual([
      {
        key: "a",
        paper: "Someone et al., 2023",
        claim: "A beats B",
        metric: "exact match past training",
        verdict: "inconclusive",
        mark: "? inconclusive",
        reasons: ["x overlap", "missing rows: y at 8"],
        estimates: ["a past 8: 50 % (95 % interval 25–75 %)", "b past 8: 1.2 % (95 % interval 0–4 %)"],
      },
      { key: "b", paper: "Other, 2024", claim: "C holds", metric: "per token", verdict: "agree", mark: "✓ agree", reasons: ["c above d"], estimates: [] },
    ]);
  });
});

describe("the committed tasks.json", () => {
  const data: TasksData = JSON.parse(readFileSync(resolve(import.meta.dirname, "../../public/data/tasks.json"), "utf-8"));

  test("a row is marked not learned exactly where not_learned names it, in both metrics", () => {
    for (const [task, spec] of Object.entries(data.tasks))
      for (const metric of ["exact", "per_token"] as const) {
        const rows = taskRows(data, task, metric);
        expect(rows.filter((r) => !r.learned).map((r) => r.row).sort()).toEqual(Object.keys(spec.not_learned ?? {}).sort());
        // only past the training size, and there every cell of an unlearned row
        for (const r of rows) for (const c of r.cells) expect(c.meaningless).toBe(!r.learned && c.size > spec.train_sizes[1]);
      }
  });

  test("copy as the file has it: ten rows learned, nope and fox not", () => {
    const reading = whoLearned(data, "copy");
    expect(reading.notLearned).toEqual(["nope", "fox"]);
    expect(partsText(reading.sentences[1])).toBe("Not learned: nope (best seed 92 %) and fox (best seed 0 %).");
    expect(taskRows(data, "copy", "exact").find((r) => r.row === "rope")!.learnedAt).toEqual([1200, 1200, 800]);
  });
});

describe("schemesNotRun", () => {
  test("a row counts for the scheme it names first; the rest of the registry, in its order, is not run", () => {
    const registry = ["learned", "rope", "p-rope", "xpos", "alibi", "nope"];
    expect(schemesNotRun(["rope+random", "rope+pi4", "alibi+nope0", "learned"], registry)).toEqual(["p-rope", "xpos", "nope"]);
    expect(schemesNotRun(registry, registry)).toEqual([]);
    // "p-rope" is not RoPE's: a row is its scheme's by its whole first name, not by a prefix
    expect(schemesNotRun(["p-rope"], ["rope", "p-rope"])).toEqual(["rope"]);
  });
});
