/**
 * The Models page: the user's text through a shipped model, stage by stage. On load it reads only the manifest,
 * the tokenizer and the chosen model's model.json (a few kB) and says what each download costs; the engine and a
 * model are fetched when the user asks, with a progress bar, and kept for the session.
 */
import "../site";
import { linePlot, type Series } from "../charts";
import { ENGINE_BYTES, encode, engineLoaded, forward, hasFirstLayer, isLoaded, load, loadManifest, loadState, modelInfo, tokenOf, type Encoded, type Forward, type Manifest, type ModelInfo, type Signal } from "../engine";
import { EOT, bitsPerToken, megabytes, meanOf, movingMean, mulberry32, nextTokenDistribution, progressText, range, sampleFrom, showBytes, signalOfHooks, tokenBytes } from "../lm";
import { SCHEMES as REGISTRY } from "../schemes";
import { $, el, labelled, numberSlider, select } from "../ui";
import { tokenMap } from "./models-attention";
import { linker } from "./models-flow";
import { SHOWN, constructorCode, constructorNote, layerView } from "./models-layer";
import { seriesColours } from "./results-palette";
import { DATA_FILES, checkLength, loadData, presentFiles, type LengthData } from "../data";
import { sig } from "../scale";

const DEFAULT_TEXT = `def count_words(path):
    """Return a dict mapping each word in the file to its count."""
    counts = {}
    with open(path) as f:
        for line in f:
            for word in line.split():
                counts[word] = counts.get(word, 0) + 1
    return counts
`;
const TOP_ROWS = 10;

const textArea = $("#lm-text") as HTMLTextAreaElement;
const schemeSelect = $("#lm-scheme") as HTMLSelectElement;
const loadButton = $("#lm-load") as HTMLButtonElement;
const status = $("#lm-status");
let manifest: Manifest;
let schemes: string[] = []; // every model in the manifest, in the registry's order (unknown names last)
let encoded: Encoded = { ids: [], tokens: [] };
let runs = new Map<string, { ids: number[]; out: Forward }>(); // the last pass of each scheme on the current text
let generation = 0; // bumped per edit, so that a stale pass never draws over a newer one

const chosen = () => schemeSelect.value;
const modelBytes = (s: string) => manifest.models[s].files["model.onnx"];
const maxLength = (s: string) => manifest.models[s].max_length;
/** The tokens a scheme is run on: the text's first max_length (the graph takes no more). */
const inputOf = (s: string) => encoded.ids.slice(0, maxLength(s));
const labels = () => encoded.tokens.map((t) => showBytes(tokenBytes(t)));
const registered = (s: string) => REGISTRY.find((r) => r.name === s);
/** model.json's "signal"; for an export without it, what the registry's hooks say. */
const signalOf = (info: ModelInfo): Signal => info.signal ?? signalOfHooks(registered(info.scheme)?.hooks ?? []);

// ---------------------------------------------------------------------------------------------------------
// Downloads: sizes first, then a progress bar

/** What loading `s` would fetch now, in words: its model.onnx and, the first time, the engine. */
const cost = (s: string): string => (engineLoaded() ? megabytes(modelBytes(s)) : `${megabytes(modelBytes(s))}, and the engine's ${megabytes(ENGINE_BYTES)} once`);

function sizesView(): void {
  const all = schemes.reduce((a, s) => a + modelBytes(s), 0);
  $("#lm-sizes").textContent =
    `Nothing large is fetched until you ask. The engine, onnxruntime-web's WebAssembly build (served by this site), is ${megabytes(ENGINE_BYTES)}, fetched once with the first model you load. ` +
    `Each model is one model.onnx file (float32 weights and the graph): ${schemes.length} models, ${megabytes(all)} together, listed below. ` +
    `Trained on ${manifest.corpus}; their validation bits per byte are far from what longer training reaches: these models are small and brief on purpose, to ship.`;
  // a budget every model shares goes in the caption, so that on a phone the columns that differ stay in view
  const budget = (s: string) => `${manifest.models[s].steps} × ${manifest.models[s].batch_size} × ${manifest.models[s].context_length}`;
  const shared = new Set(schemes.map(budget)).size === 1 ? budget(schemes[0]) : null;
  const m0 = manifest.models[schemes[0]];
  $("#lm-models caption").replaceChildren(
    shared
      ? `The shipped models, each trained ${m0.steps} steps of ${m0.batch_size} windows of ${m0.context_length} tokens: validation bits per byte (on text held out from training), download size`
      : "The shipped models: training (steps × batch × tokens), validation bits per byte, download size",
    ...resultsNote(),
  );
  const heads = ["scheme", ...(shared ? [] : ["steps × batch × tokens"]), "bits per byte", "download", "status"];
  $("#lm-models thead").replaceChildren(el("tr", {}, ...heads.map((h) => el("th", { scope: "col", text: h }))));
  $("#lm-models tbody").replaceChildren(
    ...schemes.map((s) => {
      const m = manifest.models[s];
      return el(
        "tr",
        { "data-scheme": s, "data-bytes": String(modelBytes(s)) },
        el("td", { text: s }),
        shared ? null : el("td", { text: budget(s) }),
        el("td", { text: sig(m.val_bpb, 4, 6) }), // as the note beside it gives the Results page's
        el("td", { text: megabytes(modelBytes(s)) }),
        el("td", { class: "model-status", text: loadState(s) }),
      );
    }),
  );
  const s = chosen();
  loadButton.hidden = isLoaded(s);
  loadButton.disabled = loadState(s) === "loading";
  loadButton.textContent = loadButton.disabled ? `Loading the ${s} model…` : `Load the ${s} model (${cost(s)})`;
  const rest = schemes.filter((x) => loadState(x) === "not loaded");
  const more = rest.reduce((a, x) => a + modelBytes(x), 0) + (engineLoaded() || !rest.length ? 0 : ENGINE_BYTES);
  $("#lm-compare").textContent = rest.length ? `Load and compare all ${schemes.length} models (${megabytes(more)} more)` : `Compare all ${schemes.length} models`;
}

/** The Results page's length experiment (data/length.json), read only for the note under the bits-per-byte table. */
let lengthRuns: LengthData | null = null;

/**
 * The note on the numbers this table shares with the Results page (bits per byte at the training length, same
 * schemes): they differ because they are separate trainings, which it says with both sources' facts and a link.
 */
function resultsNote(): (HTMLElement | string)[] {
  const runs = lengthRuns;
  if (!runs) return [];
  const there = runs.rows.filter((r) => r.length === runs.train_length && r.status === "ok" && r.bpb_mean !== null && (!r.variant || r.variant === "plain") && schemes.includes(r.scheme));
  if (!there.length) return [];
  const m = manifest.models[there[0].scheme] as Manifest["models"][string] & { seed?: number; step_of_val?: number };
  const seeds = Math.max(...runs.rows.map((r) => r.n_seeds));
  const windows = runs.command.match(/--eval-windows\s+(\d+)/)?.[1];
  const longest = Math.max(...runs.eval_lengths);
  const n = (v: number) => v.toLocaleString("en-US");
  return [
    el("br"),
    el(
      "span",
      { class: "note", id: "lm-models-note" },
      "Not the numbers of ",
      el("a", { href: "./results.html#length-table", text: "the Results page" }),
      ` at ${runs.train_length} tokens (there: ${there.map((r) => `${r.scheme} ${sig(r.bpb_mean!, 4, 6)}`).join(", ")}). These are separate trainings, made to ship: ${n(m.steps)} steps, one seed${m.seed === undefined ? "" : ` (${m.seed})`}, validated once at step ${n(m.step_of_val ?? m.steps)}; ` +
        `the Results page shows the length experiment's own runs (length.json), each the mean of ${seeds} seeds${windows ? `, scored on ${windows} windows of ${n(longest)} tokens` : ""}.`,
    ),
  ];
}

const bar = $("#lm-progress") as HTMLProgressElement;
/**
 * The progress callback of one file (`key`: "engine" or a scheme): the bar, its text in bytes, and once the file
 * is complete, `key=bytes` added to the body's data-downloads (what the tests read).
 */
function showing(key: string, words: string) {
  return (received: number, total: number) => {
    $("#lm-download").hidden = false;
    $("#lm-progress-label").textContent = received < total ? `Downloading ${words}` : `Downloaded ${words}`;
    bar.max = total;
    bar.value = received;
    $("#lm-progress-text").textContent = progressText(received, total);
    if (received >= total) document.body.dataset.downloads = `${document.body.dataset.downloads ?? ""} ${key}=${received}`.trim();
  };
}

/** Load `s` (and the engine, the first time), with the bar following each download. */
async function fetchModel(s: string): Promise<void> {
  if (isLoaded(s)) return load(s).then(() => undefined);
  status.textContent = `Downloading the ${s} model (${cost(s)})…`;
  const done = load(s, { engine: showing("engine", "the engine"), model: showing(s, `the ${s} model`) });
  sizesView();
  try {
    await done;
  } finally {
    sizesView();
  }
}

// ---------------------------------------------------------------------------------------------------------
// The text and its tokens

function tokensView(): void {
  const max = Math.max(...schemes.map(maxLength));
  const learned = schemes.filter((s) => maxLength(s) < max).map((s) => `${s} only its first ${maxLength(s)}`);
  $("#lm-token-count").textContent =
    `${encoded.ids.length} tokens from ${new TextEncoder().encode(textArea.value).length} bytes, ${EOT} first.` + (encoded.ids.length > max ? ` The models read the first ${max}${learned.length ? ` (${learned.join(", ")})` : ""}.` : "");
  $("#lm-tokens").replaceChildren(
    ...encoded.tokens.map((t, i) => el("span", { class: "token", "data-id": String(encoded.ids[i]), "data-token": i, title: `position ${i}, id ${encoded.ids[i]}` }, el("span", { class: "token-text", text: showBytes(tokenBytes(t)) }), el("span", { class: "token-id", text: String(encoded.ids[i]) }))),
  );
  link.register("tokens", $("#lm-tokens"));
}

async function constructorView(): Promise<void> {
  const s = chosen();
  const info = await modelInfo(s);
  if (s !== chosen()) return;
  const signal = signalOf(info);
  $("#lm-constructor code").textContent = constructorCode(info, encoded.ids, signal);
  $("#lm-constructor-note").textContent = constructorNote(registered(s), signal, info);
}

// ---------------------------------------------------------------------------------------------------------
// The first layer and attention

// the one linking state: a token pointed at in any view is lit in all of them (models-flow.ts)
const link = linker($("#flow-explain"), () => "Point at a token, or tap it, to light it in every view; point at a number to read it here.");
const layer = layerView(link);
// one selection: a token pinned anywhere (the text's tokens at the top, say) is brought into the flow's window
link.onPin((k) => k !== null && layer.reveal(k));
$("#lm-layer-controls").append(...layer.controls);

function layerDraw(s: string, info: ModelInfo, run: { ids: number[]; out: Forward } | undefined): void {
  const intro = $("#lm-layer-intro");
  $("#lm-layer-controls").hidden = !run || !hasFirstLayer(info);
  $("#flow-explain").hidden = !run || !hasFirstLayer(info);
  if (!run) {
    intro.textContent = `Load the ${s} model to see its numbers.`;
    layer.root.remove();
    return;
  }
  if (!hasFirstLayer(info)) {
    intro.textContent = `This copy of the ${s} model was exported before octlm's graphs returned the first layer's numbers; run scripts/site-models again (octlm export onnx) to see them here.`;
    intro.dataset.needsExport = "true";
    layer.root.remove();
    return;
  }
  delete intro.dataset.needsExport;
  intro.textContent = `The ${s} model's first layer on your text, ${SHOWN}, from the tokens to the next-token probabilities: each number is an output of its graph (rows added: the difference of two). Point at a token (or tap it) to follow it through every step; point at a number to read what it is. Move the windows to see other tokens and channels.`;
  layer.update({ info, signal: signalOf(info), out: run.out, labels: labels(), ids: run.ids, names: (ids) => Promise.all(ids.map(async (id) => showBytes(tokenBytes(await tokenOf(s, id))))) });
  $("#lm-layer").append(layer.root);
}

const attnLayer = select("lm-attn-layer", [["0", "0"]], "0");
const attnHead = select("lm-attn-head", [["0", "0"]], "0");
$("#lm-attn-controls").append(labelled("Layer", attnLayer), labelled("Head", attnHead));
const attnMap = tokenMap("lm-attn-map", "attention probability", (root) => link.register("attention-map", root));
attnLayer.addEventListener("change", () => attentionView());
attnHead.addEventListener("change", () => attentionView());

function attentionView(): void {
  const s = chosen();
  const run = runs.get(s);
  $("#lm-attn-controls").hidden = !run;
  if (!run) {
    $("#lm-attn").replaceChildren(el("p", { text: `Load the ${s} model to see its attention.` }));
    return;
  }
  const T = run.ids.length;
  const options = (n: number, sel: HTMLSelectElement) => {
    if (sel.options.length !== n) sel.replaceChildren(...Array.from({ length: n }, (_, i) => el("option", { value: String(i), text: String(i) })));
  };
  options(run.out.attention.length, attnLayer);
  options(run.out.attention[0].length / (T * T), attnHead);
  const data = run.out.attention[Number(attnLayer.value)];
  const h = Number(attnHead.value);
  // a rule that does not normalise (stick-breaking) leaves rows summing to less than 1: say so, from the numbers
  const short = range(0, T).some((q) => Math.abs(data.subarray((h * T + q) * T, (h * T + q + 1) * T).reduce((a, b) => a + b, 0) - 1) > 1e-3);
  const caption = `Attention weights, ${s} model, layer ${attnLayer.value}, head ${attnHead.value}, query by key${short ? "; this scheme's rows sum to less than 1 (its rule does not normalise them)" : ""}`;
  attnMap.update({ data, T, head: h, labels: labels(), kind: "probability", caption });
  if (!attnMap.root.isConnected) $("#lm-attn").replaceChildren(attnMap.root);
}

// ---------------------------------------------------------------------------------------------------------
// The next token and sampling

const temperature = numberSlider("lm-temperature", "Temperature", 1, 0, 2, () => void nextView().catch(fail), { step: 0.05 });
const topK = numberSlider("lm-topk", "Top-k (0: all)", 40, 0, 1024, () => void nextView().catch(fail));
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

async function nextView(): Promise<void> {
  const s = chosen();
  ($("#lm-generate") as HTMLButtonElement).disabled = !isLoaded(s);
  if (!encoded.ids.length || !runs.has(s)) {
    $("#lm-next tbody").replaceChildren(el("tr", { class: "empty" }, el("td", { colspan: 4, text: `Nothing yet: load the ${s} model above to see what it predicts after your text.` })));
    $("#lm-next caption").textContent = `Most likely next tokens (load the ${s} model to see them)`;
    return;
  }
  const mine = generation;
  const candidates = await nextFor(s, encoded.ids);
  if (mine !== generation) return;
  const rows = await Promise.all(candidates.slice(0, TOP_ROWS).map(async (c, i) => el("tr", { "data-id": String(c.id), "data-prob": String(c.prob) }, el("td", { text: String(i + 1) }), el("td", {}, el("code", { text: showBytes(tokenBytes(await tokenOf(s, c.id))) })), el("td", { text: String(c.id) }), el("td", { text: sig(c.prob, 4) }))));
  $("#lm-next tbody").replaceChildren(...rows);
  $("#lm-next caption").textContent = `Most likely next tokens after your text (${s}, temperature ${temperature.input.value}, top-k ${topK.input.value === "0" ? "all" : topK.input.value}; ${candidates.length} tokens kept)`;
}

async function generate(): Promise<void> {
  const s = chosen();
  const button = $("#lm-generate") as HTMLButtonElement;
  button.disabled = true;
  try {
    const random = mulberry32(Number(seed.input.value));
    const ids = [...encoded.ids];
    const bytes: number[] = [];
    for (let i = 0; i < 8; i++) {
      const id = sampleFrom(await nextFor(s, ids), random());
      ids.push(id);
      bytes.push(...tokenBytes(await tokenOf(s, id)));
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
const trainLength = () => manifest.models[schemes[0]]?.context_length ?? 64;
const chart = linePlot({ id: "lm-bits-chart", label: "Bits per token", xLabel: "token position", yLabel: "bits per token", series: [] });
const chartEmpty = el("p", { class: "missing", id: "lm-chart-empty", text: "No model has run on your text yet: load one above, or press \"Compare every model\"; every model loaded is drawn here." });
$("#lm-chart").append(chartEmpty, chart.root);

function bitsView(): void {
  const series: Series[] = [];
  const rows: HTMLElement[] = [];
  const L = trainLength();
  const colours = seriesColours(schemes.length);
  $("#lm-bits thead").replaceChildren(el("tr", {}, el("th", { scope: "col", text: "scheme" }), el("th", { scope: "col", text: `positions 1–${L - 1}` }), el("th", { scope: "col", text: `positions ${L} and on` })));
  schemes.forEach((s, i) => {
    const run = runs.get(s);
    if (!run) return; // every loaded model is drawn, so that loading a second one compares the two
    const V = run.out.logits.length / run.ids.length;
    const bits = bitsPerToken(run.out.logits, run.ids, V); // bits[t - 1] is position t's
    series.push({ name: s, colour: colours[i], points: movingMean(bits, Number(smooth.value)).map((b, t) => [t + 1, b]) });
    const past = run.ids.length > L ? meanOf(bits, L - 1) : NaN;
    const pastText = maxLength(s) <= L && encoded.ids.length > L ? `no rows: the table ends at ${maxLength(s)}` : Number.isNaN(past) ? "text too short" : sig(past, 4);
    rows.push(el("tr", { "data-scheme": s, "data-inside": String(meanOf(bits, 0, L - 1)), "data-past": String(past) }, el("td", { text: s }), el("td", { text: sig(meanOf(bits, 0, L - 1), 4) }), el("td", { text: pastText })));
  });
  $("#lm-bits tbody").replaceChildren(...(rows.length ? rows : [el("tr", { class: "empty" }, el("td", { colspan: 3, text: "Nothing yet: no model has run on your text." }))]));
  const drawn = series.some((s) => s.points.length);
  chartEmpty.hidden = drawn;
  chart.root.hidden = !drawn;
  if (!drawn) return;
  const words = series.map((s) => s.name).join(", ");
  chart.update({ id: "lm-bits-chart", label: `Bits per token along your text for ${words}; the dashed line marks the training length, ${L} tokens. The table below gives the means.`, xLabel: "token position", yLabel: "bits per token", series, marker: { x: L, label: `trained on ${L} tokens` } });
  $("#lm-chart").dataset.series = words;
}

/** Run each of `which` on the text (loading those not loaded, with the bar), keeping the last pass of each. */
async function runSchemes(which: string[]): Promise<void> {
  const mine = generation;
  for (const s of which) {
    const ids = inputOf(s);
    if (ids.length < 1 || runs.has(s)) continue;
    await fetchModel(s);
    const out = await forward(s, ids);
    if (mine !== generation) return;
    runs.set(s, { ids, out });
  }
}

$("#lm-compare").addEventListener("click", () => {
  ($("#lm-compare") as HTMLButtonElement).disabled = true;
  void runSchemes(schemes)
    .then(() => {
      sizesView();
      bitsView();
      status.textContent = `All ${schemes.length} models ran on your text.`;
      document.body.dataset.compared = "true";
    })
    .catch(fail)
    .finally(() => (($("#lm-compare") as HTMLButtonElement).disabled = false));
});

// ---------------------------------------------------------------------------------------------------------

function fail(error: unknown): void {
  status.textContent = `The models could not run: ${error instanceof Error ? error.message : String(error)}`;
  status.classList.add("error");
  sizesView();
}

/** Draw every view of the chosen model for the current text (placeholders when it is not loaded). */
async function views(): Promise<void> {
  const s = chosen();
  const info = await modelInfo(s);
  layerDraw(s, info, runs.get(s));
  attentionView();
  bitsView();
  await nextView();
}

/** Tokenise the text again, run the loaded models on it, and redraw. */
async function update(): Promise<void> {
  generation++;
  const mine = generation;
  const s = chosen();
  encoded = await encode(s, textArea.value);
  if (mine !== generation) return;
  runs = new Map();
  tokensView();
  await constructorView();
  await runSchemes([s, ...schemes.filter((x) => x !== s)].filter(isLoaded)); // the chosen model first
  if (mine !== generation) return;
  await views();
  if (mine !== generation) return;
  status.classList.remove("error");
  status.textContent = isLoaded(s) ? `The ${s} model ran on your text.` : `Your text is ${encoded.ids.length} tokens. Load the ${s} model (${cost(s)}) to run it.`;
}

loadButton.addEventListener("click", () => {
  const s = chosen();
  void fetchModel(s)
    .then(() => runSchemes([s]))
    .then(() => views())
    .then(() => {
      status.textContent = `The ${s} model ran on your text.`;
      status.classList.remove("error");
      document.body.dataset.ran = s;
    })
    .catch(fail);
});

let typing: number | undefined;
textArea.addEventListener("input", () => {
  clearTimeout(typing);
  typing = window.setTimeout(() => void update().catch(fail), 250);
});
schemeSelect.addEventListener("change", () => {
  sizesView();
  void update().catch(fail);
});

/** data/length.json when the site was built with it (only files the build saw are requested), else null. */
async function lengthExperiment(): Promise<LengthData | null> {
  const base = import.meta.env.BASE_URL;
  if (!(await presentFiles(base)).includes(DATA_FILES.length.path.replace("data/", ""))) return null;
  const got = await loadData(base + DATA_FILES.length.path, checkLength);
  return got.state === "ok" ? got.data : null;
}

async function main(): Promise<void> {
  manifest = await loadManifest();
  const order = (s: string) => {
    const i = REGISTRY.findIndex((r) => r.name === s);
    return i < 0 ? REGISTRY.length : i;
  };
  schemes = Object.keys(manifest.models).sort((a, b) => order(a) - order(b) || a.localeCompare(b));
  schemeSelect.replaceChildren(...schemes.map((s) => el("option", { value: s, text: `${s} (${megabytes(modelBytes(s))})` })));
  schemeSelect.value = schemes.includes("rope") ? "rope" : schemes[0];
  textArea.value = DEFAULT_TEXT;
  $("#lm-text-hint").textContent = "Python source reads best: the models learned from it. Tabs, Unicode and Windows line ends are all fine.";
  sizesView();
  lengthRuns = await lengthExperiment();
  sizesView();
  await update();
  document.body.dataset.loaded = "true";
}

// The hook the browser tests (and a curious reader's console) use: the same tokenizer and engine as the page.
Object.assign(window, { octlmModels: { encode: (text: string) => encode(schemes[0], text), forward, schemes: () => [...schemes] } });
void main().catch(fail);
