/**
 * The Tasks page's results (public/data/tasks.json, `octlm experiment tasks`): per task, exact match and per token
 * against size beside the chance and best-constant-answer baselines, the rows that did not learn the task marked
 * (their scores past training bracketed: they say nothing about positions), and the step each seed learned it at;
 * the depth × length map per row for passkey; and the papers' claims with the battery's verdicts. What the numbers
 * mean is computed in ../tasks-reading.ts (pure, unit-tested); this file only draws it.
 */
import "../tasks.css";
import { DATA_FILES, rowsOf, type Loaded, type TaskResult, type TasksData } from "../data";
import { SCHEMES } from "../schemes";
import { PROBABILITY, colour, ink, type Scale } from "../scale";
import { baselineRows, claimRows, flagOf, learnedAtText, percent, rowList, schemesNotRun, shortReason, taskRows, whoLearned, type Cell, type Metric, type Part, type TaskRow } from "../tasks-reading";
import { el, legend } from "../ui";

const ACCURACY: Scale = PROBABILITY; // a share right: the site's one scale for [0, 1]
const pct = (v: number) => `${Math.round(100 * v)}`;

/** What each task asks, in a line (octlm/experiments/tasks.py's docstrings). */
const ABOUT: Record<string, string> = {
  copy: "Copy a string of letters.",
  reverse: "Write a string of letters backwards.",
  addition: "Add two n-digit numbers, most significant digit first.",
  "addition-reversed": "Add two n-digit numbers, every number written least significant digit first.",
  "addition-hints": "Reversed addition with an index hint before every digit that names its place.",
  mqar: "Read n key–value pairs, then answer every key again with its value.",
  counting: "Statements set, increment or skip three variables; say how often one was incremented since it was last set.",
  "selective-copy": "Copy, in order, the four letters scattered among n positions of noise.",
  passkey: "Fetch a five-digit key hidden in n characters of filler.",
};

// ----------------------------------------------------------------------------------------------------------
// Rows grouped by how their scheme gives positions (the registry's hooks)

const GROUPS: [string, (hooks: string[]) => boolean][] = [
  ["Added to the token vectors", (h) => h.includes("embed")],
  ["Rotating queries and keys", (h) => h.includes("rotate")],
  ["A bias on the attention scores", (h) => h.includes("bias")],
  ["A bias from the content (counted positions)", (h) => h.includes("contextual_bias")],
  ["Attention of its own", (h) => h.includes("attend")],
  ["No position signal", (h) => h.length === 0],
];
const VARIANTS = "Variants: randomized positions, a layer without positions";

/** The rows in groups, in the file's order within each; a row with `+` (a variant) goes last. */
export function groupRows(rows: string[]): [string, string[]][] {
  const hooksOf = (row: string) => SCHEMES.find((s) => s.name === row)?.hooks ?? null;
  const groups: [string, string[]][] = GROUPS.map(([name, test]) => [name, rows.filter((r) => !r.includes("+") && hooksOf(r) !== null && test(hooksOf(r)!))]);
  const placed = new Set(groups.flatMap(([, rs]) => rs));
  groups.push([VARIANTS, rows.filter((r) => !placed.has(r))]);
  return groups.filter(([, rs]) => rs.length > 0);
}

export function notReady(state: Loaded<unknown>): HTMLElement {
  const file = DATA_FILES.tasks;
  if (state.state === "invalid")
    return el(
      "div",
      { class: "missing", id: "tasks-invalid" },
      el("p", {}, "The file ", el("code", { text: `web/public/${file.path}` }), " exists but does not match the format in ", el("code", { text: "web/DATA.md" }), ":"),
      el("ul", {}, ...state.errors.slice(0, 20).map((e) => el("li", { text: e }))),
    );
  return el(
    "div",
    { class: "missing", id: "tasks-missing" },
    el("p", {}, "No results yet: ", el("code", { text: `web/public/${file.path}` }), " has not been produced."),
    el("p", {}, "Make it with ", el("code", { text: file.command }), " (see ", el("code", { text: "web/DATA.md" }), " for the format), then rebuild the site."),
  );
}

// ----------------------------------------------------------------------------------------------------------
// Cells

const NO_ROWS = () => el("td", { class: "no-rows", title: "no rows: a learned table cannot run this long", text: "–", style: `background:#6b6b6b;color:#fff` });

/** A passkey map's cell: exact match in %, coloured; bracketed and uncoloured past training in a row that did not learn. */
function accuracyCell(r: TaskResult | undefined, meaningless: boolean): HTMLElement {
  if (!r) return el("td", { class: "absent", text: "" });
  if (r.mean === null) return NO_ROWS();
  const words = `${pct(r.mean)} % exact match` + (r.interval ? ` (95 % interval ${pct(r.interval[0])}–${pct(r.interval[1])} %` : "") + (r.seeds.length > 1 ? `; seeds ${r.seeds.map(pct).join(", ")} %)` : r.interval ? ")" : "");
  if (meaningless)
    return el("td", { class: "unlearned", "data-value": String(r.mean), "data-unlearned": "true", title: `${words}. Not learned at the training size: says nothing about positions`, "aria-label": `${words}, not meaningful: not learned`, text: `(${pct(r.mean)})` });
  return el("td", { "data-value": String(r.mean), title: words, "aria-label": words, style: `background:${colour(ACCURACY, r.mean)};color:${ink(ACCURACY, r.mean)}`, text: pct(r.mean) });
}

/** A task table's cell: coloured, ° where it does not clear the majority; bracketed and uncoloured where it says nothing. */
function scoreCell(c: Cell, row: TaskRow, metric: string, seedCount: number): HTMLElement {
  if (c.value === null) return NO_ROWS();
  const seeds = c.seeds.length > 1 ? `; seeds ${c.seeds.map(pct).join(", ")} %` : "";
  const some = row.learned && c.seeds.length < seedCount ? `; the ${c.seeds.length} of ${seedCount} seeds that learned the task` : "";
  const interval = c.interval ? ` (95 % interval ${pct(c.interval[0])}–${pct(c.interval[1])} %${seeds}${some})` : "";
  const below = c.belowMajority ? "; ° not clear of the best constant answer" : "";
  const words = `${pct(c.value)} % ${metric}${interval}${below}`;
  if (c.meaningless)
    return el("td", { class: "unlearned", "data-value": String(c.value), "data-unlearned": "true", title: `${words}. Not learned at the training size: says nothing about positions`, "aria-label": `${words}, not meaningful: not learned`, text: `(${pct(c.value)})` });
  return el("td", { "data-value": String(c.value), title: words, "aria-label": words, style: `background:${colour(ACCURACY, c.value)};color:${ink(ACCURACY, c.value)}`, text: pct(c.value) + (c.belowMajority ? "°" : "") });
}

/** The row header: its name, "not learned" where so (the reason on hover), and in the exact table each seed's step. */
function rowHead(row: TaskRow, task: string, steps: boolean): HTMLElement {
  return el(
    "th",
    { scope: "row" },
    el("span", { class: "row-name", text: row.row }),
    row.learned ? null : el("span", { class: "not-learned", title: row.reason ? shortReason(row.reason, row.row, task) : undefined, text: "not learned" }),
    steps ? el("span", { class: "learned-at", "data-steps": learnedAtText(row.learnedAt), text: `step ${learnedAtText(row.learnedAt)}` }) : null,
  );
}

// ----------------------------------------------------------------------------------------------------------
// A task: two tables (exact match, per token) with the baselines under the rows

function metricTable(data: TasksData, task: string, metric: Metric): HTMLElement {
  const spec = data.tasks[task];
  const trained = spec.train_sizes[1];
  const name = metric === "exact" ? "exact match" : (spec.per_token ?? "per token");
  const rows = new Map(taskRows(data, task, metric).map((r) => [r.row, r]));
  const head = el("tr", {}, el("th", { scope: "col", class: "corner", text: `${spec.counts} →` }), ...spec.test_sizes.map((n) => el("th", { scope: "col" }, String(n), el("span", { class: "size-note", text: n <= trained ? " (trained)" : ` (${n / trained}×)` }))));
  const bodies = groupRows(rowsOf(data, task)).map(([group, names]) =>
    el(
      "tbody",
      {},
      el("tr", { class: "group" }, el("th", { scope: "colgroup", colspan: spec.test_sizes.length + 1, text: group })),
      ...names.map((n) => rows.get(n)!).map((r) => el("tr", { "data-row": r.row, "data-learned": String(r.learned), class: r.learned ? undefined : "unlearned-row" }, rowHead(r, task, metric === "exact"), ...r.cells.map((c) => scoreCell(c, r, name, data.seeds.length)))),
    ),
  );
  const floors = spec.baselines
    ? el(
        "tbody",
        { class: "baselines" },
        el("tr", { class: "group" }, el("th", { scope: "colgroup", colspan: spec.test_sizes.length + 1, text: "Baselines: what guessing scores" })),
        ...baselineRows(data, task, metric).map((b) => el("tr", { "data-baseline": b.name }, el("th", { scope: "row", text: b.label }), ...b.values.map((v) => (v === null ? el("td", { text: "" }) : el("td", { class: "baseline", "data-value": String(v), text: percent(v) }))))),
      )
    : null;
  const id = metric === "exact" ? `acc-${task}` : `tok-${task}`;
  return el(
    "figure",
    { class: "task-metric", "data-metric": metric },
    el("figcaption", {}, el("strong", { text: name[0].toUpperCase() + name.slice(1) }), metric === "exact" ? ", in %: every answer token right" : `, in %: the share of answer ${spec.per_token === "per query" ? "queries" : "tokens"} right`),
    el("div", { class: "scroll" }, el("table", { class: "numbers accuracy", id, "data-metric": metric }, el("caption", { class: "visually-hidden", text: `${task}: ${name} in % by row and size, the baselines last` }), el("thead", {}, head), ...bodies, floors)),
  );
}

/** A sentence naming the rows a task did not run on, or "" when it ran on all. */
function notRun(data: TasksData, task: string): string {
  const left = data.rows.filter((r) => !rowsOf(data, task).includes(r));
  return left.length ? ` Run only on the rows a paper's claim reads; not on ${left.join(", ")} (--every-row runs them).` : "";
}

/** A sentence's parts as nodes: the row names as code. */
const parts = (ps: Part[]): (Node | string)[] => ps.map((p) => (typeof p === "string" ? p : el("code", { text: p.row })));

function taskCard(data: TasksData, task: string): HTMLElement {
  const spec = data.tasks[task];
  const reading = whoLearned(data, task);
  const unlearned = taskRows(data, task, "exact").filter((r) => !r.learned);
  return el(
    "section",
    { class: "task-card", "data-task": task, "aria-labelledby": `task-${task}` },
    el("h3", { id: `task-${task}`, text: task }),
    el("p", { class: "hint", text: `${ABOUT[task] ?? ""} Trained on ${spec.train_sizes[0]}–${spec.train_sizes[1]} ${spec.counts}.${notRun(data, task)}` }),
    el("p", { class: "who-learned", "data-learned": reading.learned.join(","), "data-not-learned": reading.notLearned.join(",") }, ...reading.sentences.flatMap((s, i) => [i ? " " : "", ...parts(s)])),
    el("div", { class: "metric-pair" }, metricTable(data, task, "exact"), metricTable(data, task, "per_token")),
    unlearned.length ? el("ul", { class: "not-learned-notes", "aria-label": `${task}: why rows count as not learned` }, ...unlearned.map((r) => el("li", { "data-row": r.row }, el("code", { text: r.row }), `: ${r.reason ? shortReason(r.reason, r.row, task) : "not learned"}.`))) : null,
  );
}

/** How to read the tables: the colour key, the marks and the learned-at steps, in the command's own settings. */
function accuracyKey(data: TasksData): HTMLElement {
  const target = flagOf(data.command, "--target");
  const every = flagOf(data.command, "--check-every");
  const cap = flagOf(data.command, "--steps");
  const stop = target ? `${percent(Number(target))} % exact match on held-out examples` : "its training target";
  return el(
    "div",
    { class: "accuracy-key" },
    legend(ACCURACY, "share right (0 = none, 1 = all; cells give %)"),
    el("span", { class: "legend-masked" }, el("span", { class: "swatch", style: "background:#6b6b6b" }), "– no rows: a learned table has no row past its training length"),
    el(
      "ul",
      { class: "marks" },
      el("li", {}, el("span", { class: "mark-sample", text: "3°" }), " above 0, but its 95 % interval does not clear the best constant answer: no better than always giving one answer"),
      el("li", {}, el("span", { class: "mark-sample unlearned", text: "(0)" }), " uncoloured, in brackets: past the training size in a row that did not learn the task"),
      el("li", {}, el("span", { class: "mark-sample", text: "step 1200 / – / 800" }), ` under a row's name: the step at which each seed reached ${stop}${every ? ` (checked every ${every} steps)` : ""}; – : not within the ${cap ? `${cap}-step` : "step"} cap. A row still counts as learned when a seed reaches ${data.learned === undefined ? "the threshold" : `${percent(data.learned)} %`} on fresh examples.`),
    ),
  );
}

/** The depth × size map of one row of passkey. */
function depthMap(data: TasksData, row: string, find: (row: string, size: number, depth: number) => TaskResult | undefined): HTMLElement {
  const sizes = data.tasks.passkey.test_sizes;
  const unlearned = data.tasks.passkey.not_learned?.[row];
  const trained = data.tasks.passkey.train_sizes[1];
  return el(
    "figure",
    { class: "depth-map", "data-row": row, "data-learned": String(!unlearned) },
    el("figcaption", {}, row, unlearned ? el("span", { class: "not-learned", title: shortReason(unlearned, row, "passkey"), text: "not learned" }) : null),
    el(
      "table",
      { class: "numbers accuracy", id: `depth-${row}` },
      el("caption", { class: "visually-hidden", text: `passkey, ${row}: exact match in % by key depth (rows) and filler length (columns)` }),
      el("thead", {}, el("tr", {}, el("th", { scope: "col", class: "corner", text: "depth" }), ...sizes.map((n) => el("th", { scope: "col", text: String(n) })))),
      el("tbody", {}, ...data.depths.map((d) => el("tr", {}, el("th", { scope: "row", text: String(d) }), ...sizes.map((n) => accuracyCell(find(row, n, d), !!unlearned && n > trained))))),
    ),
  );
}

/** Which registered schemes the battery ran, and the ones it did not, named with how to run them. */
function coverage(data: TasksData): HTMLElement {
  const registry = SCHEMES.map((s) => s.name);
  const missing = schemesNotRun(data.rows, registry);
  return el(
    "p",
    { id: "tasks-coverage", "data-missing": missing.join(",") },
    `Rows built on ${registry.length - missing.length} of the ${registry.length} registered position schemes` +
      (missing.length
        ? `. Not in this battery: ${missing.join(", ")}, which no claim it checks reads; `
        : ": every one."),
    ...(missing.length ? [el("code", { text: `octlm experiment tasks --schemes ${missing.join(" ")}` }), " runs them."] : []),
  );
}

export function renderResults(data: TasksData): { tables: HTMLElement; passkey: HTMLElement } {
  const index = new Map(data.results.filter((r) => r.task === "passkey").map((r) => [`${r.scheme}|${r.size}|${r.depth}`, r]));
  const find = (row: string, size: number, depth: number) => index.get(`${row}|${size}|${depth}`);
  const many = data.seeds.length > 1;
  const made = el("p", {}, many ? `Mean over ${data.seeds.length} seeds; in a row that learned a task, over the seeds that learned it (a seed that did not is left out, as results.md leaves it out). Made by ` : "One seed. Made by ", el("code", { class: "command", text: data.command }), ".");
  const tables = el("div", {}, made, coverage(data), accuracyKey(data), el("div", { class: "task-list", id: "task-tables" }, ...Object.keys(data.tasks).map((t) => taskCard(data, t))));
  const passkey = "passkey" in data.tasks && data.depths.length
    ? el(
        "div",
        {},
        el("p", {}, `Filler lengths ${data.tasks.passkey.test_sizes.join(", ")} characters (trained on ${data.tasks.passkey.train_sizes.join("–")}); the same command, its passkey examples split evenly over the ${data.depths.length} depths. Rows marked "not learned" did not learn passkey at the training size (see its tables above).`),
        legend(ACCURACY, "exact match (0 = none right, 1 = all right; cells give %)"),
        ...groupRows(rowsOf(data, "passkey")).map(([group, rows]) => el("div", { class: "depth-group" }, el("h3", { text: group }), el("div", { class: "depth-grid" }, ...rows.map((r) => depthMap(data, r, find))))),
      )
    : el("p", { text: "This tasks.json has no passkey results by depth." });
  return { tables, passkey };
}

// ----------------------------------------------------------------------------------------------------------
// The claims

export function claimsTable(data: TasksData): HTMLElement {
  const rows = claimRows(data);
  if (!rows.length) return el("p", { text: "This tasks.json has no claims." });
  const heads = ["paper", "claim", "measured as", "verdict", "why"];
  const cell = (label: string, ...kids: (Node | string | null)[]) => el("td", { "data-label": label }, ...kids);
  return el(
    "div",
    { class: "claims-box" },
    el(
      "table",
      { class: "claims", id: "claims-table" },
      el("caption", { class: "visually-hidden", text: "The papers' claims the task battery checks, with its verdicts" }),
      el("thead", {}, el("tr", {}, ...heads.map((h) => el("th", { scope: "col", text: h })))),
      el(
        "tbody",
        {},
        ...rows.map((c) =>
          el(
            "tr",
            { "data-claim": c.key, "data-verdict": c.verdict },
            el("th", { scope: "row", "data-label": "paper", text: c.paper }),
            cell("claim", c.claim),
            cell("measured as", c.metric),
            el("td", { "data-label": "verdict", class: "verdict" }, el("span", { class: `verdict-mark verdict-${c.verdict}`, text: c.mark })),
            cell("why", c.reasons.length > 1 ? el("ul", { class: "reasons" }, ...c.reasons.map((r) => el("li", { text: r }))) : c.reasons.join(""), c.estimates.length ? el("ul", { class: "estimates" }, ...c.estimates.map((e) => el("li", { text: e }))) : null),
          ),
        ),
      ),
    ),
  );
}

/** The sentence under the live passkey models: which rows of the battery did learn the passkey, from the data. */
export function passkeyPointer(data: TasksData): HTMLElement {
  const spec = data.tasks.passkey;
  if (!spec) return el("p", { text: "This tasks.json has no passkey results." });
  const reading = whoLearned(data, "passkey");
  return el(
    "p",
    { id: "passkey-battery-note", "data-learned": reading.learned.join(",") },
    `The models below are the battery's seed-0 cells, trained again for the browser; the tables above score ${data.seeds.length} seeds each: at ${spec.train_sizes[1]} ${spec.counts}, `,
    ...(reading.learned.length ? [`${reading.learned.length} of ${reading.learned.length + reading.notLearned.length} rows learned it (`, ...parts(rowList(reading.learned)), ")"] : ["no row learned it"]),
    ...(reading.notLearned.length ? ["; ", ...parts(rowList(reading.notLearned)), " did not"] : []),
    ". See ",
    el("a", { href: "#task-passkey", text: "the passkey tables above" }),
    ".",
  );
}
