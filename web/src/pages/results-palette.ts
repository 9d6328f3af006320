/**
 * The series colours of the multi-series charts (Results, Models): no two series of one chart share a colour,
 * and each is at least 3:1 against the page (WCAG's minimum for graphics; tests/unit/site.test.ts and the browser
 * tests measure it). PALETTE has 24: the 13 registered schemes, RoPE's four extension variants, and room for
 * experiment rows such as `rope+ssmax`. The first fourteen are Okabe–Ito hues, darkened where the originals
 * (yellow, sky blue, orange) fall below 3:1 on white, then four darker hues of their own; the last ten were
 * picked among muted colours as far (CIELAB distance) from all the earlier ones as could be found. Colour is
 * never the only cue: variants are dashed, and every chart has a key.
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
