/** The Results page's file checks and helpers, on the labelled test samples in tests/fixtures/ (never on the site). */
import { readFileSync } from "node:fs";
import { resolve } from "node:path";
import { expect, test } from "vitest";
import { checkEmbeddings, checkLength, nearest } from "../../src/data";
import { extractDef } from "../../plugins/octlm";

const sample = (name: string) => JSON.parse(readFileSync(resolve(import.meta.dirname, "../fixtures", name), "utf-8"));

test("the sample length.json passes, and broken ones list every problem", () => {
  expect(checkLength(sample("test-sample-length.json")).ok).toBe(true);
  const bad = checkLength({ schema: 2, command: 1, train_length: "x", eval_lengths: [1], rows: [{ scheme: "rope" }] });
  expect(bad.ok).toBe(false);
  if (!bad.ok) {
    expect(bad.errors.length).toBeGreaterThanOrEqual(6);
    expect(bad.errors.join("\n")).toMatch(/schema must be 1/);
  }
});

test("the sample embeddings.json passes; a ragged table does not", () => {
  const good = sample("test-sample-embeddings.json");
  expect(checkEmbeddings(good).ok).toBe(true);
  const ragged = { ...good, token_table: good.token_table.map((r: number[], i: number) => (i ? r : r.slice(1))) };
  expect(checkEmbeddings(ragged).ok).toBe(false);
});

test("nearest neighbours by cosine similarity", () => {
  const table = [[1, 0], [0.9, 0.1], [-1, 0], [0, 1]];
  expect(nearest(table, 0, 2).map((n) => n.index)).toEqual([1, 3]);
});

test("code excerpts are cut by their def line", () => {
  const text = "import x\n\n\ndef a(x):\n    return x\n\n\ndef b(\n    y,\n):\n    if y:\n\n        return 1\n    return 2\n\n\nclass K:\n    def a(self):\n        return 3\n";
  expect(extractDef(text, "b").code).toBe("def b(\n    y,\n):\n    if y:\n\n        return 1\n    return 2");
  expect(extractDef(text, "b").line).toBe(8);
  expect(extractDef(text, "a").code).toBe("def a(x):\n    return x");
  expect(extractDef(text, "K.a").code).toBe("def a(self):\n    return 3");
  expect(() => extractDef(text, "nope")).toThrow(/no def nope/);
});
