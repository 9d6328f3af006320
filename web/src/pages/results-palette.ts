/**
 * The Results chart's series colours: fourteen that never share a colour (every registered scheme plus RoPE's
 * four extension variants), each at least 3:1 against the page (WCAG's minimum for graphics;
 * tests/unit/site.test.ts and the browser tests measure it). Okabe–Ito hues, darkened where the originals
 * (yellow, sky blue, orange) fall below 3:1 on white, then four darker hues of their own. RoPE's extension
 * variants are also dashed, so colour is never the only cue.
 */
export const PALETTE = ["#0072B2", "#B66A00", "#007D5B", "#B3478B", "#1F8FD0", "#C8510A", "#000000", "#8F7A00", "#6E6E6E", "#882255",
  "#5D3A9B", "#A31D1D", "#00606B", "#4B6B00"];
