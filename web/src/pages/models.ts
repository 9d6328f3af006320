import "../site";
import { heatmap } from "../charts";
import { linePlot, type Series } from "../charts";
import { encode, forward, isLoaded, load, loadManifest, type Encoded, type Forward, type Manifest } from "../engine";
import { EOT, bitsPerToken, meanOf, movingMean, mulberry32, nextTokenDistribution, sampleFrom, showBytes, tokenBytes } from "../lm";
import { scaleFor } from "../scale";
import { $, el, fmt, labelled, numberSlider, select } from "../ui";
import { PALETTE } from "./results-palette";

const DEFAULT_TEXT = `def count_words(path, encoding="utf-8"):
    """Return a dict mapping each word in the file to the number of times it occurs."""
    counts = {}
    with open(path, encoding=encoding) as f:
        for line in f:
            for word in line.split():
                word = word.strip(".,;:!?").lower()
                if not word:
                    continue
                counts[word] = counts.get(word, 0) + 1
    return counts


class Counter(dict):
    """Dict subclass for counting hashable items."""

    def __init__(self, iterable=None, /, **kwds):
        super().__init__()
        self.update(iterable, **kwds)

    def __missing__(self, key):
        return 0

    def most_common(self, n=None):
        if n is None:
            return sorted(self.items(), key=lambda kv: kv[1], reverse=True)
        return heapq.nlargest(n, self.items(), key=lambda kv: kv[1])
`;
const SCHEMES = ["learned", "sinusoidal", "rope", "alibi", "t5", "nope"];
const TOP_ROWS = 10;
const MB = (bytes: number) => `${fmt(bytes / 1e6, 3)} MB`;

const textArea = $("#lm-text") as HTMLTextAreaElement;
const status = $("#lm-status");
let manifest: Manifest;
let encoded: Encoded = { ids: [], tokens: [] };
let runs = new Map<string, { ids: number[]; out: Forward }>(); // the last pass of each scheme on the current text
let generation = 0; // bumped per edit, so that a stale pass never draws over a newer one

const schemeSelect = () => $("#lm-scheme") as HTMLSelectElement;
const modelBytes = (s: string) => Object.values(manifest.models[s].files).reduce((a, b) => a + b, 0);
const maxLength = (s: string) => manifest.models[s].max_length;
/** The tokens a scheme is run on: the text's first max_length (the graph takes no more). */
const inputOf = (s: string) => encoded.ids.slice(0, maxLength(s));

function modelsTable(): void {
  $("#lm-models tbody").replaceChildren(
    ...Object.entries(manifest.models).map(([s, m]) =>
      el(
        "tr",
        { "data-scheme": s },
        el("td", { text: s }),
        el("td", { text: `${m.steps} × ${m.batch_size} × ${m.context_length}` }),
        el("td", { text: fmt(m.val_bpb, 4) }),
        el("td", { text: MB(modelBytes(s)) }),
        el("td", { class: "model-status", text: isLoaded(s) ? "loaded" : "not loaded" }),
      ),
    ),
  );
  const n = Object.keys(manifest.models).length;
  $("#lm-sizes").textContent =
    `All ${n} models together: ${MB(manifest.total_bytes)} (each one is model.onnx, float32 weights with the graph, plus its 21 kB tokenizer.json). ` +
    engineSize() +
    `Trained on ${manifest.corpus}; validation bits per byte after ${manifest.models[SCHEMES[0]]?.steps ?? "?"} steps are far from what longer training reaches, and say so: these models are small and brief on purpose, to ship.`;
}

/** The engine's own download, read from the browser's resource timing once it has been fetched. */
function engineSize(): string {
  const wasm = performance.getEntriesByType("resource").find((e) => /ort-wasm[^/]*\.wasm/.test(e.name)) as PerformanceResourceTiming | undefined;
  return wasm?.decodedBodySize ? `The engine, onnxruntime-web's WebAssembly build (served by this site), is ${MB(wasm.decodedBodySize)} more, fetched once. ` : "";
}

function tokensView(): void {
  const max = Math.max(...Object.values(manifest.models).map((m) => m.max_length));
  $("#lm-token-count").textContent = `${encoded.ids.length} tokens from ${new TextEncoder().encode(textArea.value).length} bytes, ${EOT} first.` + (encoded.ids.length > max ? ` The models read the first ${max} (the learned one only its first ${maxLength("learned")}).` : "");
  $("#lm-tokens").replaceChildren(
    ...encoded.tokens.map((t, i) => el("span", { class: "token", "data-id": String(encoded.ids[i]), title: `position ${i}, id ${encoded.ids[i]}` }, el("span", { class: "token-text", text: showBytes(tokenBytes(t)) }), el("span", { class: "token-id", text: String(encoded.ids[i]) }))),
  );
}

// ---------------------------------------------------------------------------------------------------------
// The next token and sampling

const temperature = numberSlider("lm-temperature", "Temperature", 1, 0, 2, () => nextView(), { step: 0.05 });
const topK = numberSlider("lm-topk", "Top-k (0: all)", 40, 0, 1024, () => nextView());
const seed = numberSlider("lm-seed", "Sampling seed", 1, 1, 1000, () => undefined);
$("#lm-sampling").append(temperature.control, topK.control, seed.control);

/** The context for the next token: the text's last max_length tokens. */
const contextOf = (s: string, ids: number[]) => ids.slice(Math.max(0, ids.length - maxLength(s)));

async function nextFor(s: string, ids: number[]) {
  const context = contextOf(s, ids);
  const out = await forward(s, context);
  const V = out.logits.length / context.length;
  const last = out.logits.subarray((context.length - 1) * V, context.length * V);
  return nextTokenDistribution(last, Number(temperature.input.value), Number(topK.input.value));
}

let vocabTokens: Map<number, string> = new Map(); // id -> token string, filled as tokens are seen or predicted

async function tokenText(s: string, id: number): Promise<string> {
  // The decoded text of one id, found by the tokenizer itself: ids of the text seen so far first, else the
  // vocabulary entry read from tokenizer.json (cached once).
  if (!vocabTokens.size) {
    const json = await (await fetch(`${import.meta.env.BASE_URL}models/${s}/tokenizer.json`)).json();
    vocabTokens = new Map(Object.entries(json.model.vocab as Record<string, number>).map(([t, i]) => [i, t]));
  }
  return vocabTokens.get(id) ?? "?";
}

async function nextView(): Promise<void> {
  const s = schemeSelect().value;
  if (!encoded.ids.length) {
    $("#lm-next tbody").replaceChildren();
    return;
  }
  const mine = generation;
  const candidates = await nextFor(s, encoded.ids);
  if (mine !== generation) return;
  const rows = await Promise.all(candidates.slice(0, TOP_ROWS).map(async (c, i) => el("tr", { "data-id": String(c.id), "data-prob": String(c.prob) }, el("td", { text: String(i + 1) }), el("td", {}, el("code", { text: showBytes(tokenBytes(await tokenText(s, c.id))) })), el("td", { text: String(c.id) }), el("td", { text: fmt(c.prob, 4) }))));
  $("#lm-next tbody").replaceChildren(...rows);
  $("#lm-next caption").textContent = `Most likely next tokens after your text (${s}, temperature ${temperature.input.value}, top-k ${topK.input.value === "0" ? "all" : topK.input.value}; ${candidates.length} tokens kept)`;
}

async function generate(): Promise<void> {
  const s = schemeSelect().value;
  const button = $("#lm-generate") as HTMLButtonElement;
  button.disabled = true;
  try {
    const random = mulberry32(Number(seed.input.value));
    const ids = [...encoded.ids];
    const bytes: number[] = [];
    for (let i = 0; i < 8; i++) {
      const id = sampleFrom(await nextFor(s, ids), random());
      ids.push(id);
      bytes.push(...tokenBytes(await tokenText(s, id)));
    }
    const added = new TextDecoder().decode(Uint8Array.from(bytes));
    $("#lm-generated").textContent = `Added ${JSON.stringify(added)} (8 sampled tokens, seed ${seed.input.value}); the text is tokenised again, so the ids may regroup.`;
    textArea.value += added;
    await update();
  } finally {
    button.disabled = false;
  }
}
$("#lm-generate").addEventListener("click", () => void generate().catch(fail));

// ---------------------------------------------------------------------------------------------------------
// Bits per token for every scheme

const smooth = select("lm-smooth", [["1", "none"], ["8", "8 tokens"], ["32", "32 tokens"]], "8");
$("#lm-smooth-control").append(labelled("Trailing mean over", smooth));
smooth.addEventListener("change", () => bitsView());
const trainLength = () => manifest.models[SCHEMES[0]]?.context_length ?? 64;
const chart = linePlot({ id: "lm-bits-chart", label: "Bits per token", xLabel: "token position", yLabel: "bits per token", series: [] });
$("#lm-chart").append(chart.root);
let compareAll = false;

function bitsView(): void {
  const series: Series[] = [];
  const rows: HTMLElement[] = [];
  const L = trainLength();
  SCHEMES.forEach((s, i) => {
    const run = runs.get(s);
    if (!run || (!compareAll && s !== schemeSelect().value)) return;
    const V = run.out.logits.length / run.ids.length;
    const bits = bitsPerToken(run.out.logits, run.ids, V); // bits[t - 1] is position t's
    series.push({ name: s, colour: PALETTE[i], points: movingMean(bits, Number(smooth.value)).map((b, t) => [t + 1, b]), dash: i % 2 ? "6 3" : undefined });
    const past = run.ids.length > L ? meanOf(bits, L - 1) : NaN;
    const pastText = maxLength(s) <= L && encoded.ids.length > L ? `no rows: the table ends at ${maxLength(s)}` : Number.isNaN(past) ? "text too short" : fmt(past, 4);
    rows.push(el("tr", { "data-scheme": s, "data-inside": String(meanOf(bits, 0, L - 1)), "data-past": String(past) }, el("td", { text: s }), el("td", { text: fmt(meanOf(bits, 0, L - 1), 4) }), el("td", { text: pastText })));
  });
  $("#lm-bits tbody").replaceChildren(...rows);
  const points = series.flatMap((s) => s.points);
  if (!points.length) return;
  const words = series.map((s) => s.name).join(", ");
  chart.update({ id: "lm-bits-chart", label: `Bits per token along your text for ${words}; the dashed line marks the training length, ${L} tokens. The table below gives the means.`, xLabel: "token position", yLabel: "bits per token", series, marker: { x: L, label: `trained on ${L} tokens` } });
  $("#lm-chart").dataset.series = words;
}

async function runSchemes(schemes: string[]): Promise<void> {
  const mine = generation;
  for (const s of schemes) {
    const ids = inputOf(s);
    if (ids.length < 2) continue;
    if (!isLoaded(s)) status.textContent = `Downloading the ${s} model (${MB(modelBytes(s))})…`;
    const out = await forward(s, ids);
    if (mine !== generation) return;
    runs.set(s, { ids, out });
    modelsTable();
  }
}

$("#lm-compare").addEventListener("click", () => {
  compareAll = true;
  ($("#lm-compare") as HTMLButtonElement).disabled = true;
  void runSchemes(SCHEMES)
    .then(() => {
      bitsView();
      status.textContent = `All ${SCHEMES.length} models ran on your text (${MB(manifest.total_bytes)} downloaded in all).`;
      document.body.dataset.compared = "true";
    })
    .catch(fail);
});

// ---------------------------------------------------------------------------------------------------------
// Attention

const layer = select("lm-layer", [["0", "0"]], "0");
const head = select("lm-head", [["0", "0"]], "0");
$("#lm-attn-controls").append(labelled("Layer", layer), labelled("Head", head));
const attnMap = heatmap({ label: "Attention probabilities", rowName: "query position", colName: "key position", maxSize: 480, format: (v) => fmt(v, 4) });
$("#lm-attn").append(attnMap.root);
layer.addEventListener("change", () => attentionView());
head.addEventListener("change", () => attentionView());

function attentionView(): void {
  const s = schemeSelect().value;
  const run = runs.get(s);
  if (!run) return;
  const L = run.out.attention.length;
  const H = run.out.attention[0].length / (run.ids.length * run.ids.length);
  const options = (n: number, sel: HTMLSelectElement) => {
    if (sel.options.length !== n) sel.replaceChildren(...Array.from({ length: n }, (_, i) => el("option", { value: String(i), text: String(i) })));
  };
  options(L, layer);
  options(H, head);
  const T = run.ids.length;
  const data = run.out.attention[Number(layer.value)];
  const h = Number(head.value);
  const matrix = Array.from({ length: T }, (_, i) => Array.from(data.subarray((h * T + i) * T, (h * T + i + 1) * T)));
  attnMap.update(matrix, scaleFor(matrix.flat()));
  attnMap.root.querySelector("figcaption")!.textContent = `Attention probabilities, ${s} model, layer ${layer.value}, head ${head.value}, over the first ${T} tokens`;
}

// ---------------------------------------------------------------------------------------------------------

function fail(error: unknown): void {
  status.textContent = `The models could not run: ${error instanceof Error ? error.message : String(error)}`;
  status.classList.add("error");
}

async function update(): Promise<void> {
  generation++;
  const mine = generation;
  const s = schemeSelect().value;
  encoded = await encode(s, textArea.value);
  if (mine !== generation) return;
  runs = new Map([...runs].filter(([k, r]) => r.ids.length === inputOf(k).length && r.ids.every((id, i) => id === inputOf(k)[i])));
  tokensView();
  await runSchemes(compareAll ? SCHEMES : [s]);
  if (mine !== generation) return;
  bitsView();
  attentionView();
  await nextView();
  if (mine !== generation) return;
  status.textContent = `The ${s} model ran on your text.` + (compareAll ? " All six are compared below." : " Press “Compare all six schemes” to run the others too.");
  status.classList.remove("error");
  document.body.dataset.loaded = "true";
}

let typing: number | undefined;
textArea.addEventListener("input", () => {
  clearTimeout(typing);
  typing = window.setTimeout(() => void update().catch(fail), 250);
});
schemeSelect().addEventListener("change", () => void update().catch(fail));

async function main(): Promise<void> {
  manifest = await loadManifest();
  const present = SCHEMES.filter((s) => s in manifest.models);
  schemeSelect().replaceChildren(...present.map((s) => el("option", { value: s, text: `${s} (${MB(modelBytes(s))})` })));
  schemeSelect().value = present.includes("rope") ? "rope" : present[0];
  textArea.value = DEFAULT_TEXT;
  $("#lm-text-hint").textContent = "Python source reads best: the models learned from it. Tabs, Unicode and Windows line ends are all fine.";
  modelsTable();
  await load(schemeSelect().value);
  await update();
}

// The hook the browser tests (and a curious reader's console) use: the same tokenizer and engine as the page.
Object.assign(window, { octlmModels: { encode: (text: string) => encode(SCHEMES[0], text), forward, schemes: () => Object.keys(manifest.models) } });
void main().catch(fail);
