/**
 * The series colours of the multi-series charts (Results, Models): no two series of one chart share a colour,
 * and each is at least 3:1 against the page (WCAG's minimum for graphics; tests/unit/site.test.ts and the browser
 * tests measure it). PALETTE has 24: the 13 registered schemes, RoPE's four extension variants, and room for
 * experiment rows such as `rope+ssmax`. The first fourteen are Okabe–Ito hues, darkened where the originals
 * (yellow, sky blue, orange) fall below 3:1 on white, then four darker hues of their own; the last ten were
 * picked among muted colours as far (CIELAB distance) from all the earlier ones as could be found. Colour is
 * never the only cue: the Results chart gives each series a dash and a marker too (seriesLooks, below), and every
 * chart has a key.
 */
import { contrastRatio, hexRGB, type RGB } from "../scale";

export const PALETTE = ["#0072B2", "#B66A00", "#007D5B", "#B3478B", "#1F8FD0", "#C8510A", "#000000", "#8F7A00", "#6E6E6E", "#882255",
  "#5D3A9B", "#A31D1D", "#00606B", "#4B6B00", "#5A3C0F", "#B4695A", "#4B3C69", "#0F963C", "#E14B69", "#9678C3",
  "#2D4B1E", "#0F69D2", "#87875A", "#A57896"];

/** The page's background (style.css `--paper`), which every series colour is measured against. */
export const PAPER = "#fdfdfb";

const hex = (c: RGB) => `#${c.map((v) => v.toString(16).padStart(2, "0")).join("")}`.toUpperCase();

/** sRGB of a hue (degrees), saturation and lightness (0–1). */
function hsl(h: number, s: number, l: number): RGB {
  const k = (n: number) => (n + h / 30) % 12;
  const a = s * Math.min(l, 1 - l);
  return [0, 8, 4].map((n) => Math.round(255 * (l - a * Math.max(-1, Math.min(k(n) - 3, 9 - k(n), 1))))) as RGB;
}

/**
 * `n` distinct colours: PALETTE, then (for a chart with more series than that) hues a golden angle apart, each
 * darkened until it has 3:1 on the page, so a longer results file still gives every series its own colour.
 */
export function seriesColours(n: number): string[] {
  const out = PALETTE.slice(0, n);
  for (let i = 0; out.length < n; i++) {
    const h = (i * 137.508) % 360;
    for (let l = 0.5; l > 0.1; l -= 0.02) {
      const c = hsl(h, 0.65, l);
      if (contrastRatio(c, hexRGB(PAPER)) >= 3 && !out.includes(hex(c))) {
        out.push(hex(c));
        break;
      }
    }
  }
  return out;
}

/** CIELAB (D65) of a hex colour: the space in which "look alike" is measured. */
export function lab(hexColour: string): [number, number, number] {
  const [r, g, b] = hexRGB(hexColour).map((v) => {
    const c = v / 255;
    return c <= 0.04045 ? c / 12.92 : ((c + 0.055) / 1.055) ** 2.4;
  });
  const x = (0.4124 * r + 0.3576 * g + 0.1805 * b) / 0.95047;
  const y = 0.2126 * r + 0.7152 * g + 0.0722 * b;
  const z = (0.0193 * r + 0.1192 * g + 0.9505 * b) / 1.08883;
  const f = (t: number) => (t > 216 / 24389 ? Math.cbrt(t) : ((24389 / 27) * t + 16) / 116);
  return [116 * f(y) - 16, 500 * (f(x) - f(y)), 200 * (f(y) - f(z))];
}

/** CIE76 colour difference: below about 30 two thin lines of these colours are easily taken for one another. */
export function deltaE(a: string, b: string): number {
  const [p, q] = [lab(a), lab(b)];
  return Math.hypot(p[0] - q[0], p[1] - q[1], p[2] - q[2]);
}

/** Colours closer than this (CIE76) count as look-alikes: two such series must differ in dash and in marker. */
export const LOOK_ALIKE = 30;

/** Line dashes ("" solid) and point markers that series are told apart by, besides colour. */
export const DASHES = ["", "7 4", "2 3", "10 3 2 3"];
export const GLYPHS = ["circle", "square", "triangle", "diamond", "down", "plus", "cross"] as const;
export type Glyph = (typeof GLYPHS)[number];

export interface SeriesLook {
  colour: string;
  dash: string; // "" for solid
  glyph: Glyph;
}

/**
 * A colour, a dash and a marker for each of `n` series. Colours are seriesColours(n) (all different); the dash
 * and the marker are each picked, series by series, as the one whose nearest colour among the earlier series that
 * already have it is farthest away (ties: the one used least, then the first), so colours that look alike never
 * share a dash or a marker while there are enough of them to go round.
 */
export function seriesLooks(n: number): SeriesLook[] {
  const colours = seriesColours(n);
  const pick = <T>(options: readonly T[], chosen: T[], i: number): T => {
    let best = options[0];
    let score = [-Infinity, -Infinity];
    for (const o of options) {
      const same = chosen.flatMap((c, j) => (c === o ? [j] : []));
      const near = Math.min(Infinity, ...same.map((j) => deltaE(colours[i], colours[j])));
      const s = [Math.min(near, 1000), -same.length];
      if (s[0] > score[0] || (s[0] === score[0] && s[1] > score[1])) [best, score] = [o, s];
    }
    return best;
  };
  const dashes: string[] = [];
  const glyphs: Glyph[] = [];
  colours.forEach((_, i) => {
    dashes.push(pick(DASHES, dashes, i));
    glyphs.push(pick(GLYPHS, glyphs, i));
  });
  return colours.map((colour, i) => ({ colour, dash: dashes[i], glyph: glyphs[i] }));
}

/** The SVG path of a marker of `size` px (its width) centred on (x, y). */
export function glyphPath(glyph: Glyph, x: number, y: number, size: number): string {
  const h = size / 2;
  const f = (v: number) => v.toFixed(2);
  const poly = (pts: [number, number][]) => `M${pts.map(([a, b]) => `${f(x + a)},${f(y + b)}`).join("L")}Z`;
  switch (glyph) {
    case "square":
      return poly([[-h * 0.85, -h * 0.85], [h * 0.85, -h * 0.85], [h * 0.85, h * 0.85], [-h * 0.85, h * 0.85]]);
    case "triangle":
      return poly([[0, -h * 1.1], [h, h * 0.8], [-h, h * 0.8]]);
    case "down":
      return poly([[0, h * 1.1], [h, -h * 0.8], [-h, -h * 0.8]]);
    case "diamond":
      return poly([[0, -h * 1.15], [h, 0], [0, h * 1.15], [-h, 0]]);
    case "plus": {
      const t = h * 0.38;
      return poly([[-t, -h], [t, -h], [t, -t], [h, -t], [h, t], [t, t], [t, h], [-t, h], [-t, t], [-h, t], [-h, -t], [-t, -t]]);
    }
    case "cross": {
      const a = h * 0.3;
      const b = h * 0.95;
      return poly([[-b, -b + a], [-b + a, -b], [0, -a], [b - a, -b], [b, -b + a], [a, 0], [b, b - a], [b - a, b], [0, a], [-b + a, b], [-b, b - a], [-a, 0]]);
    }
    default:
      return `M${f(x - h)},${f(y)}a${f(h)},${f(h)} 0 1,0 ${f(size)},0a${f(h)},${f(h)} 0 1,0 ${f(-size)},0Z`;
  }
}
