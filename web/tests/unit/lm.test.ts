/** The Models page's arithmetic (src/lm.ts) on inputs whose answers are known in closed form. */
import { existsSync, readFileSync, readdirSync } from "node:fs";
import { resolve } from "node:path";
import { expect, test } from "vitest";
import { Tokenizer } from "@huggingface/tokenizers";
import { EOT, bitsPerToken, block, byteOfChar, difference, headWindow, largestMagnitude, logSoftmax, meanOf, megabytes, movingMean, mulberry32, nextTokenDistribution, progressText, promptTokenizerJson, range, sampleFrom, showBytes, signalOfHooks, tokenBytes } from "../../src/lm";

// Closed-form answers computed in float64; the code is float64 too, so only the last bit or two may differ.
const TOL = 1e-15;
const near = (got: number[], want: number[]) => {
  expect(got.length).toBe(want.length);
  got.forEach((g, i) => expect(Math.abs(g - want[i])).toBeLessThanOrEqual(TOL));
};

test("logSoftmax: log p for logits 0 and ln 3 is log 1/4 and log 3/4, and shifting the logits changes nothing", () => {
  near([...logSoftmax([0, Math.log(3)])], [Math.log(0.25), Math.log(0.75)]);
  // no overflow at 1000; 1000 + ln 3 is itself rounded to the spacing of doubles near 1000 (1.1e-13): measured 3.8e-15
  const shifted = logSoftmax([1000, 1000 + Math.log(3)]);
  [Math.log(0.25), Math.log(0.75)].forEach((want, i) => expect(Math.abs(shifted[i] - want)).toBeLessThanOrEqual(1.2e-13));
});

test("temperature divides the logits: exp(l / T) for logits 0, ln 2, ln 4", () => {
  const logits = [0, Math.log(2), Math.log(4)];
  const at = (T: number, k = 0) => nextTokenDistribution(logits, T, k);
  expect(at(1).map((c) => c.id)).toEqual([2, 1, 0]); // most probable first
  near(at(1).map((c) => c.prob), [4 / 7, 2 / 7, 1 / 7]);
  near(at(0.5).map((c) => c.prob), [16 / 21, 4 / 21, 1 / 21]); // squared: 1, 4, 16
  const s = 1 + Math.SQRT2 + 2; // square roots: 1, √2, 2
  near(at(2).map((c) => c.prob), [2 / s, Math.SQRT2 / s, 1 / s]);
  expect(at(0)).toEqual([{ id: 2, prob: 1 }]); // greedy
  expect(() => at(-1)).toThrow(/temperature -1/);
});

test("top-k keeps the k largest logits and renormalises; ties go to the lower id", () => {
  const logits = [0, Math.log(2), Math.log(4)];
  near(nextTokenDistribution(logits, 1, 2).map((c) => c.prob), [2 / 3, 1 / 3]);
  expect(nextTokenDistribution(logits, 1, 1)).toEqual([{ id: 2, prob: 1 }]);
  expect(nextTokenDistribution(logits, 1, 99).length).toBe(3); // k past V keeps all
  const tied = nextTokenDistribution([1, 3, 2, 3], 1, 2);
  expect(tied.map((c) => c.id)).toEqual([1, 3]);
  near(tied.map((c) => c.prob), [0.5, 0.5]);
});

test("sampleFrom picks the first candidate whose cumulative probability passes u", () => {
  const c = [{ id: 2, prob: 4 / 7 }, { id: 1, prob: 2 / 7 }, { id: 0, prob: 1 / 7 }];
  expect([0, 0.5, 0.571, 0.572, 0.857, 0.858, 0.999999].map((u) => sampleFrom(c, u))).toEqual([2, 2, 2, 1, 1, 0, 0]);
  expect(sampleFrom([{ id: 5, prob: 0.5 }, { id: 6, prob: 0.5 - 1e-12 }], 1 - 1e-13)).toBe(6); // rounding short of 1
});

test("mulberry32 repeats for a seed, and its first draws for seed 1 are fixed", () => {
  const r = mulberry32(1);
  expect([r(), r(), r()]).toEqual([0.6270739405881613, 0.002735721180215478, 0.5274470399599522]);
  const a = mulberry32(42);
  const b = mulberry32(42);
  for (let i = 0; i < 100; i++) {
    const x = a();
    expect(x).toBe(b());
    expect(x >= 0 && x < 1).toBe(true);
  }
});

test("bitsPerToken: row t predicts token t + 1; p = 1/2 is 1 bit, p = 3/4 is −log2 0.75", () => {
  // V = 2, ids 0 1 0: row 0 (0, 0) gives p(1) = 1/2; row 1 (ln 3, 0) gives p(0) = 3/4; row 2 predicts nothing
  const logits = [0, 0, Math.log(3), 0, 9, -9];
  near(bitsPerToken(logits, [0, 1, 0], 2), [1, -Math.log2(0.75)]);
  expect(-Math.log2(0.75)).toBe(0.4150374992788438);
  expect(bitsPerToken(Float32Array.from([0, 0]), [1], 2)).toEqual([]);
  expect(() => bitsPerToken(new Float32Array(5), [0, 1], 2)).toThrow(/5 numbers, not 2 × 2/);
});

test("movingMean is a trailing mean with a shorter window at the start; meanOf is a slice mean", () => {
  expect(movingMean([1, 2, 3, 4], 2)).toEqual([1, 1.5, 2.5, 3.5]);
  expect(movingMean([1, 2, 3, 4], 1)).toEqual([1, 2, 3, 4]);
  expect(movingMean([4, 8, 0], 8)).toEqual([4, 6, 4]);
  expect(meanOf([1, 2, 3, 4], 1, 3)).toBe(2.5);
  expect(meanOf([1, 2, 3, 4], 2)).toBe(3.5);
  expect(meanOf([1, 2], 5)).toBeNaN();
});

test("byte-level tokens map back to their bytes and show readably", () => {
  const map = byteOfChar();
  expect(map.size).toBe(256);
  expect(new Set(map.values()).size).toBe(256);
  expect([...tokenBytes("Ġ")]).toEqual([32]);
  expect([..."ĉčĊ"].map((c) => tokenBytes(c)[0])).toEqual([9, 13, 10]);
  expect([...tokenBytes("ðŁĻĤ")]).toEqual([0xf0, 0x9f, 0x99, 0x82]); // 🙂
  expect(showBytes(tokenBytes("ðŁĻĤ"))).toBe("🙂");
  expect(showBytes(tokenBytes("ðŁ"))).toBe("F0 9F"); // half an emoji is bytes, not a character
  expect(showBytes(tokenBytes("ĠxĉčĊ"))).toBe("·x→␍↵");
  expect(showBytes(tokenBytes("Ã©"))).toBe("é");
  expect(new TextDecoder().decode(tokenBytes("<|endoftext|>"))).toBe("<|endoftext|>"); // not in the alphabet
});

// The same table from octlm/data/tokenizer.py's byte_of_char, written by scripts/site-models into the fixture.
const REFERENCE = resolve(import.meta.dirname, "../fixtures/site-models-reference.json");
test("byteOfChar equals octlm's byte_of_char, entry for entry", () => {
  expect(existsSync(REFERENCE)).toBe(true);
  const python = JSON.parse(readFileSync(REFERENCE, "utf-8")).byte_of_char as Record<string, number>;
  expect(Object.fromEntries(byteOfChar())).toEqual(python);
});

// The page's tokenizer (src/engine.ts) on the shipped tokenizer.json against octlm's Python ids for the same texts.
const SHIPPED = resolve(import.meta.dirname, "../../public/models/learned/tokenizer.json");
test("the page encodes as octlm generate does: EOT first, then Python's ids; a literal <|endoftext|> stays text", () => {
  const json = JSON.parse(readFileSync(SHIPPED, "utf-8"));
  const eot = json.model.vocab[EOT] as number;
  expect(eot).toBe(0);
  const tokenizer = new Tokenizer(promptTokenizerJson(json), {});
  const ref = JSON.parse(readFileSync(REFERENCE, "utf-8"));
  const cases: [string, number[]][] = [[ref.text, ref.ids], ...ref.extra_texts.map((e: { text: string; ids: number[] }) => [e.text, e.ids])];
  expect(cases.some(([text]) => text.includes(EOT))).toBe(true);
  for (const [text, ids] of cases) {
    const encoded = tokenizer.encode(text, { add_special_tokens: true });
    expect(Array.from(encoded.ids)).toEqual([eot, ...ids]);
    expect(encoded.tokens[0]).toBe(EOT);
    expect(Array.from(tokenizer.encode(text, { add_special_tokens: false }).ids)).toEqual(ids);
  }
  expect(() => promptTokenizerJson({ ...json, model: { ...json.model, vocab: {} } })).toThrow(/no <\|endoftext\|> token/);
  expect(json.added_tokens.length).toBe(1); // the shipped file itself is left as it is
});

test("megabytes and progressText say sizes as the page states them before and during a download", () => {
  expect(megabytes(2374532)).toBe("2.37 MB");
  expect(megabytes(14239897)).toBe("14.2 MB");
  expect(megabytes(123456789)).toBe("123 MB");
  expect(progressText(0, 2374532)).toBe("0.0 of 2.4 MB");
  expect(progressText(1234567, 2374532)).toBe("1.2 of 2.4 MB");
  expect(progressText(2374532, 2374532)).toBe("2.4 of 2.4 MB");
});

test("signalOfHooks: where a registered scheme's position signal enters, as model.json spells it", () => {
  // web/fixtures/schemes.json's hooks for every registered scheme: embed rows, rotate q and k, a bias on the
  // scores (contextual or not), an attention rule of its own, or nothing
  const registry = JSON.parse(readFileSync(resolve(import.meta.dirname, "../../fixtures/schemes.json"), "utf-8")).schemes as { name: string; hooks: string[] }[];
  // and octlm's own answer (octlm/interop/onnx_export.py position_signal) in every shipped model.json that has one
  const models = resolve(import.meta.dirname, "../../public/models");
  for (const name of readdirSync(models).filter((n) => existsSync(resolve(models, n, "model.json")))) {
    const info = JSON.parse(readFileSync(resolve(models, name, "model.json"), "utf-8"));
    const hooks = registry.find((r) => r.name === info.scheme)?.hooks;
    if (info.signal !== undefined && hooks) expect([name, signalOfHooks(hooks)]).toEqual([name, info.signal]);
  }
  const want: Record<string, string> = { learned: "embed", sinusoidal: "embed", rope: "rotate", "p-rope": "rotate", xpos: "rotate", alibi: "bias", t5: "bias", fire: "bias", cope: "bias", fox: "attend", path: "attend", "stick-breaking": "attend", nope: "none" };
  for (const s of registry) if (s.name in want) expect([s.name, signalOfHooks(s.hooks)]).toEqual([s.name, want[s.name]]);
  expect(signalOfHooks([])).toBe("none");
  expect(signalOfHooks(["bias", "attend"])).toBe("attend"); // a scheme that computes attention itself decides
});

test("block, difference and headWindow slice row-major outputs without changing a number", () => {
  // [2, 3, 4] as if [H, T, D]: entry (h, t, d) holds 100h + 10t + d
  const data = Float32Array.from({ length: 24 }, (_, i) => 100 * Math.floor(i / 12) + 10 * Math.floor((i % 12) / 4) + (i % 4));
  expect(block(data, 4, [0, 2], 1, 3)).toEqual([[1, 2], [21, 22]]);
  expect(block(data, 4, [1], 2, 9, 12)).toEqual([[112, 113]]); // head 1; columns past D dropped
  expect(difference([[3, 5]], [[1, 1.5]])).toEqual([[2, 3.5]]);
  expect(largestMagnitude([0.5, -2, 1])).toBe(2);
  expect(range(3, 6)).toEqual([3, 4, 5]);
  // [H = 2, T = 3, T = 3]: value 9h + 3q + k; key after query is masked
  const map = Float32Array.from({ length: 18 }, (_, i) => i);
  expect(headWindow(map, 3, 1, [1, 2], [0, 2])).toEqual([
    [{ value: 12, masked: false }, { value: 14, masked: true }],
    [{ value: 15, masked: false }, { value: 17, masked: false }],
  ]);
});
