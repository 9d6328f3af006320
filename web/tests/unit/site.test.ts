/** The pure helpers behind the pages: colour scales, ticks, contrast, and the build-time cuts from octlm/. */
import { readFileSync } from "node:fs";
import { resolve } from "node:path";
import { expect, test } from "vitest";
import { extractClass, extractConst, extractDef, extractRaise, parseStrings } from "../../plugins/octlm";
import { fields, fillMessage } from "../../src/messages";
import { SCHEMES, UNBOUNDED_FIELD, actsWhere, schemeRows, tooLongMessage, unboundedSchemes } from "../../src/schemes";
import { COSINE, colourRGB, contrastRatio, hexRGB, indexTicks, niceTicks, scaleFor } from "../../src/scale";
import { PALETTE, PAPER, seriesColours } from "../../src/pages/results-palette";

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
  expect(PAPER).toBe(readFileSync(resolve(import.meta.dirname, "../../src/style.css"), "utf-8").match(/--paper:\s*(#[0-9a-f]{6})/i)![1]);
  for (const c of PALETTE) expect(contrastRatio(hexRGB(c), hexRGB(PAPER)), c).toBeGreaterThanOrEqual(3);
});

test("the palette has a colour of its own for every scheme, RoPE variant and a few experiment rows", () => {
  // every registered scheme, RoPE's four extension variants (pi, ntk, dynamic, yarn), and experiment rows such as rope+ssmax
  const needed = SCHEMES.length + 4 + 4;
  expect(PALETTE.length).toBeGreaterThanOrEqual(needed);
  expect(new Set(PALETTE.map((c) => c.toUpperCase())).size).toBe(PALETTE.length);
  expect(seriesColours(PALETTE.length)).toEqual(PALETTE);
  // past the palette, generated colours: still all different, still 3:1
  const many = seriesColours(60);
  expect(many.slice(0, PALETTE.length)).toEqual(PALETTE);
  expect(new Set(many).size).toBe(60);
  for (const c of many) expect(contrastRatio(hexRGB(c), hexRGB(PAPER)), c).toBeGreaterThanOrEqual(3);
  expect(seriesColours(3)).toEqual(PALETTE.slice(0, 3));
});

test("every cosine map's scale is the fixed diverging one over [−1, 1]: white at 0, the ends at ±1", () => {
  expect(COSINE).toEqual({ kind: "diverging", min: -1, max: 1 });
  expect(colourRGB(COSINE, 0)).toEqual([247, 247, 247]);
  expect(colourRGB(COSINE, 1)).toEqual([230, 97, 1]);
  expect(colourRGB(COSINE, -1)).toEqual([33, 102, 172]);
  expect(colourRGB(COSINE, 0.5)).toEqual([253, 184, 99]);
});

test("f-strings split into text and fields", () => {
  expect(parseStrings(`f"a {x} b {{y}} " "c\\"d" f'{z}'`.replace(`f'{z}'`, `f"{z}"`))).toEqual(["a ", { expr: "x" }, ' b {y} c"d', { expr: "z" }]);
  expect(() => parseStrings(`"a" + b`)).toThrow(/not a string literal/);
});

test("the learned table's error is cut from octlm/model/decoder.py with the fields the page fills in", () => {
  const msg = extractRaise(source("model/decoder.py"), "Decoder.check_ids", "longer than the learned position table");
  expect(fields(msg.parts)).toEqual(["length", "limit", "limit", UNBOUNDED_FIELD]);
  // the unbounded list is the registry's (schemes.json), in table order: every scheme but the learned table
  const unbounded = unboundedSchemes();
  expect(unbounded).toEqual(SCHEMES.filter((s) => s.name !== "learned").map((s) => s.name));
  expect(unbounded).toContain("rope");
  expect(tooLongMessage(msg.parts, 129, 128)).toBe(
    `a sequence of length 129 is longer than the learned position table (128 rows); use at most 128 tokens, or a scheme with no maximum: ${unbounded.join(", ")}`,
  );
  expect(() => fillMessage(msg.parts, { length: 1 })).toThrow(/does not fill in/);
});

test("the code the positions page cuts from octlm/ is there: subfolders resolve, classes and methods are found", () => {
  const embed = extractDef(source("positions/absolute.py"), "LearnedPositions.embed", "octlm/positions/absolute.py");
  expect(embed.code).toMatch(/^def embed\(self, x: Tensor, positions: Tensor\) -> Tensor:\n\s+return add_positions\(x, self\.table\(positions\)\)$/);
  expect(source("positions/absolute.py").split("\n")[embed.line - 1].trim()).toBe(embed.code.split("\n")[0]);
  expect(extractDef(source("positions/scheme.py"), "register").code).toMatch(/^def register\(cls/);
  expect(extractDef(source("positions/scheme.py"), "build_positions").code).toMatch(/SCHEMES\.choose\(config\.position\)/);
  expect(() => extractDef(source("positions/scheme.py"), "LearnedPositions.embed")).toThrow(/no class LearnedPositions/);
});

test("extractConst reads a module-level tuple or list of strings", () => {
  const text = 'X = 1\nNAMES = ("a", \'b\',\n    "c")\nOTHER: list[str] = ["d"]\n';
  expect(extractConst(text, "NAMES")).toEqual({ file: "<python>", line: 2, value: ["a", "b", "c"] });
  expect(extractConst(text, "OTHER").value).toEqual(["d"]);
  expect(() => extractConst(text, "MISSING")).toThrow(/no MISSING = /);
});

test("the scheme table: every registered scheme once, in table order, each where it acts, variants after their family", () => {
  const rows = schemeRows();
  expect(rows.map((r) => r.name)).toEqual(SCHEMES.map((s) => s.name));
  expect(new Set(rows.map((r) => r.name)).size).toBe(rows.length);
  const byName = Object.fromEntries(rows.map((r) => [r.name, r]));
  expect(byName.learned).toMatchObject({ acts: "embed (added to the token vectors)", max: "model.context_length (one row per position)", family: "learned", href: "./positions.html#limits" });
  expect(byName.rope).toMatchObject({ acts: "rotate (queries and keys)", max: "none", href: "./rope.html" });
  expect(byName.alibi.acts).toBe("bias (on the scores, by distance)");
  expect(byName.nope).toMatchObject({ acts: "nowhere (the causal mask only)", max: "none" });
  expect(actsWhere(["contextual_bias"])).toBe("contextual bias (on the scores, from q and k)");
  // the schemes that compute attention themselves: one hook, said in words; a cost only where octlm states one
  for (const name of ["fox", "path", "stick-breaking"]) expect(byName[name], name).toMatchObject({ acts: "attention itself (weights computed by the scheme, from the content)", max: "none" });
  for (const s of SCHEMES) expect(byName[s.name].cost, s.name).toBe(s.cost === "" ? "—" : s.cost);
  expect(byName.path.cost).toMatch(/T²/);
  expect(byName.rope.cost).toBe("—");
  // a variant sits in its family's block: after the family's own row, before the next family starts
  const names = rows.map((r) => r.name);
  for (const r of rows.filter((r) => r.family !== r.name)) {
    const block = names.filter((n) => byName[n].family === r.family);
    expect(names.slice(names.indexOf(block[0]), names.indexOf(block[0]) + block.length), `${r.name} in the ${r.family} block`).toEqual(block);
    expect(block[0]).toBe(r.family);
  }
  // every link goes to a page of the site (and, with a #, to an id on it)
  for (const r of rows.filter((r) => r.href)) {
    const [file, id] = r.href!.replace("./", "").split("#");
    const html = readFileSync(resolve(import.meta.dirname, "../..", file), "utf-8");
    if (id) expect(html, `${r.href}`).toContain(`id="${id}"`);
  }
});

test("a class is cut whole, up to the next top-level line", () => {
  const cls = extractClass(source("positions/scheme.py"), "PositionScheme");
  expect(cls.code.startsWith("class PositionScheme(nn.Module):")).toBe(true);
  expect(cls.code).toMatch(/def bias\(/);
  expect(cls.code).not.toMatch(/class NoPositions/);
});
