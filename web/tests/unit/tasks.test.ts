/**
 * src/tasks.ts against the task battery's Python generators (octlm/experiments/tasks.py): every example that
 * `octlm export fixtures` drew (web/fixtures/task_examples.json) and every example scripts/site-task-models ran
 * the models on is spelled token for token; greedy decoding stops where octlm's greedy_answer stops; and
 * data.ts's checkTasks accepts the committed tasks.json and names what is wrong in a broken one.
 */
import { readFileSync } from "node:fs";
import { resolve } from "node:path";
import { describe, expect, test } from "vitest";
import { checkTasks, rowsOf, type TasksData } from "../../src/data";
import { BOS, EOS, SEP, answerOf, argmax, copyExample, greedy, ids, passkeyCut, passkeyExample, promptOf, spell } from "../../src/tasks";

const WEB = resolve(import.meta.dirname, "../..");
const read = (path: string) => JSON.parse(readFileSync(resolve(WEB, path), "utf-8"));

type Case = { inputs: { task: "copy"; items: string } | { task: "passkey"; sample: string; start: number; size: number; depth: number; key: string }; output: { tokens: number[]; answer: boolean[] } };
const cases: Case[] = read("fixtures/task_examples.json").cases;

describe("examples as tasks.py spells them", () => {
  test("the fixture has both tasks, and passkey cuts that fall on a half", () => {
    expect(new Set(cases.map((c) => c.inputs.task))).toEqual(new Set(["copy", "passkey"]));
    const halves = cases.filter((c) => c.inputs.task === "passkey" && (c.inputs.depth * c.inputs.size) % 1 === 0.5);
    expect(halves.length).toBeGreaterThanOrEqual(2);
  });

  test.each(cases.map((c, i) => [i, c] as const))("case %i", (_, { inputs, output }) => {
    const example = inputs.task === "copy" ? copyExample(inputs.items) : passkeyExample(inputs.sample.slice(inputs.start, inputs.start + inputs.size), inputs.key, inputs.depth);
    expect(example.tokens).toEqual(output.tokens);
    expect(example.answer).toEqual(output.answer);
  });

  test("a half rounds up, as Python's floor(depth * size + 0.5)", () => {
    expect([passkeyCut(30, 0.25), passkeyCut(10, 0.25), passkeyCut(25, 0.5), passkeyCut(8, 0), passkeyCut(8, 1)]).toEqual([8, 3, 13, 0, 8]);
  });

  test("the prompt ends at <sep> and the answer is the marked tokens", () => {
    const e = copyExample("abc");
    expect(promptOf(e)).toEqual([BOS, 4, 5, 6, SEP]);
    expect(answerOf(e)).toEqual([4, 5, 6, EOS]);
    expect(e.tokens.map((t) => spell("copy", t)).join(" ")).toBe("<bos> a b c <sep> a b c <eos>");
  });

  test("symbols outside a task and malformed keys are refused", () => {
    expect(() => ids("copy", "abq")).toThrow(/"q" is not a copy symbol/);
    expect(() => ids("passkey", "é")).toThrow(/not a passkey symbol/);
    expect(() => passkeyExample("x".repeat(8), "1234", 0.5)).toThrow(/5 digits/);
  });

  test("the models' reference examples are the ones the page builds", () => {
    const ref = read("tests/fixtures/site-task-models-reference.json");
    const filler: string = readFileSync(resolve(WEB, "public/task-models", ref.filler.file), "utf-8");
    expect(filler.length).toBe(ref.filler.chars);
    for (const c of ref.tasks.copy.cases) expect(copyExample(c.items).tokens).toEqual(c.tokens);
    for (const c of ref.tasks.passkey.cases) expect(passkeyExample(filler.slice(c.start, c.start + c.size), c.key, c.depth).tokens).toEqual(c.tokens);
  });
});

describe("greedy decoding", () => {
  // a fake model that answers from a script: the logits put all weight on the next scripted token
  const scripted = (script: number[], vocab = 8) => {
    const seen: number[][] = [];
    const next = async (input: number[]) => {
      seen.push([...input]);
      const row = new Float32Array(vocab);
      row[script[seen.length - 1]] = 1;
      return row;
    };
    return { next, seen };
  };

  test("stops after <eos>, which it keeps", async () => {
    const { next, seen } = scripted([5, 6, EOS, 7]);
    expect(await greedy([BOS, 4, SEP], 9, 100, next)).toEqual([5, 6, EOS]);
    expect(seen.map((s) => s.length)).toEqual([3, 4, 5]);
  });

  test("stops at maxNew tokens, and before an input longer than maxInput", async () => {
    expect(await greedy([BOS, SEP], 2, 100, scripted([5, 6, 7]).next)).toEqual([5, 6]);
    // inputs of 2, 3 and 4 tokens fit 4; a fifth would not
    expect(await greedy([BOS, SEP], 9, 4, scripted([5, 6, 7, 7, 7]).next)).toEqual([5, 6, 7]);
  });

  test("argmax takes the first of equal values, as torch.argmax", () => {
    expect(argmax([0, 2, 2, 1])).toBe(1);
    expect(argmax(new Float32Array([-3, -1, -2]))).toBe(1);
  });
});

describe("checkTasks (tasks.json)", () => {
  const committed = read("public/data/tasks.json");

  test("accepts the committed file", () => {
    const result = checkTasks(committed);
    expect(result.ok ? [] : result.errors).toEqual([]);
  });

  test("lists every problem of a broken file", () => {
    const broken = structuredClone(committed);
    broken.schema = 2;
    delete broken.tasks.copy.counts;
    broken.results[0].scheme = "nonsense";
    broken.results[1].mean = 1.5;
    broken.results[2].interval = [0.1];
    broken.tasks.passkey.rows = ["rope", "nonsense"];
    const result = checkTasks(broken);
    expect(result.ok).toBe(false);
    if (!result.ok)
      expect(result.errors).toEqual([
        "schema must be 1, got 2",
        "tasks.copy.counts must be a string",
        "tasks.passkey.rows must be a list of the file's rows",
        "results[0].scheme must be one of the rows",
        "results[1].mean must be a number in [0, 1] or null",
        "results[2].interval must be two numbers or null",
      ]);
    expect(checkTasks([]).ok).toBe(false);
  });

  test("checks the reading (baselines, not_learned, learned_at, per_token) and the claims where present", () => {
    const broken = structuredClone(committed);
    broken.tasks.copy.baselines[0].majority = { exact: 0 };
    broken.tasks.copy.not_learned.nope = 3;
    broken.tasks.reverse.learned_at.rope = [100, "x"];
    broken.tasks.passkey.per_token = 1;
    broken.results[0].token_mean = 2;
    broken.claims[0].verdict = "maybe";
    delete broken.claims[1].reason;
    const result = checkTasks(broken);
    expect(result.ok ? [] : result.errors).toEqual([
      "tasks.copy.baselines must be a list of {size, chance, majority}, each {exact, per_token} in [0, 1]",
      "tasks.copy.not_learned must map rows to reasons",
      "tasks.reverse.learned_at must map rows to a step (or null) per seed",
      "tasks.passkey.per_token must be a string",
      "results[0].token_mean must be a number in [0, 1] or null",
      "claims[0].verdict must be agree, disagree or inconclusive",
      "claims[1].reason must be a string",
    ]);
    // an older file without any of them still passes
    const older = structuredClone(committed);
    for (const t of Object.values(older.tasks) as Record<string, unknown>[]) for (const k of ["per_token", "baselines", "not_learned", "learned_at"]) delete t[k];
    delete older.claims;
    delete older.learned;
    expect(checkTasks(older).ok).toBe(true);
  });
});

describe("rowsOf: the rows a task ran on", () => {
  const data = { rows: ["learned", "rope", "nope"], tasks: { copy: {}, passkey: { rows: ["rope", "nope"] } } } as unknown as TasksData;
  test("a task's own list where it ran on fewer, else every row", () => {
    expect(rowsOf(data, "passkey")).toEqual(["rope", "nope"]);
    expect(rowsOf(data, "copy")).toEqual(["learned", "rope", "nope"]);
  });
});
