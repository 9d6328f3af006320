/**
 * The position math of octlm/positions/formulas.py and the schemes of octlm/positions/, in TypeScript (float64 throughout).
 *
 * Every function here has a twin there with the same name in snake_case (each fixture's `source` names its
 * file). The fixtures in web/fixtures/ are written by `octlm export fixtures` from the Python side, and
 * tests/unit/parity.test.ts checks each function below against them to 1e-7.
 */

export type Matrix = number[][];
export type RopeLayout = "half" | "interleaved";

/** [length, width]: column 2i of row t is sin(t / base^(2i/width)), column 2i+1 is the cosine. */
export function sinusoidalTable(length: number, width: number, base = 10000): Matrix {
  if (width % 2 !== 0) throw new Error(`sinusoidal table needs an even width, got ${width}`);
  if (length < 0) throw new Error(`sinusoidal table needs a non-negative length, got ${length}`);
  const table: Matrix = [];
  for (let t = 0; t < length; t++) {
    const row = new Array<number>(width);
    for (let i = 0; i < width / 2; i++) {
      const angle = t / Math.pow(base, (2 * i) / width);
      row[2 * i] = Math.sin(angle);
      row[2 * i + 1] = Math.cos(angle);
    }
    table.push(row);
  }
  return table;
}

/** [N, N]: cosine of the angle between every pair of rows (0 where a row is all zeros). */
export function cosineSimilarityMatrix(x: Matrix): Matrix {
  const norms = x.map((row) => Math.sqrt(row.reduce((s, v) => s + v * v, 0)));
  return x.map((a, i) =>
    x.map((b, j) => {
      const denom = norms[i] * norms[j];
      if (denom === 0) return 0;
      let dot = 0;
      for (let c = 0; c < a.length; c++) dot += a[c] * b[c];
      return dot / denom;
    }),
  );
}

/** [headDim / 2]: θ_i = base^(-2i / headDim), the angle per position of channel pair i. */
export function ropeFrequencies(headDim: number, base = 10000): number[] {
  if (headDim % 2 !== 0) throw new Error(`RoPE needs an even head size, got ${headDim}`);
  return Array.from({ length: headDim / 2 }, (_, i) => Math.pow(base, (-2 * i) / headDim));
}

/** The two channels that form pair i of a head of size d, in the given layout. */
export function ropePair(i: number, headDim: number, layout: RopeLayout): [number, number] {
  return layout === "half" ? [i, i + headDim / 2] : [2 * i, 2 * i + 1];
}

/** Rotate the 2-vector (a, b) by angle φ. */
export function rotate(a: number, b: number, phi: number): [number, number] {
  const c = Math.cos(phi);
  const s = Math.sin(phi);
  return [a * c - b * s, a * s + b * c];
}

/** x is [T, D]; row r is rotated as position positions[r]: pair i turns by positions[r]·θ_i. */
export function ropeRotate(x: Matrix, positions: number[], base = 10000, layout: RopeLayout = "half"): Matrix {
  if (x.length !== positions.length) {
    throw new Error(`ropeRotate: ${x.length} rows but ${positions.length} positions`);
  }
  return x.map((row, r) => {
    const d = row.length;
    const theta = ropeFrequencies(d, base);
    const out = row.slice();
    theta.forEach((th, i) => {
      const [p, q] = ropePair(i, d, layout);
      const [a, b] = rotate(row[p], row[q], positions[r] * th);
      out[p] = a;
      out[q] = b;
    });
    return out;
  });
}

function slopesPowerOfTwo(n: number): number[] {
  const start = Math.pow(2, -8 / n);
  return Array.from({ length: n }, (_, i) => Math.pow(start, i + 1));
}

/** [H]: the ALiBi head slopes of Press et al. (their reference recipe for head counts that are not 2^k). */
export function alibiSlopes(nHeads: number): number[] {
  if (!Number.isInteger(nHeads) || nHeads < 1) throw new Error(`ALiBi needs at least one head, got ${nHeads}`);
  const log2 = Math.log2(nHeads);
  if (Number.isInteger(log2)) return slopesPowerOfTwo(nHeads);
  const closest = Math.pow(2, Math.floor(log2));
  const extra = alibiSlopes(2 * closest).filter((_, i) => i % 2 === 0);
  return slopesPowerOfTwo(closest).concat(extra.slice(0, nHeads - closest));
}

/** [H, Tq, Tk]: −slope·(q − k) where k ≤ q, −Infinity where k > q (the causal mask folded in). */
export function alibiBias(slopes: number[], qPositions: number[], kPositions: number[]): number[][][] {
  return slopes.map((m) =>
    qPositions.map((q) => kPositions.map((k) => (k > q ? -Infinity : -m * (q - k)))),
  );
}

/**
 * Causal T5 bucket of a relative position (k − q), as T5's `_relative_position_bucket(bidirectional=False)`.
 * Distances below numBuckets/2 get a bucket each; longer ones share log-spaced buckets up to maxDistance.
 */
export function t5Bucket(relativePosition: number, numBuckets: number, maxDistance: number): number {
  const n = Math.max(-relativePosition, 0);
  const maxExact = Math.floor(numBuckets / 2);
  if (n < maxExact) return n;
  // T5 does this arithmetic in float32; Math.fround keeps the bucket edges where the Python side puts them.
  const f = Math.fround;
  const ratio = f(f(Math.log(f(n / maxExact))) / f(Math.log(maxDistance / maxExact)));
  const large = maxExact + Math.trunc(f(ratio * (numBuckets - maxExact)));
  return Math.min(large, numBuckets - 1);
}

/** [Tq, Tk] bucket ids for every query/key pair. */
export function t5BucketMatrix(qPositions: number[], kPositions: number[], numBuckets: number, maxDistance: number): Matrix {
  return qPositions.map((q) => kPositions.map((k) => t5Bucket(k - q, numBuckets, maxDistance)));
}

/** A small deterministic PRNG (mulberry32) for the "random at initialization" tables on the pages. */
export function rng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** [rows, cols] of roughly normal values (std 1), reproducible from the seed. */
export function randomMatrix(rows: number, cols: number, seed: number): Matrix {
  const next = rng(seed);
  const normal = () => {
    const u = Math.max(next(), 1e-12);
    return Math.sqrt(-2 * Math.log(u)) * Math.cos(2 * Math.PI * next());
  };
  return Array.from({ length: rows }, () => Array.from({ length: cols }, normal));
}

export function dot(a: number[], b: number[]): number {
  return a.reduce((s, v, i) => s + v * b[i], 0);
}

/**
 * The error octlm's `add_positions` raises when `[B, T, C]` token vectors and a `[T', C']` position table do not
 * fit (null when they do): the same words, so that the page shows what octlm prints.
 */
export function addPositionsError(tokenShape: number[], tableShape: number[]): string | null {
  const last2 = tokenShape.slice(-2);
  if (tableShape.length === 2 && tableShape[0] === last2[0] && tableShape[1] === last2[1]) return null;
  const show = (s: number[]) => `[${s.join(", ")}]`;
  return (
    `cannot add position table of shape ${show(tableShape)} to token vectors of shape ${show(tokenShape)}: ` +
    `the position table must be [T, C] = ${show(last2)}`
  );
}

// ---- The newer schemes' formulas (octlm/positions/rotary.py, xpos.py, fire.py, cope.py), each with a twin there.

/** The channels of a head that RoPE rotates: GPT-NeoX's int(headDim × fraction), rounded down to whole pairs. */
export function rotaryDims(headDim: number, fraction = 1): number {
  return Math.floor(Math.trunc(headDim * fraction) / 2) * 2;
}

/**
 * [headDim / 2]: p-RoPE's θ_i (Barbero et al., 2025): RoPE's base^(-2i / headDim) for the round(kept × D/2)
 * highest frequencies (the smallest i, rounded half up), 0 for the rest: pairs that never rotate.
 */
export function propeFrequencies(headDim: number, base = 10000, kept = 0.75): number[] {
  const theta = ropeFrequencies(headDim, base);
  const keep = Math.floor(kept * theta.length + 0.5);
  return theta.map((t, i) => (i < keep ? t : 0));
}

/** [headDim / 2]: xPos's per-pair scale ζ_i = (2i / D + γ) / (1 + γ) (Sun et al., 2022; γ = 0.4). */
export function xposScales(headDim: number, gamma = 0.4): number[] {
  return Array.from({ length: headDim / 2 }, (_, i) => ((2 * i) / headDim + gamma) / (1 + gamma));
}

/** xPos keeps every scale ζ_i^(±t / scaleBase) within 2^±64 (float32 spans 2^±128). */
export const XPOS_SCALE_LIMIT = 64;

/** The number of positions 0 .. L − 1 whose xPos scales stay within 2^±64: L. */
export function xposSafeLength(headDim: number, scaleBase: number, gamma = 0.4): number {
  const slowest = -Math.log(xposScales(headDim, gamma)[0]); // the smallest ζ grows fastest
  return Math.floor((XPOS_SCALE_LIMIT * Math.log(2) * scaleBase) / slowest) + 1;
}

/**
 * [Tq, Tk]: FIRE's MLP input ψ(i − j) / ψ(max(L, i)), ψ(x) = log(c·x + 1) (Li et al., 2024), for query i and
 * key j ≤ i; keys after the query get 0 (the bias masks them). c > 0 and the threshold L > 0.
 */
export function fireInputs(c: number, threshold: number, qPositions: number[], kPositions: number[]): Matrix {
  return qPositions.map((i) => {
    const psi = Math.max(Math.log1p(c * Math.max(i, threshold)), 1e-30); // ψ(max(L, i))
    // a division, as octlm's: the key at distance i ≥ L then gets exactly ψ(i) / ψ(i) = 1
    return kPositions.map((j) => Math.log1p(Math.max(i - j, 0) * c) / psi);
  });
}

/** [H, Tq, Tk]: FIRE's f_h(x) = w2[h] · relu(w1·x + b1) + b2[h] for every entry of x [Tq, Tk]. */
export function fireMlp(x: Matrix, w1: number[], b1: number[], w2: Matrix, b2: number[]): number[][][] {
  return w2.map((row, h) =>
    x.map((xs) =>
      xs.map((v) => {
        let out = b2[h];
        for (let n = 0; n < w1.length; n++) out += row[n] * Math.max(b1[n] + w1[n] * v, 0);
        return out;
      }),
    ),
  );
}

const sigmoid = (z: number) => 1 / (1 + Math.exp(-z));

/**
 * [B, H, Tq, Tk]: CoPE's contextual positions (Golovneva et al., 2024) of queries q [B, H, Tq, D] over keys
 * k [B, Hkv, Tk, D]: p_ij = Σ_{t = j..i} σ(q_i · k_t / √D), at most `limit`; 0 for keys after the query.
 * Query head h reads key head ⌊h / (H / Hkv)⌋. The sum runs from the last key back, as octlm's does.
 */
export function gatedCounts(q: number[][][][], k: number[][][][], qPositions: number[], kPositions: number[], limit: number): number[][][][] {
  return q.map((heads, b) =>
    heads.map((rows, h) => {
      const keys = k[b][Math.floor(h / (heads.length / k[b].length))];
      return rows.map((qi, i) => {
        const inv = 1 / Math.sqrt(qi.length);
        const gates = keys.map((kt, t) => (kPositions[t] > qPositions[i] ? 0 : sigmoid(dot(qi, kt) * inv)));
        const counts = new Array<number>(gates.length);
        let sum = 0;
        for (let t = gates.length - 1; t >= 0; t--) counts[t] = Math.min((sum += gates[t]), limit);
        return counts;
      });
    }),
  );
}

/**
 * [B, H, Tq, Tk]: CoPE's bias z = q · e[p] at fractional positions p = counts ≥ 0, linear between the rows
 * e[⌊p⌋] and e[⌊p⌋ + 1] of table e [npos, D]: z[⌊p⌋] + (p − ⌊p⌋)(z[⌊p⌋ + 1] − z[⌊p⌋]), the step 0 at the last
 * row (counts stop at npos − 1). Between ⌊p⌋ and ⌈p⌉ (the paper's) gives the same values. q [B, H, Tq, D].
 */
export function interpolatedBias(q: number[][][][], table: Matrix, counts: number[][][][]): number[][][][] {
  return q.map((heads, b) =>
    heads.map((rows, h) =>
      rows.map((qi, i) => {
        const z = table.map((e) => dot(qi, e));
        return counts[b][h][i].map((p) => {
          const r = Math.trunc(p);
          const step = r + 1 < z.length ? z[r + 1] - z[r] : 0;
          return z[r] + (p - r) * step;
        });
      }),
    ),
  );
}

// ---- The schemes that compute attention themselves (octlm/positions/forgetting.py, stick_breaking.py,
// householder.py) and the query scaling of octlm/model/decoder.py, each with a twin there.

type Tensor4 = number[][][][];

/**
 * [B, H, Tq, Tk]: FoX's decay bias c_i − c_j (Lin et al., 2025) from every key's log forget gate
 * logForget [B, H, Tk] (each ≤ 0), c_t = logForget[0] + … + logForget[t]; the queries are the last Tq keys.
 * −Infinity for keys after the query. A key's score drops by the log gates of every token after it, up to the query.
 */
export function decayBias(logForget: number[][][], qPositions: number[], kPositions: number[]): Tensor4 {
  return logForget.map((heads) =>
    heads.map((gates) => {
      const c = new Array<number>(gates.length);
      let sum = 0;
      gates.forEach((g, t) => (c[t] = sum += g));
      const first = gates.length - qPositions.length; // the key the first query sits on
      return qPositions.map((qp, i) => kPositions.map((kp, j) => (kp > qp ? -Infinity : c[first + i] - c[j])));
    }),
  );
}

/**
 * [B, H, Tq, Tk]: stick-breaking attention's weights (Tan et al., 2025) of queries q [B, H, Tq, D] over keys
 * k [B, Hkv, Tk, D]: A_ij = β_ij Π (1 − β_im) over the keys m between j and i, β_ij = σ(q_i · k_j / √D), for keys
 * before the query only (0 for the query's own key and later ones). Query head h reads key head ⌊h / (H / Hkv)⌋.
 * Each query breaks its stick from the nearest key back (keys in position order), as the loop below does.
 */
export function stickBreakingWeights(q: Tensor4, k: Tensor4, qPositions: number[], kPositions: number[]): Tensor4 {
  return q.map((heads, b) =>
    heads.map((rows, h) => {
      const keys = k[b][Math.floor(h / (heads.length / k[b].length))];
      return rows.map((qi, i) => {
        const inv = 1 / Math.sqrt(qi.length);
        const weights = new Array<number>(keys.length).fill(0);
        let left = 1; // the stick still unbroken
        for (let j = keys.length - 1; j >= 0; j--) {
          if (kPositions[j] >= qPositions[i]) continue;
          const z = dot(qi, keys[j]) * inv;
          weights[j] = left * sigmoid(z);
          left *= sigmoid(-z); // 1 − β, without the cancellation of 1 − σ(z) for large z
        }
        return weights;
      });
    }),
  );
}

/**
 * [B, H, Tq, Tk]: PaTH's attention weights (Yang et al., 2025): softmax over keys j ≤ i of
 * q_i · H_i H_(i−1) ⋯ H_(j+1) k_j / √D, H_s = I − β_s w_s w_sᵀ, for queries q [B, H, Tq, D] (the last Tq tokens) over
 * keys k [B, Hkv, Tk, D], with every token's direction w [B, Hkv, Tk, D] and strength β [B, Hkv, Tk]. Written as the
 * product itself: key j is turned by H_(j+1), then H_(j+2), …, up to the query's own H_i. 0 for keys after the query.
 * Query head h reads key head ⌊h / (H / Hkv)⌋, with its w and β.
 */
export function pathWeights(q: Tensor4, k: Tensor4, w: Tensor4, beta: number[][][]): Tensor4 {
  return q.map((heads, b) =>
    heads.map((rows, h) => {
      const g = Math.floor(h / (heads.length / k[b].length));
      const [keys, dirs, strengths] = [k[b][g], w[b][g], beta[b][g]];
      return rows.map((qi, r) => {
        const i = keys.length - rows.length + r; // the query's token
        const scores = keys.map((kj, j) => {
          if (j > i) return -Infinity;
          let u = kj.slice();
          for (let s = j + 1; s <= i; s++) {
            const along = strengths[s] * dot(dirs[s], u);
            u = u.map((x, c) => x - along * dirs[s][c]);
          }
          return dot(qi, u) / Math.sqrt(qi.length);
        });
        const top = Math.max(...scores);
        const e = scores.map((s) => Math.exp(s - top));
        const total = e.reduce((a, x) => a + x, 0);
        return e.map((x) => x / total);
      });
    }),
  );
}

/** [H, N]: scalable softmax's query factor s_h · ln n (Nakanishi, 2025) for a query that sees n keys. */
export function ssmaxFactors(s: number[], n: number[]): Matrix {
  return s.map((sh) => n.map((keys) => sh * Math.log(keys)));
}

/**
 * [T]: Llama 4's query factor 1 + τ · ln(1 + ⌊(p + 1) / F⌋) at each position p, for the layers with no position
 * signal (floor F, temperature τ): exactly 1 up to position F − 2, then a step every F positions.
 */
export function llama4Temperature(positions: number[], floor: number, temperature: number): number[] {
  return positions.map((p) => 1 + temperature * Math.log1p(Math.floor((p + 1) / floor)));
}
