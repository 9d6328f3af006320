/** The pure helpers behind the pages: colour scales, ticks, contrast, and the build-time cuts from octlm/. */
import { readFileSync } from "node:fs";
import { resolve } from "node:path";
import { expect, test } from "vitest";
import { extractClass, extractConst, extractRaise, parseStrings } from "../../plugins/octlm";
import { fields, fillMessage } from "../../src/messages";
import { contrastRatio, hexRGB, indexTicks, niceTicks, scaleFor } from "../../src/scale";
import { PALETTE } from "../../src/pages/results-palette";

const source = (file: string) => readFileSync(resolve(import.meta.dirname, "../../../octlm", file), "utf-8");

test("scaleFor is diverging only when the values change sign, and fitted otherwise", () => {
  expect(scaleFor([0.17, 0.5, 1])).toEqual({ kind: "sequential", min: 0.17, max: 1 });
  expect(scaleFor([-2, 0.5])).toEqual({ kind: "diverging", min: -2, max: 2 });
  expect(scaleFor([-3, -1, 0, -Infinity])).toEqual({ kind: "sequential", min: -3, max: 0 });
  // rounding noise around an exact 0 is not a sign change
  expect(scaleFor([-1e-17, 0.3, 1]).kind).toBe("sequential");
});

test("ticks fall at 1, 2 or 5 × 10^k and cover the data", () => {
  expect(niceTicks(1.8, 2.23, 5).ticks).toEqual([1.8, 1.9, 2, 2.1, 2.2, 2.3]);
  expect(niceTicks(0.17, 1, 5).ticks).toEqual([0, 0.2, 0.4, 0.6, 0.8, 1]);
  expect(indexTicks(64)).toEqual([0, 10, 20, 30, 40, 50, 63]);
  expect(indexTicks(4)).toEqual([0, 1, 2, 3]);
  expect(indexTicks(256)).toEqual([0, 50, 100, 150, 200, 255]);
});

test("contrast ratio is WCAG's, and every Results series has 3:1 on the page", () => {
  expect(contrastRatio([0, 0, 0], [255, 255, 255])).toBeCloseTo(21, 10);
  expect(contrastRatio(hexRGB("#F0E442"), hexRGB("#fdfdfb"))).toBeLessThan(1.4); // the old ALiBi yellow: 1.3
  for (const c of PALETTE) expect(contrastRatio(hexRGB(c), hexRGB("#fdfdfb")), c).toBeGreaterThanOrEqual(3);
});

test("f-strings split into text and fields", () => {
  expect(parseStrings(`f"a {x} b {{y}} " "c\\"d" f'{z}'`.replace(`f'{z}'`, `f"{z}"`))).toEqual(["a ", { expr: "x" }, ' b {y} c"d', { expr: "z" }]);
  expect(() => parseStrings(`"a" + b`)).toThrow(/not a string literal/);
});

test("the learned table's error is cut from octlm/model.py with the fields the page fills in", () => {
  const msg = extractRaise(source("model.py"), "Decoder.check_ids", "longer than the learned position table");
  expect(fields(msg.parts)).toEqual(["length", "limit", "limit", "', '.join(UNBOUNDED_SCHEMES)"]);
  const schemes = extractConst(source("positions.py"), "UNBOUNDED_SCHEMES").value;
  expect(schemes).toContain("rope");
  const text = fillMessage(msg.parts, { length: 129, limit: 128, "', '.join(UNBOUNDED_SCHEMES)": schemes.join(", ") });
  expect(text).toMatch(/^a sequence of length 129 is longer than the learned position table \(128 rows\); use at most 128 tokens/);
  expect(() => fillMessage(msg.parts, { length: 1 })).toThrow(/does not fill in/);
});

test("a class is cut whole, up to the next top-level line", () => {
  const cls = extractClass(source("positions.py"), "PositionScheme");
  expect(cls.code.startsWith("class PositionScheme(nn.Module):")).toBe(true);
  expect(cls.code).toMatch(/def bias\(/);
  expect(cls.code).not.toMatch(/class NoPositions/);
});
