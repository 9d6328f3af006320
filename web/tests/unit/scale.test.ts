/** src/scale.ts: the text on a coloured cell is readable at every value of both ramps (WCAG AA, 4.5:1). */
import { expect, test } from "vitest";
import { COSINE, MASKED_RGB, PROBABILITY, colourRGB, contrastRatio, indexTicks, ink, luminance, niceCeil, niceStep, scaleAttr, scaleOf, sig, signedScale, type RGB } from "../../src/scale";

const INK: Record<string, RGB> = { "#000": [0, 0, 0], "#fff": [255, 255, 255] };

test.each([
  ["sequential [0, 1]", PROBABILITY],
  ["diverging [-1, 1]", COSINE],
])("every value of the %s ramp gets ink with a contrast of at least 4.5", (_, scale) => {
  const worst = Array.from({ length: 1001 }, (_, i) => scale.min + ((scale.max - scale.min) * i) / 1000).map((v) => contrastRatio(colourRGB(scale, v), INK[ink(scale, v)]));
  // the sequential ramp's worst cell is at its mid-grey, ~0.64: 4.58 with black or white (#111 gave 4.41 there)
  expect(Math.min(...worst)).toBeGreaterThanOrEqual(4.5);
});

test("ink picks whichever of black and white contrasts more", () => {
  expect(ink(PROBABILITY, 0)).toBe("#000"); // near-white
  expect(ink(PROBABILITY, 1)).toBe("#fff"); // deep purple
  expect(ink(PROBABILITY, 0.6)).toBe("#000");
  expect(ink(PROBABILITY, 0.65)).toBe("#fff");
});

// ---- one scale per quantity, and one number format per column (issue 46)

test("niceCeil rounds up to 1, 1.2, 1.5, 2, 2.5, 3, 3.5, 4, 5, 6, 7, 8 × 10^k, keeping nice values", () => {
  expect([0.0755, 3.02, 7.5, 2.86, 1, 0.08, 9.1, 1.01, 123].map(niceCeil)).toEqual([0.08, 3.5, 8, 3, 1, 0.08, 10, 1.2, 150]);
  expect(niceCeil(0)).toBe(1);
  expect(niceCeil(NaN)).toBe(1);
});

test("signedScale: diverging, symmetric around 0, ends at the nice ceiling of the largest |value|; masked cells left out", () => {
  // ALiBi's biases are all ≤ 0 (−7.5 … 0): still diverging, so 0 is white as on the Models page
  expect(signedScale([0, -0.5, -7.5, -Infinity])).toEqual({ kind: "diverging", min: -8, max: 8 });
  expect(signedScale([0.0755, -0.03])).toEqual({ kind: "diverging", min: -0.08, max: 0.08 });
});

test("scaleOf: one scale per quantity", () => {
  expect(scaleOf("probability", [0.2, 0.3])).toBe(PROBABILITY);
  expect(scaleOf("one-hot", [0, 1])).toBe(PROBABILITY);
  expect(scaleOf("cosine similarity", [0.4, 1])).toBe(COSINE);
  expect(scaleOf("bias", [-7.5, 0])).toEqual({ kind: "diverging", min: -8, max: 8 });
  expect(scaleOf("embedding", [2.86, -1])).toEqual({ kind: "diverging", min: -3, max: 3 });
  expect(scaleOf("bucket", [0, 5, 31, -Infinity])).toEqual({ kind: "sequential", min: 0, max: 31 });
  expect(scaleAttr(PROBABILITY)).toBe("sequential 0 1");
  expect(scaleAttr(COSINE)).toBe("diverging -1 1");
});

test("the sequential scale runs from the light end at 0 to the dark end at 1", () => {
  expect(luminance(colourRGB(PROBABILITY, 0))).toBeGreaterThan(0.7);
  expect(luminance(colourRGB(PROBABILITY, 1))).toBeLessThan(0.05);
});

// ---- a near-zero weight is drawn pale, not loud (reversed viridis put bright yellow at 0)

test("the sequential ramp starts near-white, not yellow, and darkens at every step to 1", () => {
  const [r, g, b] = colourRGB(PROBABILITY, 0);
  expect(luminance([r, g, b])).toBeGreaterThan(0.85);
  expect(b, `blue ${b} against red ${r}: yellow lacks blue`).toBeGreaterThanOrEqual(r - 10);
  // strictly darker at each tenth, so the ramp reads the same without hue (colour-vision deficiencies, greyscale)
  const lums = Array.from({ length: 11 }, (_, i) => luminance(colourRGB(PROBABILITY, i / 10)));
  for (let i = 1; i < lums.length; i++) expect(lums[i], `${i / 10} against ${(i - 1) / 10}`).toBeLessThan(lums[i - 1]);
  // and at every hundredth, so no stretch between the tenths turns back
  const fine = Array.from({ length: 101 }, (_, i) => luminance(colourRGB(PROBABILITY, i / 100)));
  for (let i = 1; i < fine.length; i++) expect(fine[i]).toBeLessThan(fine[i - 1]);
});

test("no colour of the sequential ramp passes for the masked grey", () => {
  // where the ramp meets the grey in luminance (at ~0.7 on the ramp) only hue tells them apart: it must be far in RGB there
  for (let i = 0; i <= 100; i++) {
    const c = colourRGB(PROBABILITY, i / 100);
    const far = Math.hypot(...c.map((v, k) => v - MASKED_RGB[k]));
    expect(far, `${i / 100}: ${c}`).toBeGreaterThanOrEqual(60);
  }
  // the diverging scale's white midpoint is far lighter than the grey
  expect(contrastRatio(colourRGB(COSINE, 0), MASKED_RGB)).toBeGreaterThan(4.5);
});

// ---- a map's index ticks (issue: 14 beside 15 at T = 16 ran together on a phone)

test.each([
  [2, [0, 1]],
  [5, [0, 1, 2, 3, 4]],
  [16, [0, 2, 4, 6, 8, 10, 12, 15]],
  [19, [0, 5, 10, 15, 18]],
  [33, [0, 5, 10, 15, 20, 25, 32]],
  [64, [0, 10, 20, 30, 40, 50, 63]],
  [100, [0, 20, 40, 60, 80, 99]],
])("indexTicks(%i) is %j: first 0, last n − 1, no two ticks within half a step", (n, want) => {
  const ticks = indexTicks(n);
  expect(ticks).toEqual(want);
  const step = Math.max(1, niceStep(n - 1, 5));
  for (let i = 1; i < ticks.length; i++) expect(ticks[i] - ticks[i - 1], `${ticks[i - 1]} and ${ticks[i]}`).toBeGreaterThan(step / 2);
});

test("indexTicks never leaves two ticks within half a step, for every n up to 300", () => {
  for (let n = 2; n <= 300; n++) {
    const ticks = indexTicks(n);
    const step = Math.max(1, niceStep(n - 1, 5));
    expect([ticks[0], ticks.at(-1)]).toEqual([0, n - 1]);
    for (let i = 1; i < ticks.length; i++) expect(ticks[i] - ticks[i - 1], `n = ${n}: ${ticks}`).toBeGreaterThan(step / 2);
  }
});

test("sig: a fixed count of significant digits, trailing zeros kept, no exponent while the plain number fits", () => {
  expect([6.99, 8.258, 1, 0.1, 0.0316228].map((v) => sig(v, 4))).toEqual(["6.990", "8.258", "1.000", "0.1000", "0.03162"]);
  // the cases the learner saw: 1.987e+4 and -1.597651e-4
  expect(sig(19869.2, 4)).toBe("19870");
  expect(sig(-1.597651e-4, 3)).toBe("−0.000160");
  expect(sig(3.16228e-4, 4)).toBe("0.0003162");
  // rounding that adds a digit before the point keeps the count: 9.996 → 10.0
  expect(sig(9.996, 3)).toBe("10.0");
  expect(sig(-0.5, 3)).toBe("−0.500");
  // only past maxPlain characters (sign not counted): m × 10^k, never "e"
  expect(sig(1.54e-6, 4)).toBe("1.540 × 10⁻⁶");
  expect(sig(-2.2e-16, 2)).toBe("−2.2 × 10⁻¹⁶");
  expect(sig(4.08e9, 3)).toBe("4.08 × 10⁹");
  expect([0, -Infinity, NaN].map((v) => sig(v))).toEqual(["0", "−∞", "n/a"]);
});
