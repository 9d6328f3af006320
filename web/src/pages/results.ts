import "../site";
import { DATA_FILES, checkEmbeddings, checkLength, loadData, nearest, presentFiles, type EmbeddingsData, type LengthData, type Loaded } from "../data";
import { FONT, diagonalMeans, drawPlot, heatmap, linePlot, responsive } from "../charts";
import { LINE_WIDTH } from "../series";
import { $, el, fmt, labelled, select, svg } from "../ui";
import { seriesColours } from "./results-palette";

const BASE = import.meta.env.BASE_URL;
const dashed = (name: string) => name.includes("(");

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
  const t = svg("text", { x, y, "text-anchor": anchor, "font-size": FONT, fill, class: cls });
  t.textContent = s;
  return t;
}

/**
 * Bits per byte against evaluation length, drawn at the width of its box. A length where a scheme cannot run
 * ("no rows") gets a cross in the series colour on the axis and a label, so a series with a single point (the
 * learned table, which ends at the training length) is not mistaken for a missing one.
 */
function lengthChart(data: LengthData, names: string[], width: number): HTMLElement {
  const ok = data.rows.filter((r) => r.status === "ok" && r.bpb_mean !== null);
  const lengths = [...new Set([...data.eval_lengths, data.train_length])].sort((a, b) => a - b);
  const ys = ok.flatMap((r) => [r.bpb_mean! - (r.bpb_std ?? 0), r.bpb_mean! + (r.bpb_std ?? 0)]);
  const colours = seriesColours(names.length);
  const colourOf = (name: string) => colours[names.indexOf(name)];
  const series = names.map((name) => ({
    name,
    colour: colourOf(name),
    dash: dashed(name) ? "6 4" : undefined,
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
      extra: ({ X, Y, bottom, left, styles }) => {
        const kids: SVGElement[] = [];
        // one-point series last, and ringed in white, so no other series hides them
        const order = [...series].sort((a, b) => (b.points.length > 1 ? 1 : 0) - (a.points.length > 1 ? 1 : 0));
        for (const s of order) {
          // a series drawn under a coinciding one gets wider dots too, so its dots ring the other's
          const wider = styles[series.indexOf(s)].width - LINE_WIDTH;
          for (const [x, y] of s.points) {
            const r = ok.find((q) => seriesName(q) === s.name && q.length === x)!;
            if (r.bpb_std) kids.push(svg("line", { x1: X(x), x2: X(x), y1: Y(y - r.bpb_std), y2: Y(y + r.bpb_std), stroke: s.colour }));
            const lone = s.points.length === 1;
            kids.push(svg("circle", { cx: X(x), cy: Y(y), r: lone ? 5 : 3.5 + wider / 2, fill: s.colour, stroke: lone ? "#fff" : "none", "stroke-width": 1.5, class: "point", "data-series": s.name }));
          }
        }
        const byName = new Map<string, number[]>();
        for (const r of noRows) byName.set(seriesName(r), [...(byName.get(seriesName(r)) ?? []), r.length]);
        [...byName].forEach(([name, ls], i) => {
          const c = colourOf(name);
          const y = bottom - 8 - i * 16;
          for (const l of ls) {
            const [x, d] = [X(l), 4];
            kids.push(svg("path", { d: `M${x - d},${y - d}L${x + d},${y + d}M${x - d},${y + d}L${x + d},${y - d}`, stroke: c, "stroke-width": 2, class: "no-rows-mark", "data-series": name, "data-length": String(l) }));
          }
          const first = Math.min(...ls);
          const words = `${name}: no rows`;
          // left of the first cross when it fits between the y axis and the cross (0.62 em a character is wide
          // enough for this font); on a narrow chart it would run over the y ticks, so it goes above the crosses
          const fits = X(first) - 8 - left >= 0.62 * FONT * words.length;
          kids.push(fits ? label(X(first) - 8, y + 4, words, "end", c, "no-rows-label") : label(X(first) - 6, y - 8, words, "start", c, "no-rows-label"));
        });
        return kids;
      },
    },
    width,
  );
}

export function renderLength(data: LengthData): HTMLElement {
  const names = [...new Set(data.rows.map(seriesName))];
  const lengths = [...data.eval_lengths].sort((a, b) => a - b);
  const cell = (name: string, len: number) => {
    const r = data.rows.find((x) => seriesName(x) === name && x.length === len);
    if (!r) return el("td", { text: "—" });
    if (r.status !== "ok" || r.bpb_mean === null) return el("td", { text: "no rows" });
    return el("td", { text: r.bpb_std !== null ? `${fmt(r.bpb_mean, 4)} ± ${fmt(r.bpb_std, 2)}` : fmt(r.bpb_mean, 4), "data-value": String(r.bpb_mean) });
  };
  const table = el(
    "table",
    { class: "plain", id: "length-table" },
    el("caption", { text: `Validation bits per byte (mean ± std over seeds), trained at ${data.train_length} tokens` }),
    el("thead", {}, el("tr", {}, el("th", { scope: "col", text: "scheme" }), ...lengths.map((l) => el("th", { scope: "col", text: String(l) })))),
    el("tbody", {}, ...names.map((n) => el("tr", {}, el("th", { scope: "row", text: n }), ...lengths.map((l) => cell(n, l))))),
  );
  const chart = responsive((w) => lengthChart(data, names, w), 720);
  return el("div", {}, el("p", {}, "Produced by ", el("code", { text: data.command }), "."), chart, el("div", { class: "scroll" }, table));
}

export function renderEmbeddings(data: EmbeddingsData): HTMLElement {
  const picker = select("token-pick", data.tokens.map((t, i) => [String(i), `${t.id}: ${JSON.stringify(t.text)} (${t.count}×)`]), "0");
  const list = el("ol", { id: "neighbours", "aria-live": "polite" });
  const show = () => {
    const i = Number(picker.value);
    list.replaceChildren(
      ...nearest(data.token_table, i, 8).map(({ index, similarity }) =>
        el("li", { "data-value": String(similarity) }, el("code", { text: JSON.stringify(data.tokens[index].text) }), ` id ${data.tokens[index].id}, similarity ${fmt(similarity, 3)}`),
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
      el("p", { text: `Beside the map: the similarity of positions t and t + d, averaged over every t, for each offset d. For a formula such as the sinusoidal table every t gives the same value; a learned table owes it nothing, so this is a summary, not a rule. One step apart: ${fmt(byOffset[1] ?? NaN, 3)}; ${byOffset.length - 1} steps apart: ${fmt(byOffset[byOffset.length - 1], 3)}.` }),
    );
  } else {
    parts.push(el("p", { text: `This run's scheme (${data.position}) has no learned position table, so there is no position similarity map.` }));
  }
  return el("div", {}, ...parts);
}

async function main(): Promise<void> {
  // Only files the build saw are requested, so a site without results makes no failing requests.
  const present = await presentFiles(BASE);
  const has = (path: string) => present.includes(path.replace("data/", ""));
  const missing = { state: "missing" } as const;
  const length = has(DATA_FILES.length.path) ? await loadData(BASE + DATA_FILES.length.path, checkLength) : missing;
  $("#length-section").replaceChildren(length.state === "ok" ? renderLength(length.data) : notReady("length", length));
  const emb = has(DATA_FILES.embeddings.path) ? await loadData(BASE + DATA_FILES.embeddings.path, checkEmbeddings) : missing;
  $("#embed-section").replaceChildren(emb.state === "ok" ? renderEmbeddings(emb.data) : notReady("embeddings", emb));
  document.body.dataset.loaded = "true";
}
void main();
