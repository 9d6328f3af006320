import "../site";
import { DATA_FILES, checkEmbeddings, checkLength, loadData, nearest, presentFiles, type EmbeddingsData, type LengthData, type Loaded } from "../data";
import { FONT, diagonalMeans, drawPlot, heatmap, linePlot, responsive } from "../charts";
import { sig } from "../scale";
import { SCHEMES } from "../schemes";
import { LINE_WIDTH } from "../series";
import { $, el, labelled, select, svg } from "../ui";
import { PAPER, glyphPath, seriesLooks } from "./results-palette";

const BASE = import.meta.env.BASE_URL;

function notReady(which: keyof typeof DATA_FILES, state: Loaded<unknown>): HTMLElement {
  const file = DATA_FILES[which];
  if (state.state === "invalid") {
    return el(
      "div",
      { class: "missing", id: `${which}-invalid` },
      el("p", {}, "The file ", el("code", { text: `web/public/${file.path}` }), " exists but does not match the format in ", el("code", { text: "web/DATA.md" }), ":"),
      el("ul", {}, ...state.errors.slice(0, 20).map((e) => el("li", { text: e }))),
    );
  }
  return el(
    "div",
    { class: "missing", id: `${which}-missing` },
    el("p", {}, "No results yet: ", el("code", { text: `web/public/${file.path}` }), " has not been produced."),
    el("p", {}, "Make it with ", el("code", { text: file.command }), " (see ", el("code", { text: "web/DATA.md" }), " for the format), then rebuild the site with ", el("code", { text: "npm run build" }), " in ", el("code", { text: "web/" }), "."),
  );
}

const seriesName = (r: { scheme: string; variant: string }) => (r.variant && r.variant !== "plain" ? `${r.scheme} (${r.variant})` : r.scheme);

function label(x: number, y: number, s: string, anchor: string, fill: string, cls: string): SVGElement {
  // a halo in the page's colour, so the words stay readable where they cross a line
  const t = svg("text", { x, y, "text-anchor": anchor, "font-size": FONT, fill, class: cls, stroke: PAPER, "stroke-width": 3, "paint-order": "stroke", "stroke-linejoin": "round" });
  t.textContent = s;
  return t;
}

/** A phone's chart (narrower than this, px) starts with the key series only; the key's checkboxes add the rest. */
export const NARROW = 560;

/**
 * The series a narrow chart starts with: the learned table (the one that stops), plain RoPE, the best at the
 * training length, and the best and the worst at the longest length; read from the data, in series order.
 */
export function keySeries(data: LengthData, names: string[]): string[] {
  const ok = data.rows.filter((r) => r.status === "ok" && r.bpb_mean !== null);
  const at = (len: number) => ok.filter((r) => r.length === len).sort((a, b) => a.bpb_mean! - b.bpb_mean!);
  const longest = Math.max(...data.eval_lengths);
  const picks = new Set<string>();
  for (const n of ["learned", "rope"]) if (names.includes(n)) picks.add(n);
  const first = at(data.train_length)[0];
  const last = at(longest);
  for (const r of [first, last[0], last[last.length - 1]]) if (r) picks.add(seriesName(r));
  return names.filter((n) => picks.has(n));
}

/** Numbers on this page: `digits` significant digits, every one kept (1.850, not 1.85), no exponent that a plain number fits. */
const num = (v: number, digits = 4) => sig(v, digits, 6);
/** An axis' ticks: as many decimals as its step needs, the same on every tick (1.8, 1.9, 2.0). */
export const tickText = (v: number, step: number): string => {
  const decimals = Math.max(0, -Math.floor(Math.log10(step) + 1e-9));
  const s = Math.abs(v).toFixed(decimals);
  return v < 0 && Number(s) !== 0 ? `−${s}` : s;
};

interface ChartState {
  shown: Set<string> | null; // null: not chosen by the reader yet, so the width decides
}

/**
 * Bits per byte against evaluation length, drawn at the width of its box. Each series has its own colour, dash
 * and marker (seriesLooks: look-alike colours differ in both); the key under the chart names them, and its
 * checkboxes show or hide each one. A length where a scheme cannot run ("no rows") gets a cross in the series
 * colour on its own level, past its last point, with the words beside that point, so a series with a single
 * point (the learned table, which ends at the training length) is not mistaken for a missing one.
 */
function lengthChart(data: LengthData, names: string[], width: number, visible: Set<string>, onToggle: (name: string, on: boolean) => void): HTMLElement {
  const ok = data.rows.filter((r) => r.status === "ok" && r.bpb_mean !== null);
  const lengths = [...new Set([...data.eval_lengths, data.train_length])].sort((a, b) => a - b);
  const ys = ok.flatMap((r) => [r.bpb_mean! - (r.bpb_std ?? 0), r.bpb_mean! + (r.bpb_std ?? 0)]);
  const looks = seriesLooks(names.length);
  const lookOf = (name: string) => looks[names.indexOf(name)];
  const series = names.map((name) => ({
    name,
    colour: lookOf(name).colour,
    dash: lookOf(name).dash || undefined,
    glyph: (x: number, y: number, size: number) => glyphPath(lookOf(name).glyph, x, y, size),
    hidden: !visible.has(name),
    points: ok.filter((r) => seriesName(r) === name).sort((a, b) => a.length - b.length).map((r) => [r.length, r.bpb_mean!] as [number, number]),
  }));
  const noRows = data.rows.filter((r) => r.status !== "ok" || r.bpb_mean === null);
  return drawPlot(
    {
      id: "length-chart",
      label: "Bits per byte against evaluation length for each position scheme; the table below has the same numbers",
      xLabel: "evaluation length (tokens, log scale)",
      yLabel: "bits per byte",
      series,
      height: 320,
      xLog2: true,
      xTicks: lengths,
      yRange: [Math.min(...ys), Math.max(...ys)],
      marker: { x: data.train_length, label: `trained at ${data.train_length}` },
      onToggle,
      format: num,
      xFormat: (v) => (Number.isInteger(v) ? String(v) : num(v, 4)),
      yFormat: tickText,
      extra: ({ X, Y, left, right, top, bottom, styles }) => {
        const kids: SVGElement[] = [];
        const hide = (name: string) => (visible.has(name) ? undefined : "none");
        // one-point series last, and ringed in white, so no other series hides them
        const order = [...series].sort((a, b) => (b.points.length > 1 ? 1 : 0) - (a.points.length > 1 ? 1 : 0));
        for (const s of order) {
          // a series drawn under a coinciding one gets wider marks too, so its marks ring the other's
          const wider = styles[series.indexOf(s)].width - LINE_WIDTH;
          for (const [x, y] of s.points) {
            const r = ok.find((q) => seriesName(q) === s.name && q.length === x)!;
            if (r.bpb_std) kids.push(svg("line", { x1: X(x), x2: X(x), y1: Y(y - r.bpb_std), y2: Y(y + r.bpb_std), stroke: s.colour, display: hide(s.name) }));
            const lone = s.points.length === 1;
            // the series' marker, then its dot (the point itself, inside the marker)
            kids.push(svg("path", { d: s.glyph(X(x), Y(y), lone ? 14 : 10 + wider), fill: s.colour, stroke: "#fff", "stroke-width": 1, class: "glyph", "data-series": s.name, "data-glyph": lookOf(s.name).glyph, display: hide(s.name) }));
            kids.push(svg("circle", { cx: X(x), cy: Y(y), r: lone ? 5 : 2 + wider / 2, fill: s.colour, stroke: lone ? "#fff" : "none", "stroke-width": 1.5, class: "point", "data-series": s.name, display: hide(s.name) }));
          }
        }
        // "no rows": crosses on the series' own level past its last point, joined to it by a dotted line, and the
        // words beside that last point (above it, or below when above would leave the plot)
        const byName = new Map<string, number[]>();
        for (const r of noRows) byName.set(seriesName(r), [...(byName.get(seriesName(r)) ?? []), r.length]);
        [...byName].forEach(([name, ls], i) => {
          const s = series.find((q) => q.name === name)!;
          const c = lookOf(name).colour;
          const lastPoint = s.points[s.points.length - 1];
          const y = lastPoint ? Y(lastPoint[1]) : bottom - 8 - i * 16;
          const x0 = lastPoint ? X(lastPoint[0]) : X(Math.min(...ls));
          kids.push(svg("line", { x1: x0, x2: X(Math.max(...ls)), y1: y, y2: y, stroke: c, "stroke-width": 1, "stroke-dasharray": "1 4", class: "no-rows-stub", "data-series": name, display: hide(name) }));
          for (const l of ls) {
            const [x, d] = [X(l), 4];
            kids.push(svg("path", { d: `M${x - d},${y - d}L${x + d},${y + d}M${x - d},${y + d}L${x + d},${y - d}`, stroke: c, "stroke-width": 2, class: "no-rows-mark", "data-series": name, "data-length": String(l), display: hide(name) }));
          }
          const words = lastPoint ? `${name}: no rows past ${lastPoint[0]}` : `${name}: no rows`;
          const w = 0.62 * FONT * words.length;
          const below = y - 12 - FONT < top + 16; // the marker's words sit at the top
          const ly = below ? y + 12 + FONT : y - 12;
          const fitsRight = x0 + 6 + w <= right;
          const t = label(fitsRight ? x0 + 6 : Math.max(left + w, x0 - 6), ly, words, fitsRight ? "start" : "end", c, "no-rows-label");
          t.setAttribute("data-series", name);
          t.setAttribute("display", hide(name) ?? "inline");
          kids.push(t);
        });
        return kids;
      },
    },
    width,
  );
}

/** The registered schemes that have no row in this export, in the registry's order. */
export const notExported = (data: LengthData, registry: string[] = SCHEMES.map((s) => s.name)): string[] => registry.filter((n) => !data.rows.some((r) => r.scheme === n));

const list = (xs: string[]) => (xs.length < 2 ? xs.join("") : `${xs.slice(0, -1).join(", ")} and ${xs[xs.length - 1]}`);
const thousands = (v: number) => v.toLocaleString("en-US");
/** `--flag N` of a command line, or null. */
const flagOf = (command: string, flag: string): number | null => {
  const m = command.match(new RegExp(`${flag}\\s+(\\d+)`));
  return m ? Number(m[1]) : null;
};

/** What the Models page's manifest says of its models (public/models/manifest.json), as far as this note needs. */
export interface ShippedModels {
  models: Record<string, { steps: number; batch_size: number; context_length: number; seed: number; val_bpb: number; step_of_val?: number }>;
}

/**
 * The note beside the table when the Models page shows numbers for the same schemes at the training length:
 * which source each page reads and why they differ (separate trainings), with both numbers, and a link there.
 */
export function otherSourceNote(data: LengthData, shipped: ShippedModels): HTMLElement | null {
  const here = data.rows.filter((r) => r.length === data.train_length && r.status === "ok" && r.bpb_mean !== null && (!r.variant || r.variant === "plain") && shipped.models[r.scheme]);
  if (!here.length) return null;
  const m = shipped.models[here[0].scheme];
  const seeds = Math.max(...data.rows.map((r) => r.n_seeds));
  const windows = flagOf(data.command, "--eval-windows");
  const longest = Math.max(...data.eval_lengths);
  const pairs = here.map((r) => `${r.scheme} ${num(shipped.models[r.scheme].val_bpb)} there, ${num(r.bpb_mean!)} here`);
  return el(
    "p",
    { class: "note", id: "length-other-source" },
    el("strong", { text: "Not the Models page's numbers. " }),
    `At ${data.train_length} tokens `,
    el("a", { href: "./models.html#lm-models", text: "the Models page" }),
    ` gives other validation bits per byte for the same schemes (${pairs.join("; ")}), in another order. They are separate trainings: the Models page's models (public/models/manifest.json, scripts/site-models) were trained to ship, ` +
      `${thousands(m.steps)} steps of ${m.batch_size} windows of ${m.context_length} tokens with one seed (${m.seed}), and validated once at step ${thousands(m.step_of_val ?? m.steps)}; ` +
      `the numbers here are the length experiment's own runs (length.json), each the mean of ${seeds} seeds` +
      (windows ? `, scored on ${windows} windows of ${thousands(longest)} tokens (${thousands(windows * longest)} tokens) cut into ${data.train_length}-token windows` : "") +
      ` (their training steps are not in length.json; docs/LOG.md gives them). Neither is a copy of the other.`,
  );
}

export function renderLength(data: LengthData, shipped: ShippedModels | null = null): HTMLElement {
  const names = [...new Set(data.rows.map(seriesName))];
  const lengths = [...data.eval_lengths].sort((a, b) => a - b);
  // each cell names its column (data-label): on a phone the table is a stack of cards, one per series, with no
  // header row above them (style.css, table.cards), so the cell says which length it is
  const label = (len: number) => `${len} tokens${len === data.train_length ? " (trained)" : ""}`;
  const cell = (name: string, len: number) => {
    const r = data.rows.find((x) => seriesName(x) === name && x.length === len);
    if (!r) return el("td", { text: "—", "data-label": label(len) });
    if (r.status !== "ok" || r.bpb_mean === null) return el("td", { text: "no rows", "data-label": label(len) });
    return el("td", { text: r.bpb_std !== null ? `${num(r.bpb_mean, 4)} ± ${num(r.bpb_std, 2)}` : num(r.bpb_mean, 4), "data-value": String(r.bpb_mean), "data-label": label(len) });
  };
  const table = el(
    "table",
    { class: "plain cards", id: "length-table" },
    el("caption", { text: `Validation bits per byte (mean, 4 significant digits ± standard deviation over seeds, 2 significant digits), trained at ${data.train_length} tokens` }),
    el("thead", {}, el("tr", {}, el("th", { scope: "col", text: "scheme" }), ...lengths.map((l) => el("th", { scope: "col", text: String(l) })))),
    el("tbody", {}, ...names.map((n) => el("tr", { "data-series": n }, el("th", { scope: "row", text: n }), ...lengths.map((l) => cell(n, l))))),
  );

  // which series are drawn: every one on a wide chart, the key series on a phone, until the reader picks
  const state: ChartState = { shown: null };
  const key = keySeries(data, names);
  let width = 720;
  const visibleNow = () => state.shown ?? new Set(width < NARROW ? key : names);
  const status = el("p", { id: "length-shown", "aria-live": "polite" });
  const showAll = el("button", { type: "button", id: "length-show-all" });
  const showKey = el("button", { type: "button", id: "length-show-key", text: `Show the ${key.length} key series only` });
  const say = () => {
    const v = visibleNow();
    const hidden = names.filter((n) => !v.has(n));
    status.textContent = hidden.length
      ? `Showing ${v.size} of ${names.length} series; tick a name in the key under the chart to add it (hidden: ${hidden.join(", ")}).`
      : `Showing all ${names.length} series; untick a name in the key under the chart to hide it.`;
    showAll.textContent = `Show all ${names.length} series`;
    showAll.disabled = !hidden.length;
  };
  let chart: HTMLElement & { repaint?: () => void };
  const redraw = (focus?: string) => {
    chart.repaint?.();
    say();
    if (focus) (chart.querySelector(`input.key-toggle[data-series="${CSS.escape(focus)}"]`) as HTMLElement | null)?.focus();
  };
  const onToggle = (name: string, on: boolean) => {
    const v = new Set(visibleNow());
    if (on) v.add(name);
    else v.delete(name);
    state.shown = v;
    redraw(name);
  };
  chart = responsive((w) => {
    width = w;
    const out = lengthChart(data, names, w, visibleNow(), onToggle);
    queueMicrotask(say);
    return out;
  }, 720);
  showAll.addEventListener("click", () => ((state.shown = new Set(names)), redraw()));
  showKey.addEventListener("click", () => ((state.shown = new Set(key)), redraw()));
  say();

  const missing = notExported(data);
  const present = SCHEMES.map((s) => s.name).filter((n) => !missing.includes(n));
  const coverage = el(
    "p",
    { id: "length-coverage" },
    `This export has ${present.length} of the ${SCHEMES.length} registered position schemes` +
      (missing.length
        ? `. Not in this export: ${list(missing)}. ${missing.length === 1 ? "It was" : "They were"} run in the project's lab log (docs/LOG.md) but ${missing.length === 1 ? "is" : "are"} not exported here, so this page shows no numbers for ${missing.length === 1 ? "it" : "them"}.`
        : ": every one."),
  );
  const note = shipped ? otherSourceNote(data, shipped) : null;
  return el(
    "div",
    {},
    el("p", {}, "Produced by ", el("code", { text: data.command }), "."),
    coverage,
    el("div", { class: "controls" }, showAll, showKey),
    status,
    chart,
    el("div", { class: "scroll" }, table),
    note,
  );
}

export function renderEmbeddings(data: EmbeddingsData): HTMLElement {
  const picker = select("token-pick", data.tokens.map((t, i) => [String(i), `${t.id}: ${JSON.stringify(t.text)} (${t.count}×)`]), "0");
  const list = el("ol", { id: "neighbours", "aria-live": "polite" });
  const show = () => {
    const i = Number(picker.value);
    list.replaceChildren(
      ...nearest(data.token_table, i, 8).map(({ index, similarity }) =>
        el("li", { "data-value": String(similarity) }, el("code", { text: JSON.stringify(data.tokens[index].text) }), ` id ${data.tokens[index].id}, similarity ${num(similarity, 3)}`),
      ),
    );
  };
  picker.addEventListener("change", show);
  show();
  const parts: HTMLElement[] = [
    el("p", {}, "Run ", el("code", { text: data.run }), `, position scheme ${data.position}, width ${data.d_model}, ${data.tokens.length} tokens.`),
    el("div", { class: "controls" }, labelled("Token", picker)),
    el("h3", { text: "Nearest tokens by cosine similarity of their embedding rows" }),
    list,
  ];
  if (data.position_similarity) {
    const map = heatmap({ label: "Cosine similarity of the learned position rows", rowName: "position", colName: "position", maxSize: 420, cosine: true });
    map.root.id = "position-sim";
    map.update(data.position_similarity);
    const byOffset = diagonalMeans(data.position_similarity);
    const plot = linePlot({
      id: "position-offset-plot",
      label: "Mean cosine similarity of two learned position rows against the offset between them",
      xLabel: "offset between the two positions",
      yLabel: "mean cosine similarity",
      series: [{ name: "mean over pairs", colour: "#1f5fa8", points: byOffset.map((v, d) => [d, v]) }],
      maxWidth: 460,
    });
    parts.push(
      el("div", { class: "with-plot" }, map.root, plot.root),
      el("p", { text: `Beside the map: the similarity of positions t and t + d, averaged over every t, for each offset d. For a formula such as the sinusoidal table every t gives the same value; a learned table owes it nothing, so this is a summary, not a rule. One step apart: ${num(byOffset[1] ?? NaN, 3)}; ${byOffset.length - 1} steps apart: ${num(byOffset[byOffset.length - 1], 3)}.` }),
    );
  } else {
    parts.push(el("p", { text: `This run's scheme (${data.position}) has no learned position table, so there is no position similarity map.` }));
  }
  return el("div", {}, ...parts);
}

/** The Models page's manifest, for the note on numbers both pages show; null when the site ships no models. */
async function shippedModels(): Promise<ShippedModels | null> {
  try {
    const response = await fetch(`${BASE}models/manifest.json`);
    const raw: unknown = response.ok ? await response.json() : null;
    const models = (raw as { models?: unknown } | null)?.models;
    return models && typeof models === "object" ? (raw as ShippedModels) : null;
  } catch {
    return null;
  }
}

async function main(): Promise<void> {
  // Only files the build saw are requested, so a site without results makes no failing requests.
  const present = await presentFiles(BASE);
  const has = (path: string) => present.includes(path.replace("data/", ""));
  const missing = { state: "missing" } as const;
  const length = has(DATA_FILES.length.path) ? await loadData(BASE + DATA_FILES.length.path, checkLength) : missing;
  $("#length-section").replaceChildren(length.state === "ok" ? renderLength(length.data, await shippedModels()) : notReady("length", length));
  const emb = has(DATA_FILES.embeddings.path) ? await loadData(BASE + DATA_FILES.embeddings.path, checkEmbeddings) : missing;
  $("#embed-section").replaceChildren(emb.state === "ok" ? renderEmbeddings(emb.data) : notReady("embeddings", emb));
  document.body.dataset.loaded = "true";
}
void main();
