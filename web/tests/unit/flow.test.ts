// The Models page's first-layer flow (src/pages/models-flow.ts): its shape labels, the pin a click or tap toggles,
// and the words of the explanation line, which must carry the numbers the tables print (sig, 3 significant digits,
// trailing zeros kept).
import { expect, test } from "vitest";
import { explainAttention, explainBias, explainNext, explainRotation, explainSum, shapeText, toggle, tokenOfAttr } from "../../src/pages/models-flow";

test("shapeText names the dims by symbol and by this text's numbers, once when they are the same", () => {
  expect(shapeText("x", ["B", "T", "C"], [1, 97, 128])).toBe("x [B, T, C] = [1, 97, 128]");
  expect(shapeText("ids", ["1", "4"], [1, 4])).toBe("ids [1, 4]");
  expect(shapeText("pos rows", ["T", "C"], [64, 128])).toBe("pos rows [T, C] = [64, 128]");
});

test("a click pins a token, a second click on it lets go, a click on another moves the pin", () => {
  expect(toggle(null, 3)).toBe(3);
  expect(toggle(3, 3)).toBeNull();
  expect(toggle(3, 5)).toBe(5);
  expect(toggle(0, 0)).toBeNull(); // token 0 is a token, not "nothing"
});

test("tokenOfAttr reads a token index and nothing else", () => {
  expect(tokenOfAttr("0")).toBe(0);
  expect(tokenOfAttr("12")).toBe(12);
  for (const bad of [null, undefined, "", "-1", "1.5", "x"]) expect(tokenOfAttr(bad)).toBeNull();
});

test("the sum's words: token row + position row = x, with the numbers as the tables print them", () => {
  expect(explainSum(3, "the", 5, 0.01234, -0.004, 0.00834)).toBe("token 3 'the', channel 5: token row 0.0123 + position row −0.00400 = 0.00834 entering block 0");
  expect(explainSum(0, "<|endoftext|>", 0, 0.5, null, 0.5, "this scheme adds its bias to the attention scores instead")).toBe(
    "token 0 '<|endoftext|>', channel 0: token row 0.500 + nothing = 0.500 entering block 0 (this scheme adds its bias to the attention scores instead)",
  );
  // a scheme with nothing added never writes a bias into x's line
  expect(explainSum(1, "a", 2, 0.1, null, 0.1)).not.toMatch(/bias|position row/);
});

test("a map cell's words: attention as a probability, a bias as what goes onto the score, masked as masked", () => {
  expect(explainAttention(4, "cat", 1, "the", 0.2134)).toBe("query 'cat' (position 4) attends to key 'the' (position 1) with probability 0.213");
  expect(explainAttention(1, "the", 4, "cat", null)).toBe("query 'the' (position 1) cannot see key 'cat' (position 4): a future token, masked");
  expect(explainBias(4, "cat", 1, "the", -0.75, 2)).toBe("head 2: −0.750 is added to the score of query 'cat' (position 4) on key 'the' (position 1), before the softmax; x is untouched");
  expect(explainBias(1, "a", 2, "b", null, 0)).toMatch(/masked$/);
});

test("rotation and next-token words carry both numbers and the token", () => {
  expect(explainRotation("q", 7, "(", 1, 2, 0.5, -0.25)).toBe("q of token 7 '(', head 1, channel 2: 0.500 before the rotation, −0.250 after it (turned by an angle that grows with position 7)");
  expect(explainNext(5, "wor", "ds", 0.2412, true)).toBe("after token 5 'wor', the model gives 'ds' probability 0.241 (the text's own next token)");
  expect(explainNext(5, "wor", "d", 0.648, false)).toBe("after token 5 'wor', the model gives 'd' probability 0.648");
});
