/**
 * Pure helpers for line charts with several series (no DOM, so vitest checks them directly): which series
 * coincide and how to draw them so that both stay visible, what the legend says for each, and the values the
 * hover readout gives at the x nearest the pointer.
 */

export interface SeriesLike {
  name: string;
  points: [number, number][];
  dash?: string;
}

/** How one series is drawn: its stroke width and dash, and the series it lies on, if any. */
export interface SeriesStyle {
  width: number;
  dash?: string;
  sameAs?: string; // the first series of its group, which this one coincides with
  gap: number; // the largest |Δy| from that series (0 when none)
}

/** A line's width when nothing lies on it, and what each series below another one gains, px. */
export const LINE_WIDTH = 2;
export const UNDER_GAIN = 2.5;
/** The dash given to a coinciding series drawn on top, so the one below shows through the gaps. */
export const OVER_DASH = "6 4";
/**
 * Two series coincide when they differ by at most this fraction of the y axis's span at every x: 1 % of a
 * 260 px plot is under 3 px, less than one line's width plus its anti-aliasing, so the eye sees one line.
 */
export const COINCIDE_FRACTION = 0.01;

const finite = (s: SeriesLike) => s.points.filter((p) => Number.isFinite(p[0]) && Number.isFinite(p[1]));

/**
 * The largest |Δy| between two series if they have a finite value at exactly the same x's (at least two of
 * them: one shared point is a dot, not a line), else Infinity.
 */
export function seriesGap(a: SeriesLike, b: SeriesLike): number {
  const pa = finite(a);
  const pb = new Map(finite(b).map((p) => [p[0], p[1]]));
  if (pa.length < 2 || pa.length !== pb.size) return Infinity;
  let gap = 0;
  for (const [x, y] of pa) {
    const other = pb.get(x);
    if (other === undefined) return Infinity;
    gap = Math.max(gap, Math.abs(y - other));
  }
  return gap;
}

/**
 * The style of every series. A series that lies within `tolerance` of an earlier one along the whole x range
 * joins that one's group (the group is named after its first series). Within a group the first is drawn
 * widest and each later one narrower on top of it, dashed, so every member shows as a band of its colour
 * around the next; series in no group keep LINE_WIDTH and their own dash.
 */
export function seriesStyles(series: SeriesLike[], tolerance: number): SeriesStyle[] {
  const root: number[] = series.map(() => -1);
  const gaps: number[] = series.map(() => 0);
  series.forEach((s, j) => {
    for (let i = 0; i < j; i++) {
      if (root[i] !== -1) continue; // compare with each group's first series only: chains do not drift
      const gap = seriesGap(series[i], s);
      if (gap <= tolerance) {
        root[j] = i;
        gaps[j] = gap;
        break;
      }
    }
  });
  const members = (i: number) => series.flatMap((_, k) => (k === i || root[k] === i ? [k] : []));
  return series.map((s, j) => {
    const group = members(root[j] === -1 ? j : root[j]);
    if (group.length === 1) return { width: LINE_WIDTH, dash: s.dash, gap: 0 };
    const below = group.length - 1 - group.indexOf(j); // how many of its group are drawn on top of it
    const first = root[j] === -1;
    return {
      width: LINE_WIDTH + UNDER_GAIN * below,
      dash: first ? s.dash : (s.dash ?? OVER_DASH),
      sameAs: first ? undefined : series[root[j]].name,
      gap: gaps[j],
    };
  });
}

/** The legend's words for a series: its name, and which series it is drawn on when it coincides with one. */
export function legendText(name: string, style: SeriesStyle, format: (v: number) => string): string {
  if (style.sameAs === undefined) return name;
  return style.gap === 0 ? `${name} (same as ${style.sameAs})` : `${name} (same as ${style.sameAs}, at most ${format(style.gap)} apart)`;
}

/** Every distinct finite x of the series, ascending. */
export function allXs(series: SeriesLike[]): number[] {
  return [...new Set(series.flatMap((s) => finite(s).map((p) => p[0])))].sort((a, b) => a - b);
}

/** The entry of `xs` drawn nearest the pointer at `px`, where `screen` maps an x to its px; the first wins a tie. */
export function nearestX(xs: number[], px: number, screen: (v: number) => number): number | undefined {
  let best: number | undefined;
  let dist = Infinity;
  for (const v of xs) {
    const d = Math.abs(screen(v) - px);
    if (d < dist) [best, dist] = [v, d];
  }
  return best;
}

/** Each series' value at exactly `x` (null where it has no finite value there), in series order. */
export function valuesAt(series: SeriesLike[], x: number): { name: string; value: number | null }[] {
  return series.map((s) => {
    const p = finite(s).find((q) => q[0] === x);
    return { name: s.name, value: p ? p[1] : null };
  });
}
