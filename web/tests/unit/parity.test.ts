/** Every function of src/math.ts against the fixtures that `octlm export fixtures` wrote from octlm/positions/ (formulas.py and the schemes' modules). */
import { readFileSync, readdirSync } from "node:fs";
import { resolve } from "node:path";
import { afterAll, describe, expect, test } from "vitest";
import * as M from "../../src/math";

const DIR = resolve(import.meta.dirname, "../../fixtures");
// Measured: 2.97e-8 at worst (sinusoidal_table, whose fixture holds float32 values: half a float32 step below 1
// is 2^-25 = 2.98e-8, so no correct table can do better). 1e-7 sits just above; a float32-computed table or a
// wrong angle would be off by 1e-4 or more.
const TOL = 1e-7;
type Case = { inputs: Record<string, any>; output: any };
const load = (name: string): Case[] => JSON.parse(readFileSync(resolve(DIR, `${name}.json`), "utf-8")).cases;

let worstOverall = { diff: 0, where: "" };
const worstByFixture = new Map<string, number>(); // fixture name -> largest difference seen, for the log

/** All-close with an absolute tolerance; on failure the message names the worst index and both values. */
export function allClose(got: unknown, want: unknown, where: string, tol = TOL, track = true): void {
  const flat: [string, number, number][] = [];
  const walk = (g: any, w: any, path: string) => {
    if (Array.isArray(w)) {
      expect(Array.isArray(g) && g.length === w.length, `${where}${path}: length ${Array.isArray(g) ? g.length : typeof g} vs ${w.length}`).toBe(true);
      w.forEach((wi, i) => walk(g[i], wi, `${path}[${i}]`));
    } else flat.push([path, g === -Infinity && w === null ? Number.NEGATIVE_INFINITY : g, w === null ? Number.NEGATIVE_INFINITY : w]);
  };
  walk(got, want, "");
  let worst = { diff: 0, path: "", g: 0, w: 0 };
  for (const [path, g, w] of flat) {
    const diff = g === w ? 0 : Math.abs(g - w);
    if (!(diff <= worst.diff)) worst = { diff: Number.isNaN(diff) ? Infinity : diff, path, g, w };
  }
  if (track && worst.diff > worstOverall.diff) worstOverall = { diff: worst.diff, where: `${where}${worst.path}` };
  if (track) worstByFixture.set(where.split(" ")[0], Math.max(worstByFixture.get(where.split(" ")[0]) ?? 0, worst.diff));
  expect(worst.diff <= tol, `${where}: worst index ${worst.path}: TypeScript ${worst.g} vs Python ${worst.w} (|diff| ${worst.diff} > ${tol})`).toBe(true);
}

describe("math.ts agrees with octlm/positions/", () => {
  test("every fixture file is covered", () => {
    const files = readdirSync(DIR).filter((f) => f.endsWith(".json")).sort();
    expect(files).toEqual(
      [
        "add_positions", "alibi_bias", "alibi_slopes", "cosine_similarity_matrix", "decay_bias", "fire_inputs", "fire_mlp", "gated_counts", "interpolated_bias",
        "llama4_temperature", "path_weights", "prope_frequencies", "rope_frequencies", "rope_rotate", "rotary_dims", "schemes", "sinusoidal_table",
        "ssmax_factors", "stick_breaking_weights", "t5_bucket", "task_examples", "xpos_safe_length", "xpos_scales",
      ].map((f) => `${f}.json`),
    );
  });

  test("sinusoidal_table", () => {
    for (const [i, { inputs, output }] of load("sinusoidal_table").entries())
      allClose(M.sinusoidalTable(inputs.length, inputs.width, inputs.base), output, `sinusoidal_table case ${i}`);
    expect(() => M.sinusoidalTable(4, 5)).toThrow(/even width/);
  });

  test("cosine_similarity_matrix", () => {
    for (const [i, { inputs, output }] of load("cosine_similarity_matrix").entries())
      allClose(M.cosineSimilarityMatrix(inputs.x), output, `cosine_similarity_matrix case ${i}`);
  });

  test("rope_frequencies", () => {
    for (const [i, { inputs, output }] of load("rope_frequencies").entries())
      allClose(M.ropeFrequencies(inputs.head_dim, inputs.base), output, `rope_frequencies case ${i}`);
  });

  test("rope_rotate, both layouts", () => {
    const cases = load("rope_rotate");
    expect(new Set(cases.map((c) => c.inputs.layout))).toEqual(new Set(["half", "interleaved"]));
    for (const [i, { inputs, output }] of cases.entries())
      allClose(M.ropeRotate(inputs.x, inputs.positions, inputs.base, inputs.layout), output, `rope_rotate case ${i} (${inputs.layout})`);
  });

  test("alibi_slopes", () => {
    for (const [i, { inputs, output }] of load("alibi_slopes").entries())
      allClose(M.alibiSlopes(inputs.n_heads), output, `alibi_slopes case ${i} (${inputs.n_heads} heads)`);
  });

  test("alibi_bias (null in the fixture is -inf)", () => {
    for (const [i, { inputs, output }] of load("alibi_bias").entries()) {
      const got = M.alibiBias(inputs.slopes, inputs.q_positions, inputs.k_positions);
      allClose(got, output, `alibi_bias case ${i}`);
      got.flat(2).forEach((v, j) => expect(v === -Infinity, `alibi_bias case ${i} masked entry ${j}`).toBe(output.flat(2)[j] === null));
    }
  });

  test("t5_bucket, exactly", () => {
    for (const { inputs, output } of load("t5_bucket")) {
      const got = inputs.relative_position.map((r: number) => M.t5Bucket(r, inputs.num_buckets, inputs.max_distance));
      expect(got, `t5_bucket ${inputs.num_buckets} buckets, max distance ${inputs.max_distance}`).toEqual(output);
    }
  });

  test("add_positions error message", () => {
    for (const { inputs, output } of load("add_positions")) expect(M.addPositionsError(inputs.token_shape, inputs.table_shape)).toBe(output);
  });
});

describe("math.ts agrees with octlm/positions/ (rotary.py, xpos.py, fire.py, cope.py)", () => {
  const source = (name: string): string => JSON.parse(readFileSync(resolve(DIR, `${name}.json`), "utf-8")).source;

  test("each fixture names the file its formula lives in", () => {
    const files = { rotary_dims: "rotary", prope_frequencies: "rotary", xpos_scales: "xpos", xpos_safe_length: "xpos", fire_inputs: "fire", fire_mlp: "fire", gated_counts: "cope", interpolated_bias: "cope" };
    for (const [name, file] of Object.entries(files)) expect(source(name), name).toBe(`octlm/positions/${file}.py`);
  });

  test("rotary_dims, exactly", () => {
    for (const { inputs, output } of load("rotary_dims")) expect(M.rotaryDims(inputs.head_dim, inputs.fraction), `${inputs.head_dim} × ${inputs.fraction}`).toBe(output);
  });

  test("prope_frequencies (its zeros exactly)", () => {
    for (const [i, { inputs, output }] of load("prope_frequencies").entries()) {
      const got = M.propeFrequencies(inputs.head_dim, inputs.base, inputs.kept);
      allClose(got, output, `prope_frequencies case ${i}`);
      got.forEach((v, j) => expect(v === 0, `case ${i} pair ${j} is zero`).toBe(output[j] === 0));
    }
  });

  test("xpos_scales", () => {
    for (const [i, { inputs, output }] of load("xpos_scales").entries()) allClose(M.xposScales(inputs.head_dim, inputs.gamma), output, `xpos_scales case ${i}`);
  });

  test("xpos_safe_length, exactly", () => {
    for (const { inputs, output } of load("xpos_safe_length")) expect(M.xposSafeLength(inputs.head_dim, inputs.scale_base, inputs.gamma), JSON.stringify(inputs)).toBe(output);
  });

  test("fire_inputs", () => {
    for (const [i, { inputs, output }] of load("fire_inputs").entries())
      allClose(M.fireInputs(inputs.c, inputs.threshold, inputs.q_positions, inputs.k_positions), output, `fire_inputs case ${i}`);
  });

  test("fire_mlp", () => {
    for (const [i, { inputs, output }] of load("fire_mlp").entries()) allClose(M.fireMlp(inputs.x, inputs.w1, inputs.b1, inputs.w2, inputs.b2), output, `fire_mlp case ${i}`);
  });

  test("gated_counts (grouped heads, query chunks, the limit)", () => {
    const cases = load("gated_counts");
    expect(cases.some((c) => c.inputs.q[0].length > c.inputs.k[0].length)).toBe(true); // grouped-query heads
    for (const [i, { inputs, output }] of cases.entries())
      allClose(M.gatedCounts(inputs.q, inputs.k, inputs.q_positions, inputs.k_positions, inputs.limit), output, `gated_counts case ${i}`);
  });

  test("interpolated_bias", () => {
    for (const [i, { inputs, output }] of load("interpolated_bias").entries()) allClose(M.interpolatedBias(inputs.q, inputs.table, inputs.counts), output, `interpolated_bias case ${i}`);
  });
});

describe("math.ts agrees with the schemes that compute attention themselves (forgetting.py, stick_breaking.py, householder.py) and decoder.py's query scaling", () => {
  const source = (name: string): string => JSON.parse(readFileSync(resolve(DIR, `${name}.json`), "utf-8")).source;
  const sum = (row: number[]) => row.reduce((a, v) => a + v, 0);

  test("each fixture names the file its formula lives in", () => {
    const files = { decay_bias: "positions/forgetting", stick_breaking_weights: "positions/stick_breaking", path_weights: "positions/householder", ssmax_factors: "model/decoder", llama4_temperature: "model/decoder" };
    for (const [name, file] of Object.entries(files)) expect(source(name), name).toBe(`octlm/${file}.py`);
  });

  test("decay_bias (null in the fixture is -inf; queries after cached keys)", () => {
    const cases = load("decay_bias");
    expect(cases.some((c) => c.inputs.q_positions.length < c.inputs.k_positions.length)).toBe(true);
    for (const [i, { inputs, output }] of cases.entries()) {
      const got = M.decayBias(inputs.log_forget, inputs.q_positions, inputs.k_positions);
      allClose(got, output, `decay_bias case ${i}`);
      got.flat(3).forEach((v, j) => expect(v === -Infinity, `decay_bias case ${i} masked entry ${j}`).toBe(output.flat(3)[j] === null));
    }
  });

  test("stick_breaking_weights (grouped heads; a query's own key and later ones weigh exactly 0)", () => {
    const cases = load("stick_breaking_weights");
    expect(cases.some((c) => c.inputs.q[0].length > c.inputs.k[0].length)).toBe(true);
    for (const [i, { inputs, output }] of cases.entries()) {
      const got = M.stickBreakingWeights(inputs.q, inputs.k, inputs.q_positions, inputs.k_positions);
      allClose(got, output, `stick_breaking_weights case ${i}`);
      got.flat(2).forEach((row, r) => expect(sum(row), `case ${i} row ${r}: at most the whole stick`).toBeLessThanOrEqual(1 + 1e-12));
      got.flat(3).forEach((v, j) => expect(v === 0, `case ${i} entry ${j} is zero`).toBe(output.flat(3)[j] === 0));
    }
  });

  test("path_weights (grouped heads; queries after cached keys; rows sum to 1)", () => {
    const cases = load("path_weights");
    expect(cases.some((c) => c.inputs.q[0].length > c.inputs.k[0].length)).toBe(true);
    expect(cases.some((c) => c.inputs.q[0][0].length < c.inputs.k[0][0].length)).toBe(true);
    for (const [i, { inputs, output }] of cases.entries()) {
      const got = M.pathWeights(inputs.q, inputs.k, inputs.w, inputs.beta);
      allClose(got, output, `path_weights case ${i}`);
      got.flat(2).forEach((row, r) => expect(Math.abs(sum(row) - 1), `case ${i} row ${r}`).toBeLessThan(1e-12));
    }
  });

  test("ssmax_factors", () => {
    for (const [i, { inputs, output }] of load("ssmax_factors").entries()) allClose(M.ssmaxFactors(inputs.s, inputs.n), output, `ssmax_factors case ${i}`);
  });

  test("llama4_temperature (exactly 1 before its first step)", () => {
    for (const [i, { inputs, output }] of load("llama4_temperature").entries()) {
      const got = M.llama4Temperature(inputs.positions, inputs.floor, inputs.temperature);
      allClose(got, output, `llama4_temperature case ${i}`);
      inputs.positions.forEach((p: number, j: number) => p < inputs.floor - 1 && expect(got[j], `case ${i} position ${p}`).toBe(1));
    }
  });
});

describe("the checker itself", () => {
  test("allClose reports the worst index", () => {
    expect(() => allClose([[0, 1], [2, 3]], [[0, 1], [2, 3.5]], "demo", TOL, false)).toThrow(/worst index \[1\]\[1\]: TypeScript 3 vs Python 3.5/);
  });
});

afterAll(() => {
  console.log(`largest TypeScript–Python difference: ${worstOverall.diff.toExponential(2)} at ${worstOverall.where || "(none)"}`);
  console.log(`per fixture: ${[...worstByFixture].map(([name, diff]) => `${name} ${diff.toExponential(2)}`).join(", ")}`);
});
