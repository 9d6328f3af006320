import "../site";
import { DATA_FILES, checkEmbeddings, checkLength, loadData, nearest, presentFiles, type EmbeddingsData, type LengthData, type Loaded } from "../data";
import { $, divergingFor, el, fmt, heatmap, labelled, select, svg } from "../ui";

const BASE = import.meta.env.BASE_URL;
// Okabe–Ito (distinguishable with the common colour-vision deficiencies) plus grey and wine, so that the ten
// series of the length experiment never share a colour; RoPE's extension variants are also dashed.
const PALETTE = ["#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#000000", "#F0E442", "#999999", "#882255"];
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

function lengthChart(data: LengthData): SVGElement {
  const W = 640;
  const H = 320;
  const L = 56;
  const R = 16;
  const T = 16;
  const Bm = 44;
  const ok = data.rows.filter((r) => r.status === "ok" && r.bpb_mean !== null);
  const lengths = [...new Set([...data.eval_lengths, data.train_length])].sort((a, b) => a - b);
  const lx = (v: number) => Math.log2(v);
  const [x0, x1] = [lx(lengths[0]), lx(lengths[lengths.length - 1])];
  const ys = ok.flatMap((r) => [r.bpb_mean! - (r.bpb_std ?? 0), r.bpb_mean! + (r.bpb_std ?? 0)]);
  let [y0, y1] = [Math.min(...ys), Math.max(...ys)];
  if (!(y1 > y0)) [y0, y1] = [y0 - 0.5, y1 + 0.5];
  const pad = (y1 - y0) * 0.08;
  y0 -= pad;
  y1 += pad;
  const X = (v: number) => L + ((lx(v) - x0) / (x1 - x0 || 1)) * (W - L - R);
  const Y = (v: number) => T + (1 - (v - y0) / (y1 - y0)) * (H - T - Bm);
  const text = (x: number, y: number, s: string, anchor = "middle", extra: Record<string, string | number> = {}) => {
    const t = svg("text", { x, y, "text-anchor": anchor, "font-size": 11, ...extra });
    t.textContent = s;
    return t;
  };
  const names = [...new Set(data.rows.map(seriesName))];
  const children: SVGElement[] = [];
  for (let i = 0; i <= 4; i++) {
    const v = y0 + (i / 4) * (y1 - y0);
    children.push(svg("line", { x1: L, x2: W - R, y1: Y(v), y2: Y(v), stroke: "#e4e4de" }), text(L - 6, Y(v) + 4, fmt(v, 3), "end"));
  }
  for (const v of lengths) children.push(text(X(v), H - Bm + 16, String(v)));
  children.push(text((L + W - R) / 2, H - 8, "evaluation length (tokens, log scale)"));
  children.push(text(14, (T + H - Bm) / 2, "bits per byte", "middle", { transform: `rotate(-90 14 ${(T + H - Bm) / 2})` }));
  children.push(svg("line", { x1: X(data.train_length), x2: X(data.train_length), y1: T, y2: H - Bm, stroke: "#444", "stroke-dasharray": "4 4" }));
  children.push(text(X(data.train_length) + 4, T + 10, `trained at ${data.train_length}`, "start"));
  names.forEach((name, i) => {
    const colour = PALETTE[i % PALETTE.length];
    const pts = ok.filter((r) => seriesName(r) === name).sort((a, b) => a.length - b.length);
    if (pts.length > 1) children.push(svg("polyline", { points: pts.map((r) => `${X(r.length)},${Y(r.bpb_mean!)}`).join(" "), fill: "none", stroke: colour, "stroke-width": 2, ...(dashed(name) ? { "stroke-dasharray": "6 4" } : {}) }));
    for (const r of pts) {
      if (r.bpb_std) children.push(svg("line", { x1: X(r.length), x2: X(r.length), y1: Y(r.bpb_mean! - r.bpb_std), y2: Y(r.bpb_mean! + r.bpb_std), stroke: colour }));
      children.push(svg("circle", { cx: X(r.length), cy: Y(r.bpb_mean!), r: 3.5, fill: colour }));
    }
  });
  return svg("svg", { viewBox: `0 0 ${W} ${H}`, width: "100%", role: "img", "aria-label": "Bits per byte against evaluation length for each position scheme; the table below has the same numbers", class: "chart", id: "length-chart" }, ...children);
}

export function renderLength(data: LengthData): HTMLElement {
  const names = [...new Set(data.rows.map(seriesName))];
  const key = el("ul", { class: "chart-key" }, ...names.map((n, i) => el("li", {}, el("span", { class: "swatch", style: `background:${PALETTE[i % PALETTE.length]}` }), ` ${n}`)));
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
  return el("div", {}, el("p", {}, "Produced by ", el("code", { text: data.command }), "."), lengthChart(data), key, el("div", { class: "scroll" }, table));
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
    const map = heatmap({ label: "Cosine similarity of the learned position rows", rowName: "position", colName: "position", maxSize: 420 });
    map.root.id = "position-sim";
    map.update(data.position_similarity, divergingFor(data.position_similarity.flat(), 1));
    parts.push(map.root);
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
