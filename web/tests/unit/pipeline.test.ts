// The Positions page's pipeline (src/pages/positions-pipeline.ts): tensors printed as PyTorch prints them (the
// expected strings are torch 2's own str() of the same tensors), and the broadcast sum's numbers.
import { expect, test } from "vitest";
import { pipeline, size, torchPrint } from "../../src/pages/positions-pipeline";

test("torchPrint is torch's str(): aligned columns, a sign column only when some value is negative, ints as ints", () => {
  expect(torchPrint([[0.5, -1.25, 2.0], [0.125, 3.5, -0.0625]])).toBe("tensor([[ 0.5000, -1.2500,  2.0000],\n        [ 0.1250,  3.5000, -0.0625]])");
  expect(torchPrint([[1.5, 2.25], [0.5, 0.75]])).toBe("tensor([[1.5000, 2.2500],\n        [0.5000, 0.7500]])");
  expect(torchPrint([[3, 14], [159, 2653]], true)).toBe("tensor([[   3,   14],\n        [ 159, 2653]])");
  expect(torchPrint([0, 1, 2, 3], true)).toBe("tensor([0, 1, 2, 3])");
  expect(size([8, 4, 256])).toBe("torch.Size([8, 4, 256])");
});

test("past 1000 numbers torch summarizes each row to its first and last three", () => {
  const a = Array.from({ length: 4 }, (_, i) => Array.from({ length: 256 }, (_, j) => (((i * 256 + j) * 37) % 101) / 25 - 2));
  expect(torchPrint(a)).toBe(
    "tensor([[-2.0000, -0.5200,  0.9600,  ...,  0.7600, -1.8000, -0.3200],\n        [ 1.1600, -1.4000,  0.0800,  ..., -0.1200,  1.3600, -1.2000],\n        [ 0.2800,  1.7600, -0.8000,  ..., -1.0000,  0.4800,  1.9600],\n        [-0.6000,  0.8800, -1.6800,  ..., -1.8800, -0.4000,  1.0800]])",
  );
});

test("the pipeline: rows of context_length ids, each token's row plus its position's row, the same rows for every sequence", () => {
  const ids = [5, 9, 5, 1, 2, 3, 4, 7, 8];
  const p = pipeline(ids, 16, 4, 3, 8);
  expect(p.inputs).toEqual([[5, 9, 5, 1], [2, 3, 4, 7]]); // 9 ids: two full rows, the last id left over
  expect(p.tokenEmbeddings[0][0]).toEqual(p.tokenEmbeddings[0][2]); // id 5 twice: one row of the table
  for (const [b, seq] of p.inputEmbeddings.entries())
    for (const [t, row] of seq.entries()) row.forEach((v, c) => expect(Math.abs(v - p.tokenEmbeddings[b][t][c] - p.posEmbeddings[t][c])).toBeLessThanOrEqual(1e-15));
  expect(p.allclose).toBe(true);
  expect(p.posEmbeddings).toHaveLength(4);
  expect(pipeline(ids, 16, 4, 3, 1).inputs).toHaveLength(1); // batch_size caps the rows
  expect(pipeline([1, 2], 16, 4, 3, 8).inputs).toEqual([]);
});
