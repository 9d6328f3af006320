/** The multi-series chart logic (src/series.ts): which series coincide, how they are drawn, the key's words, the readout. */
import { expect, test } from "vitest";
import { COINCIDE_FRACTION, LINE_WIDTH, OVER_DASH, UNDER_GAIN, allXs, legendText, nearestX, seriesGap, seriesStyles, valuesAt, type SeriesLike } from "../../src/series";
import { niceTicks } from "../../src/scale";

const line = (name: string, ys: (number | null)[], xs = ys.map((_, i) => i), dash?: string): SeriesLike => ({
  name,
  dash,
  points: xs.map((x, i) => [x, ys[i] ?? NaN] as [number, number]),
});
const fmt2 = (v: number) => v.toFixed(2);

test("the gap of two series is their largest |Δy| over the same x's, and Infinity when the x's differ", () => {
  expect(seriesGap(line("a", [1, 2, 3]), line("b", [1.5, 2, 2.25]))).toBe(0.75);
  expect(seriesGap(line("a", [1, 2, 3]), line("b", [1, 2, 3], [0, 1, 3]))).toBe(Infinity); // x = 2 against x = 3
  expect(seriesGap(line("a", [1, 2, 3]), line("b", [1, 2]))).toBe(Infinity); // b stops early: not the whole range
  expect(seriesGap(line("a", [1]), line("b", [1]))).toBe(Infinity); // one shared point is a dot, not a line
  // a missing value (a "no rows" length) on both sides at the same x still lets them coincide; on one side only, not
  expect(seriesGap(line("a", [1, null, 3]), line("b", [1, null, 3.5]))).toBe(0.5);
  expect(seriesGap(line("a", [1, null, 3]), line("b", [1, 2, 3]))).toBe(Infinity);
  // order of the points does not matter
  expect(seriesGap(line("a", [1, 2]), { name: "b", points: [[1, 2.25], [0, 1]] })).toBe(0.25);
});

test("series apart from every other keep the plain width and their own dash", () => {
  const styles = seriesStyles([line("a", [0, 1]), line("b", [5, 6], undefined, "6 4")], 0.1);
  expect(styles).toEqual([
    { width: LINE_WIDTH, dash: undefined, gap: 0 },
    { width: LINE_WIDTH, dash: "6 4", gap: 0 },
  ]);
});

test("a coinciding series is drawn thinner and dashed on top of a wider first one, and named after it", () => {
  const styles = seriesStyles([line("rope", [1, 2, 3]), line("alibi", [5, 6, 7]), line("p-rope", [1.01, 2, 3.02])], 0.05);
  expect(styles[0]).toEqual({ width: LINE_WIDTH + UNDER_GAIN, dash: undefined, gap: 0 });
  expect(styles[1]).toEqual({ width: LINE_WIDTH, dash: undefined, gap: 0 });
  expect(styles[2].width).toBe(LINE_WIDTH);
  expect(styles[2].dash).toBe(OVER_DASH);
  expect(styles[2].sameAs).toBe("rope");
  expect(styles[2].gap).toBeCloseTo(0.02, 12);
  // just over the tolerance: apart
  expect(seriesStyles([line("a", [1, 2]), line("b", [1, 2.0500001])], 0.05)[1].sameAs).toBeUndefined();
  // exactly at it: together (the tolerance is inclusive)
  expect(seriesStyles([line("a", [1, 2]), line("b", [1, 2.5])], 0.5)[1].sameAs).toBe("a");
});

test("three that coincide stack 7, 4.5 and 2 px; an own dash is kept; a chain that drifts is not one group", () => {
  const three = seriesStyles([line("a", [1, 2]), line("b", [1, 2]), line("c", [1, 2], undefined, "2 2")], 0);
  expect(three.map((s) => s.width)).toEqual([LINE_WIDTH + 2 * UNDER_GAIN, LINE_WIDTH + UNDER_GAIN, LINE_WIDTH]);
  expect(three.map((s) => s.dash)).toEqual([undefined, OVER_DASH, "2 2"]);
  expect(three.map((s) => s.sameAs)).toEqual([undefined, "a", "a"]);
  // b is within 0.08 of a, c within 0.08 of b but 0.16 from a: c is compared with the group's first only
  const chain = seriesStyles([line("a", [1, 2]), line("b", [1.08, 2]), line("c", [1.16, 2])], 0.1);
  expect(chain.map((s) => s.sameAs)).toEqual([undefined, "a", undefined]);
  expect(chain.map((s) => s.width)).toEqual([LINE_WIDTH + UNDER_GAIN, LINE_WIDTH, LINE_WIDTH]);
});

test("the key says which series a coinciding one is drawn on, and how far apart they are", () => {
  const [rope, pRope] = seriesStyles([line("rope", [1, 2]), line("p-rope", [1, 2.004])], 0.01);
  expect(legendText("rope", rope, fmt2)).toBe("rope");
  expect(legendText("p-rope", pRope, (v) => v.toPrecision(2))).toBe("p-rope (same as rope, at most 0.0040 apart)");
  const [, twin] = seriesStyles([line("a", [1, 2]), line("b", [1, 2])], 0);
  expect(legendText("b", twin, fmt2)).toBe("b (same as a)");
});

test("the committed length run: rope and p-rope coincide on the Results chart, no other pair does", () => {
  // bits per byte at 64…1024 tokens, from web/public/data/length.json (octlm experiment length, 3 seeds)
  const rows: [string, number[]][] = [
    ["sinusoidal", [1.959466, 2.025331, 2.089345, 2.130138, 2.173327]],
    ["rope", [1.865748, 1.874171, 1.926195, 2.006245, 2.090525]],
    ["rope (ntk)", [1.885069, 1.876914, 1.887868, 1.951988, 2.0506]],
    ["rope (dynamic)", [1.865748, 1.860832, 1.897926, 1.977552, 2.0506]],
    ["p-rope", [1.86589, 1.874321, 1.926499, 2.006969, 2.092241]],
    ["xpos", [1.864789, 1.865192, 1.89452, 1.93426, 1.974466]],
  ];
  const lengths = [64, 128, 256, 512, 1024];
  const series = rows.map(([name, ys]) => line(name, ys, lengths));
  const span = niceTicks(1.8, 2.2).hi - niceTicks(1.8, 2.2).lo; // the chart's y axis: 1.8 to 2.2
  const styles = seriesStyles(series, COINCIDE_FRACTION * span);
  expect(styles.map((s) => s.sameAs)).toEqual([undefined, undefined, undefined, undefined, "rope", undefined]);
  expect(styles[4].gap).toBeCloseTo(2.092241 - 2.090525, 12);
  expect(styles[1].width).toBe(LINE_WIDTH + UNDER_GAIN);
});

test("the readout: the x drawn nearest the pointer, and each series' value there or null", () => {
  const a = line("a", [10, 20, 30], [64, 128, 256]);
  const b = line("b", [null, 5], [64, 128]);
  expect(allXs([a, b])).toEqual([64, 128, 256]);
  // on a log2 axis 64, 128 and 256 are drawn at 0, 100 and 200 px: nearest in px, not in value (128 is at 100 px)
  const log = (v: number) => 100 * (Math.log2(v) - 6);
  expect(nearestX([64, 128, 256], 149, log)).toBe(128);
  expect(nearestX([64, 128, 256], 151, log)).toBe(256);
  expect(nearestX([64, 128, 256], 150, log)).toBe(128); // a tie goes to the first
  expect(nearestX([], 5, log)).toBeUndefined();
  expect(valuesAt([a, b], 64)).toEqual([{ name: "a", value: 10 }, { name: "b", value: null }]);
  expect(valuesAt([a, b], 256)).toEqual([{ name: "a", value: 30 }, { name: "b", value: null }]);
  expect(valuesAt([a, b], 128)).toEqual([{ name: "a", value: 20 }, { name: "b", value: 5 }]);
});
