/**
 * The Results chart's series colours: ten that never share a colour, each at least 3:1 against the page (WCAG's
 * minimum for graphics; tests/unit/site.test.ts and the browser tests measure it). Okabe–Ito hues, darkened
 * where the originals (yellow, sky blue, orange) fall below 3:1 on white. RoPE's extension variants are also
 * dashed, so colour is never the only cue.
 */
export const PALETTE = ["#0072B2", "#B66A00", "#007D5B", "#B3478B", "#1F8FD0", "#C8510A", "#000000", "#8F7A00", "#6E6E6E", "#882255"];
