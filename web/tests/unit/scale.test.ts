/** src/scale.ts: the text on a coloured cell is readable at every value of both ramps (WCAG AA, 4.5:1). */
import { expect, test } from "vitest";
import { COSINE, PROBABILITY, colourRGB, contrastRatio, ink, type RGB } from "../../src/scale";

const INK: Record<string, RGB> = { "#000": [0, 0, 0], "#fff": [255, 255, 255] };

test.each([
  ["sequential [0, 1]", PROBABILITY],
  ["diverging [-1, 1]", COSINE],
])("every value of the %s ramp gets ink with a contrast of at least 4.5", (_, scale) => {
  const worst = Array.from({ length: 1001 }, (_, i) => scale.min + ((scale.max - scale.min) * i) / 1000).map((v) => contrastRatio(colourRGB(scale, v), INK[ink(scale, v)]));
  // the sequential ramp's worst cell is at its mid-grey, ~0.57: 4.58 with black or white (#111 gave 4.41 at 0.55)
  expect(Math.min(...worst)).toBeGreaterThanOrEqual(4.5);
});

test("ink picks whichever of black and white contrasts more", () => {
  expect(ink(PROBABILITY, 0)).toBe("#000"); // bright yellow
  expect(ink(PROBABILITY, 1)).toBe("#fff"); // deep purple
  expect(ink(PROBABILITY, 0.55)).toBe("#000");
  expect(ink(PROBABILITY, 0.6)).toBe("#fff");
});
