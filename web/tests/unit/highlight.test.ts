// The build-time Python highlighter of the code excerpts (plugins/octlm.ts): the pieces join back to the source
// exactly, line by line, and each kind of token is found where a reader would see it.
import { readFileSync, readdirSync } from "node:fs";
import { join, resolve } from "node:path";
import { expect, test } from "vitest";
import { highlightPython } from "../../plugins/octlm";

const OCTLM = resolve(import.meta.dirname, "../../../octlm");
const kinds = (code: string) => highlightPython(code).flat().filter(([k]) => k).map(([k, t]) => `${k}:${t}`);

test("joined, the pieces are the source, line for line, for every file of octlm/positions and octlm/model", () => {
  for (const dir of ["positions", "model"])
    for (const f of readdirSync(join(OCTLM, dir)).filter((n) => n.endsWith(".py"))) {
      const code = readFileSync(join(OCTLM, dir, f), "utf-8");
      expect(highlightPython(code).map((l) => l.map(([, t]) => t).join(""))).toEqual(code.split("\n"));
    }
});

test("keywords, names defined, decorators, strings, comments, numbers and constants", () => {
  const code = ['@register', 'class Rope(PositionScheme):', '    """Rotary.', '    # not a comment"""', '    def embed(self, x):  # why', "        return x * 1.5e-3 if x is not None else f'{x}'"].join("\n");
  expect(kinds(code)).toEqual([
    "dec:@register",
    "kw:class",
    "def:Rope",
    'str:"""Rotary.',
    'str:    # not a comment"""',
    "kw:def",
    "def:embed",
    "self:self",
    "com:# why",
    "kw:return",
    "num:1.5e-3",
    "kw:if",
    "kw:is",
    "kw:not",
    "con:None",
    "kw:else",
    "str:f'{x}'",
  ]);
});
