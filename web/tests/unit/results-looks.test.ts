/**
 * The Results chart's series looks (issue 46, item 3): every series has its own colour, and two series whose
 * colours look alike (CIE76 below LOOK_ALIKE) never share a dash or a marker, for every chart size up to the
 * palette's length. ALiBi and FIRE, T5 and RoPE PI were the pairs the issue found.
 */
import { describe, expect, test } from "vitest";
import { DASHES, GLYPHS, LOOK_ALIKE, PALETTE, deltaE, glyphPath, seriesLooks } from "../../src/pages/results-palette";

describe("seriesLooks", () => {
  test("deltaE: 0 for one colour, about 100 from black to white", () => {
    expect(deltaE("#882255", "#882255")).toBe(0);
    expect(deltaE("#000000", "#FFFFFF")).toBeCloseTo(100, 0);
  });

  for (const n of [2, 5, 14, 15, PALETTE.length]) {
    test(`${n} series: own colours; look-alike colours never share a dash or a marker`, () => {
      const looks = seriesLooks(n);
      expect(looks).toHaveLength(n);
      expect(new Set(looks.map((l) => l.colour)).size).toBe(n);
      for (const l of looks) {
        expect(DASHES).toContain(l.dash);
        expect(GLYPHS).toContain(l.glyph);
      }
      const clashes: string[] = [];
      looks.forEach((a, i) =>
        looks.slice(i + 1).forEach((b, k) => {
          if (deltaE(a.colour, b.colour) >= LOOK_ALIKE) return;
          if (a.dash === b.dash) clashes.push(`${i} and ${i + 1 + k}: ${a.colour} ${b.colour}, dash "${a.dash}"`);
          if (a.glyph === b.glyph) clashes.push(`${i} and ${i + 1 + k}: ${a.colour} ${b.colour}, marker ${a.glyph}`);
        }),
      );
      expect(clashes).toEqual([]);
    });
  }

  test("the same looks every time (a series keeps its look across redraws)", () => {
    expect(seriesLooks(14)).toEqual(seriesLooks(14));
  });

  test("every marker is a closed path centred where asked", () => {
    for (const g of GLYPHS) {
      const d = glyphPath(g, 100, 50, 10);
      expect(d).toMatch(/^M.*Z$/);
      const nums = (d.match(/-?\d+\.\d+/g) ?? []).map(Number);
      expect(nums.length).toBeGreaterThan(2);
    }
  });
});
