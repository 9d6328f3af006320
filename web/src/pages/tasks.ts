/**
 * The Tasks page: the task battery's results (public/data/tasks.json, `octlm experiment tasks`, drawn by
 * ./tasks-tables.ts), then the copy and passkey models (public/task-models/, scripts/site-task-models)
 * answering the user's own examples in the browser.
 */
import "../site";
import { DATA_FILES, checkTasks, loadData, presentFiles, type Loaded, type TasksData } from "../data";
import { megabytes, progressText } from "../lm";
import { $, el, numberSlider } from "../ui";
import { claimsTable, notReady, passkeyPointer, renderResults } from "./tasks-tables";
import {
  EOS,
  KEY_DIGITS,
  answerOf,
  bytesToLoad,
  copyExample,
  loadFiller,
  loadTaskManifest,
  modelAnswer,
  passkeyCut,
  passkeyExample,
  passkeyNeedle,
  promptOf,
  spell,
  taskSession,
  type Example,
  type TaskManifest,
  type TaskName,
} from "../tasks";

const BASE = import.meta.env.BASE_URL;
const pct = (v: number) => `${Math.round(100 * v)}`;

// ----------------------------------------------------------------------------------------------------------
// Live: the shipped models answer the user's example

interface Live {
  task: TaskName;
  manifest: TaskManifest;
  example: () => Example | string; // the example, or why there is none (a message)
  root: HTMLElement;
  results: HTMLElement;
  button: HTMLButtonElement;
  status: HTMLElement;
  runs: number; // runs asked for: a run that a newer one overtook stops and drops its answers
  queue: Promise<void>; // one run at a time, in order: a session runs one input at a time
}

const lives: Live[] = []; // every task's live part: one download (the engine) changes every button's size

/** Run the models on the current example after any run in progress (which then stops early). */
function schedule(live: Live): void {
  const mine = ++live.runs;
  live.queue = live.queue.then(() => run(live, mine));
}

const schemesOf = (m: TaskManifest, task: TaskName) => Object.keys(m.tasks[task]?.models ?? {});

/** The tokens spelled out in a row of boxes, the answer's marked. */
function tokenRow(task: TaskName, e: Example, id: string): HTMLElement {
  return el(
    "div",
    { class: "tokens task-tokens", id, "data-tokens": e.tokens.join(","), "aria-label": `${e.tokens.length} tokens` },
    ...e.tokens.map((t, i) => el("span", { class: e.answer[i] ? "token answer" : "token" }, el("span", { class: "token-text", text: spell(task, t) }), el("span", { class: "token-id", text: String(t) }))),
  );
}

const spellAll = (task: TaskName, ids: number[]) => (task === "copy" ? ids.map((t) => spell(task, t)).join(" ") : ids.map((t) => (t === EOS ? " <eos>" : spell(task, t))).join(""));

/** The button's words: what running every model costs now. */
async function label(live: Live): Promise<void> {
  const schemes = schemesOf(live.manifest, live.task);
  const bytes = await bytesToLoad(live.manifest, live.task, schemes);
  live.button.textContent = bytes ? `Run the ${schemes.length} models (download ${megabytes(bytes)} first)` : `Run the ${schemes.length} models again`;
  live.button.dataset.bytes = String(bytes);
}

/** Load each model not yet loaded (the bar follows each file), then run every one on the example and list the answers. */
async function run(live: Live, mine: number): Promise<void> {
  const e = live.example();
  if (typeof e === "string" || mine !== live.runs) return;
  const schemes = schemesOf(live.manifest, live.task);
  const progress = live.root.querySelector("progress")!;
  live.button.disabled = true;
  try {
    for (const s of schemes) {
      await taskSession(live.manifest, live.task, s, (got, total) => {
        progress.hidden = false;
        progress.max = total;
        progress.value = got;
        live.status.textContent = `Downloading the ${s} model or the engine: ${progressText(got, total)}`;
      });
    }
    progress.hidden = true;
    await Promise.all(lives.map(label)); // the engine is loaded now: no button counts it any more
    const want = answerOf(e);
    const prompt = promptOf(e);
    const rows: HTMLElement[] = [];
    for (const s of schemes) {
      const entry = live.manifest.tasks[live.task].models[s];
      const needs = prompt.length + want.length - 1; // the input when the last answer token is predicted
      if (needs > entry.context_length) {
        rows.push(el("tr", { "data-scheme": s, "data-right": "none" }, el("th", { scope: "row", text: s }), el("td", { text: `cannot run: its learned table has ${entry.context_length} rows and this needs ${needs}` }), el("td", { text: "–" })));
        continue;
      }
      if (mine !== live.runs) return; // the example changed: the newer run answers it
      const got = await modelAnswer(live.manifest, live.task, s, prompt, want.length);
      const right = got.length === want.length && got.every((t, i) => t === want[i]);
      rows.push(
        el(
          "tr",
          { "data-scheme": s, "data-answer": got.join(","), "data-right": String(right) },
          el("th", { scope: "row", text: s }),
          el("td", { class: "answer-text" }, el("code", { text: spellAll(live.task, got) })),
          el("td", { class: right ? "right" : "wrong", text: right ? "✓ right" : "✗ wrong" }),
        ),
      );
    }
    if (mine !== live.runs) return; // the example changed while this one ran
    const n = rows.filter((r) => r.dataset.right === "true").length;
    live.results.replaceChildren(
      el("p", { class: "stat" }, `${n} of ${schemes.length} models answer right. The right answer: `, el("code", { text: spellAll(live.task, want) })),
      el("div", { class: "scroll" }, el("table", { class: "plain answers", id: `${live.task}-answers` }, el("caption", { class: "visually-hidden", text: "Each model's greedy answer" }), el("thead", {}, el("tr", {}, el("th", { scope: "col", text: "scheme" }), el("th", { scope: "col", text: "its answer" }), el("th", { scope: "col", text: "verdict" }))), el("tbody", {}, ...rows))),
    );
    live.status.textContent = "";
    live.root.dataset.ran = e.tokens.join(",");
  } catch (error) {
    live.status.textContent = `Could not run the models: ${(error as Error).message}`;
  } finally {
    if (mine === live.runs) live.button.disabled = false;
  }
}

/** The run button, its progress bar and status line, and the answers table; answers follow the example once the models are loaded. */
function liveParts(task: TaskName, manifest: TaskManifest, root: HTMLElement, example: () => Example | string): Live {
  const button = el("button", { type: "button", id: `${task}-run` }) as HTMLButtonElement;
  const status = el("span", { class: "hint", id: `${task}-status`, "aria-live": "polite" });
  const live: Live = { task, manifest, example, root, results: el("div", { id: `${task}-results` }), button, status, runs: 0, queue: Promise.resolve() };
  button.addEventListener("click", () => schedule(live));
  lives.push(live);
  void label(live);
  return live;
}

function modelsNote(manifest: TaskManifest, task: TaskName): HTMLElement {
  const models = manifest.tasks[task].models;
  const schemes = Object.keys(models);
  const bytes = schemes.reduce((n, s) => n + models[s].files["model.onnx"], 0);
  const st = manifest.settings;
  const sizes = manifest.tasks[task].test_sizes;
  const trained = sizes[0];
  const learned = schemes.filter((s) => models[s].learned_at !== null);
  const scores = (s: string) => sizes.map((n) => (models[s].accuracy[String(n)] === null ? "–" : pct(models[s].accuracy[String(n)]!))).join(" / ");
  return el(
    "p",
    { class: "hint", id: `${task}-models-note` },
    `${schemes.length} models (${schemes.join(", ")}), ${megabytes(bytes)} together: the battery's seed-${manifest.seed} cells trained again by `,
    el("code", { text: manifest.command }),
    ` (width ${st.model.d_model}, ${st.model.n_layers} layers, ${st.batch_size} examples a step), each until its held-out exact match at ${trained} reached ${pct(st.target)} % or ${st.steps.toLocaleString("en")} steps. `,
    learned.length ? `Learned: ${learned.map((s) => `${s} at step ${models[s].learned_at!.toLocaleString("en")}`).join(", ")}. ` : "",
    learned.length < schemes.length ? `Not learned within the cap: ${schemes.filter((s) => !learned.includes(s)).join(", ")} (expect wrong answers from ${learned.length ? "them" : "all of them"}). ` : "",
    `Exact match at ${sizes.join(" / ")} ${task === "copy" ? "letters" : "characters"} (the battery's scoring, ${models[schemes[0]].examples} examples a size, in %): ${schemes.map((s) => `${s} ${scores(s)}`).join("; ")}.`,
  );
}

function copyLive(manifest: TaskManifest): void {
  const root = $("#copy-live");
  const items = el("input", { id: "copy-items", type: "text", value: "himpacnp", autocomplete: "off", spellcheck: "false", maxlength: 64, pattern: "[a-p]{1,64}" }) as HTMLInputElement;
  const view = el("div", { id: "copy-example" });
  const random = el("button", { type: "button", id: "copy-random", text: "Random letters" });
  let live: Live;
  const size = numberSlider("copy-size", "Letters to draw", 8, 1, 64, () => undefined, { hint: "trained on 1 to 8" });
  const example = (): Example | string => (/^[a-p]{1,64}$/.test(items.value) ? copyExample(items.value) : "Type 1 to 64 letters, each a to p.");
  const show = () => {
    const e = example();
    // the count follows the letters typed, so "Random letters" draws as many as are shown
    if (typeof e !== "string") size.input.value = size.slider.value = String(items.value.length);
    view.replaceChildren(typeof e === "string" ? el("p", { class: "missing", text: e }) : el("div", {}, el("p", { class: "hint", text: `${items.value.length} letters: ${e.tokens.length} tokens, the answer marked.` }), tokenRow("copy", e, "copy-tokens")));
    if (live && live.root.dataset.ran !== undefined && typeof e !== "string") schedule(live);
  };
  random.addEventListener("click", () => {
    const n = Number(size.input.value) || 8;
    items.value = Array.from({ length: n }, () => String.fromCharCode(97 + Math.floor(Math.random() * 16))).join("");
    show();
  });
  items.addEventListener("input", show);
  live = liveParts("copy", manifest, root, example);
  root.replaceChildren(
    el("div", { class: "controls" }, el("div", { class: "control" }, el("label", { for: "copy-items", text: "Letters (a to p)" }), items), size.control, random),
    view,
    el("div", { class: "download" }, live.button, el("progress", { hidden: true, "aria-label": "download" }), live.status),
    live.results,
    modelsNote(manifest, "copy"),
  );
  show();
}

function passkeyLive(manifest: TaskManifest, filler: string): void {
  const root = $("#passkey-live");
  let live: Live;
  const render = () => show();
  const size = numberSlider("passkey-size", "Filler characters", 32, 8, 256, render, { hint: "trained on 8 to 32" });
  const depth = numberSlider("passkey-depth", "Depth of the key", 0.5, 0, 1, render, { step: 0.05, hint: "0: first, 1: after all the filler" });
  const start = numberSlider("passkey-start", "Filler from character", 0, 0, filler.length - 32, render, { hint: `of a ${filler.length.toLocaleString("en")}-character sample` });
  const key = el("input", { id: "passkey-key", type: "text", value: "12345", inputmode: "numeric", autocomplete: "off", maxlength: KEY_DIGITS, pattern: `\\d{${KEY_DIGITS}}` }) as HTMLInputElement;
  const again = el("button", { type: "button", id: "passkey-new", text: "New example" });
  const view = el("div", { id: "passkey-example" });
  const example = (): Example | string => {
    if (!new RegExp(`^\\d{${KEY_DIGITS}}$`).test(key.value)) return `The key must be ${KEY_DIGITS} digits.`;
    const n = Number(size.input.value);
    // the filler must fit the sample: the start's range follows the length
    const last = String(filler.length - n);
    start.input.max = start.slider.max = last;
    if (Number(start.input.value) > Number(last)) start.input.value = start.slider.value = last;
    const at = Number(start.input.value);
    return passkeyExample(filler.slice(at, at + n), key.value, Number(depth.input.value));
  };
  function show(): void {
    const e = example();
    if (typeof e === "string") {
      view.replaceChildren(el("p", { class: "missing", text: e }));
      return;
    }
    const [n, d, at] = [Number(size.input.value), Number(depth.input.value), Number(start.input.value)];
    const text = filler.slice(at, at + n);
    const cut = passkeyCut(n, d);
    view.replaceChildren(
      el("p", { class: "hint", text: `${n} characters of filler, the key after ${cut} of them: ${e.tokens.length} tokens (each character one), the answer last.` }),
      el("p", { class: "passkey-text", id: "passkey-tokens", "data-tokens": e.tokens.join(",") }, el("span", { class: "special", text: "<bos>" }), text.slice(0, cut), el("mark", { text: passkeyNeedle(key.value) }), text.slice(cut), el("span", { class: "special", text: "<sep>" }), el("span", { class: "answer-text", text: key.value }), el("span", { class: "special", text: "<eos>" })),
    );
    if (live && live.root.dataset.ran !== undefined) schedule(live);
  }
  again.addEventListener("click", () => {
    start.input.value = start.slider.value = String(Math.floor(Math.random() * (filler.length - Number(size.input.value) + 1)));
    key.value = Array.from({ length: KEY_DIGITS }, () => Math.floor(Math.random() * 10)).join("");
    show();
  });
  key.addEventListener("input", show);
  live = liveParts("passkey", manifest, root, example);
  root.replaceChildren(
    el("div", { class: "controls" }, size.control, depth.control, start.control, el("div", { class: "control" }, el("label", { for: "passkey-key", text: "Key (5 digits)" }), key), again),
    view,
    el("div", { class: "download" }, live.button, el("progress", { hidden: true, "aria-label": "download" }), live.status),
    live.results,
    modelsNote(manifest, "passkey"),
  );
  show();
}

async function main(): Promise<void> {
  const present = await presentFiles(BASE);
  const state: Loaded<TasksData> = present.includes("tasks.json") ? await loadData(BASE + DATA_FILES.tasks.path, checkTasks) : { state: "missing" };
  if (state.state === "ok") {
    const { tables, passkey } = renderResults(state.data);
    $("#tasks-section").replaceChildren(tables);
    $("#passkey-section").replaceChildren(passkey);
    $("#claims-section").replaceChildren(claimsTable(state.data));
    $("#passkey-battery").replaceChildren(passkeyPointer(state.data));
  } else {
    $("#tasks-section").replaceChildren(notReady(state));
    for (const id of ["#passkey-section", "#claims-section", "#passkey-battery"]) $(id).replaceChildren(el("p", { text: "No results yet (see above)." }));
  }
  try {
    const [manifest, filler] = await Promise.all([loadTaskManifest(), loadFiller()]);
    copyLive(manifest);
    passkeyLive(manifest, filler);
  } catch (error) {
    for (const id of ["#copy-live", "#passkey-live"]) $(id).replaceChildren(el("p", { class: "missing" }, `The task models are not in this build (${(error as Error).message}). Make them with `, el("code", { text: "scripts/site-task-models" }), " and rebuild."));
  }
  document.body.dataset.loaded = "true";
}
void main();
