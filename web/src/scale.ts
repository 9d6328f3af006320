/**
 * Pure helpers for drawing numbers (no DOM, so vitest checks them directly): colour scales fitted to the data,
 * axis ticks at round values, and the WCAG contrast ratio that the chart colours are chosen against.
 */

export type RGB = [number, number, number];
type Stop = [number, RGB];

// A diverging blue–white–orange for signed values, a near-white to deep purple ramp (ColorBrewer's BuPu) for
// one-signed ones. Both stay distinguishable under the common colour-vision deficiencies. The sequential ramp is
// light at 0 so that a near-zero weight reads as "nothing here" (reversed viridis put a loud yellow there), and its
// luminance falls at every step, so it reads the same in grey; its middle, where the luminance meets the masked
// grey's, is saturated purple, far from grey in hue.
const DIVERGING: Stop[] = [
  [0, [33, 102, 172]],
  [0.25, [146, 197, 222]],
  [0.5, [247, 247, 247]],
  [0.75, [253, 184, 99]],
  [1, [230, 97, 1]],
];
const SEQUENTIAL: Stop[] = [
  [0, [247, 252, 253]],
  [0.25, [191, 211, 230]],
  [0.5, [140, 150, 198]],
  [0.75, [136, 65, 157]],
  [1, [77, 0, 75]],
];
export const MASKED = "#6b6b6b";
export const MASKED_RGB: RGB = [107, 107, 107];

export interface Scale {
  kind: "diverging" | "sequential";
  min: number;
  max: number;
}

/**
 * The one scale of every cosine-similarity map on the site: diverging over the whole range a cosine can take,
 * [−1, 1], whatever the data reach, so that one colour means one similarity on every page and at every setting
 * of a page's controls (a scale fitted to the data would repaint the same value as its slider moves).
 */
export const COSINE: Scale = { kind: "diverging", min: -1, max: 1 };

/**
 * The one scale of every probability on the site (attention weights, a task's accuracy): sequential over the
 * whole range, [0, 1], so that a head that never puts more than 0.9 on a key is not drawn as if it reached 1.
 */
export const PROBABILITY: Scale = { kind: "sequential", min: 0, max: 1 };

/** A diverging scale symmetric around 0 that covers every finite value. */
export function divergingFor(values: number[], atLeast = 1e-9): Scale {
  const m = values.reduce((acc, v) => (Number.isFinite(v) ? Math.max(acc, Math.abs(v)) : acc), atLeast);
  return { kind: "diverging", min: -m, max: m };
}

/**
 * The scale for these values: diverging around 0 (symmetric, so equal sizes get equal strength) when they change
 * sign, otherwise sequential from their own minimum to their own maximum, so that no colour is spent on a range
 * the data never reaches. A sign change smaller than 1e-9 of the range (rounding noise around an exact 0) is
 * not a sign change.
 */
export function scaleFor(values: number[]): Scale {
  let lo = Infinity;
  let hi = -Infinity;
  for (const v of values) {
    if (!Number.isFinite(v)) continue;
    if (v < lo) lo = v;
    if (v > hi) hi = v;
  }
  if (lo === Infinity) return { kind: "sequential", min: 0, max: 1 };
  const noise = 1e-9 * Math.max(Math.abs(lo), Math.abs(hi), 1e-300);
  if (lo < -noise && hi > noise) return divergingFor(values);
  if (!(hi > lo)) return { kind: "sequential", min: lo - 0.5, max: hi + 0.5 };
  return { kind: "sequential", min: lo, max: hi };
}

export function colourRGB(scale: Scale, v: number): RGB {
  const stops = scale.kind === "diverging" ? DIVERGING : SEQUENTIAL;
  const u = Math.min(1, Math.max(0, (v - scale.min) / (scale.max - scale.min || 1)));
  for (let i = 1; i < stops.length; i++) {
    if (u <= stops[i][0]) {
      const [u0, c0] = stops[i - 1];
      const [u1, c1] = stops[i];
      const w = (u - u0) / (u1 - u0);
      return [0, 1, 2].map((k) => Math.round(c0[k] + w * (c1[k] - c0[k]))) as RGB;
    }
  }
  return stops[stops.length - 1][1];
}

export function colour(scale: Scale, v: number): string {
  if (!Number.isFinite(v)) return MASKED;
  const [r, g, b] = colourRGB(scale, v);
  return `rgb(${r} ${g} ${b})`;
}

/**
 * Text colour for a cell of the given value: black or white, whichever contrasts more (WCAG ratio). Pure black,
 * not a near-black: where the ramps cross mid-grey (sequential ~0.64) #111 reaches only 4.4:1 either way, under
 * WCAG's 4.5; black and white meet at 4.58:1 at worst.
 */
export function ink(scale: Scale, v: number): string {
  const cell = Number.isFinite(v) ? colourRGB(scale, v) : MASKED_RGB;
  return contrastRatio(cell, [0, 0, 0]) >= contrastRatio(cell, [255, 255, 255]) ? "#000" : "#fff";
}

/** The step 1, 2 or 5 × 10^k that cuts `span` into about `count` parts. */
export function niceStep(span: number, count = 5): number {
  if (!(span > 0)) return 1;
  const raw = span / Math.max(count, 1);
  const p = Math.pow(10, Math.floor(Math.log10(raw)));
  const f = raw / p;
  return (f < 1.5 ? 1 : f < 3.5 ? 2 : f < 7.5 ? 5 : 10) * p;
}

/** Ticks at multiples of a round step covering [lo, hi], and the range widened to the outer ticks. */
export function niceTicks(lo: number, hi: number, count = 5): { ticks: number[]; lo: number; hi: number } {
  if (!(hi > lo)) [lo, hi] = [lo - 0.5, hi + 0.5];
  const step = niceStep(hi - lo, count);
  const first = Math.floor(lo / step + 1e-9);
  const last = Math.ceil(hi / step - 1e-9);
  // k * step, rounded to the step's own decimals, so that 0.1 * 3 prints as 0.3
  const decimals = Math.max(0, -Math.floor(Math.log10(step) + 1e-9));
  const ticks = Array.from({ length: last - first + 1 }, (_, i) => Number(((first + i) * step).toFixed(decimals)));
  return { ticks, lo: ticks[0], hi: ticks[ticks.length - 1] };
}

/** Integer ticks for the indices 0 .. n − 1 of a map's axis: round multiples, plus the last index. */
export function indexTicks(n: number, count = 5): number[] {
  if (n <= 1) return [0];
  const step = Math.max(1, niceStep(n - 1, count));
  const ticks: number[] = [];
  for (let v = 0; v <= n - 1; v += step) ticks.push(v);
  const last = ticks[ticks.length - 1];
  if (last !== n - 1) {
    // a round tick within half a step of the last (inclusive: 14 beside 15 with a step of 2) would crowd its label
    if (ticks.length > 1 && n - 1 - last <= step / 2) ticks.pop();
    ticks.push(n - 1);
  }
  return ticks;
}

/** WCAG 2 relative luminance of an sRGB colour given as 0–255 channels. */
export function luminance([r, g, b]: RGB): number {
  const lin = (c: number) => {
    const s = c / 255;
    return s <= 0.03928 ? s / 12.92 : Math.pow((s + 0.055) / 1.055, 2.4);
  };
  return 0.2126 * lin(r) + 0.7152 * lin(g) + 0.0722 * lin(b);
}

/** WCAG 2 contrast ratio (1 to 21); graphics need 3 against their background. */
export function contrastRatio(a: RGB, b: RGB): number {
  const [x, y] = [luminance(a), luminance(b)].sort((p, q) => q - p);
  return (x + 0.05) / (y + 0.05);
}

export function hexRGB(hex: string): RGB {
  const h = hex.replace("#", "");
  const full = h.length === 3 ? [...h].map((c) => c + c).join("") : h;
  return [0, 2, 4].map((i) => parseInt(full.slice(i, i + 2), 16)) as RGB;
}

// ----------------------------------------------------------------------------------------------------------
// One scale per quantity (issue 46): every map says what it shows (data-quantity) and on which scale
// (data-scale, "kind min max"), and a quantity is drawn the same way on every page.

/** What a coloured map or table shows; each quantity has one rule for its scale (`scaleOf`). */
export type Quantity = "probability" | "one-hot" | "cosine similarity" | "bias" | "embedding" | "bucket";

// the steps a signed domain is rounded up to: each within 25 % of the next, so no cell turns pale, and half of
// each (the key's inner ticks) has at most three digits, so the key's labels stay short enough not to touch
const NICE = [1, 1.2, 1.5, 2, 2.5, 3, 3.5, 4, 5, 6, 7, 8, 10];

/** The smallest of 1, 1.2, 1.5, 2, 2.5, 3, 3.5, 4, 5, 6, 7, 8 (× 10^k) that is at least `x` (> 0). */
export function niceCeil(x: number): number {
  if (!(x > 0) || !Number.isFinite(x)) return 1;
  const p = Math.pow(10, Math.floor(Math.log10(x)));
  // the 1e-9 keeps a value that is already nice (0.08 = 8.000000000000002 × 10^-2) where it is
  const step = NICE.find((s) => s * p >= x * (1 - 1e-9)) ?? 10;
  return Number((step * p).toPrecision(3));
}

/**
 * The scale of a signed quantity (embedding values, biases): diverging, white at 0, symmetric, its ends the
 * largest |value| rounded up to a nice number, so that the key states a round domain and equal sizes of either
 * sign get equal strength. Non-finite values (masked cells) are left out.
 */
export function signedScale(values: number[]): Scale {
  const m = values.reduce((acc, v) => (Number.isFinite(v) ? Math.max(acc, Math.abs(v)) : acc), 0);
  const top = niceCeil(m);
  return { kind: "diverging", min: -top, max: top };
}

/**
 * The one scale of each quantity: probabilities and one-hot entries on PROBABILITY (0 the light end, 1 the dark
 * end), cosines on COSINE, signed values on `signedScale`, bucket numbers sequential from 0 to the last bucket.
 */
export function scaleOf(quantity: Quantity, values: number[]): Scale {
  if (quantity === "probability" || quantity === "one-hot") return PROBABILITY;
  if (quantity === "cosine similarity") return COSINE;
  if (quantity === "bucket") return { kind: "sequential", min: 0, max: Math.max(1, ...values.filter(Number.isFinite)) };
  return signedScale(values);
}

/** A scale as the maps state it in `data-scale`: "diverging -1 1". */
export const scaleAttr = (s: Scale): string => `${s.kind} ${s.min} ${s.max}`;

const SUPERSCRIPT: Record<string, string> = { "-": "⁻", "0": "⁰", "1": "¹", "2": "²", "3": "³", "4": "⁴", "5": "⁵", "6": "⁶", "7": "⁷", "8": "⁸", "9": "⁹" };

/**
 * `v` with exactly `digits` significant digits, trailing zeros kept (so a column of them lines up: 6.990 beside
 * 8.258, not 6.99), a real minus sign, and no exponent while the plain number takes at most `maxPlain`
 * characters (its sign not counted); past that, m × 10ᵏ. −∞ is "−∞", 0 is "0".
 */
export function sig(v: number, digits = 3, maxPlain = 9): string {
  if (v === -Infinity) return "−∞";
  if (v === Infinity) return "∞";
  if (Number.isNaN(v)) return "n/a";
  if (v === 0) return "0";
  const r = Number(Math.abs(v).toPrecision(digits)); // rounded first: 9.996 to 3 digits is 10.0, one more place
  const e = Math.floor(Math.log10(r) + 1e-12);
  const plain = r.toFixed(Math.max(0, digits - 1 - e));
  const body = plain.length <= maxPlain ? plain : `${(r / Math.pow(10, e)).toFixed(digits - 1)} × 10${[...String(e)].map((c) => SUPERSCRIPT[c]).join("")}`;
  return v < 0 ? `−${body}` : body;
}
