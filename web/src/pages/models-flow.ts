/**
 * The Models page's first-layer picture as one flow (tokens → ids → token rows → position signal → x → attention →
 * next token), and the state that links its views: pointing at a token anywhere highlights that token in every
 * view, pointing at a number explains it in one line.
 *
 * Each view marks what belongs to token k with `data-token="k"` (a chip, an id, a table row, a map's row and column
 * header, a line) and a number's words with `data-explain`; it then registers its root here. The linker keeps, per
 * view, an index token → elements, and puts one class, `is-linked`, on the current token's elements in every view.
 * Hover and focus show a token while the pointer (or focus) is on it; a click or tap pins it, so that a phone,
 * which has no hover, keeps the picture lit until the next tap.
 */
import { sig } from "../scale";
import { el } from "../ui";

export const LINKED = "is-linked";
/** The class on a map cell in the current token's key column (a cell's row is its `tr[data-token]`). */
export const LINKED_KEY = "is-linked-key";

// ---------------------------------------------------------------------------------------------------------
// Words and shapes (pure: vitest checks them)

/** "token_rows [1, T, C] = [1, 97, 128]": a tensor's name, its dims by symbol, and their values for this text. */
export function shapeText(name: string, symbols: string[], values: readonly number[]): string {
  const sym = `[${symbols.join(", ")}]`;
  const num = `[${values.join(", ")}]`;
  return sym === num ? `${name} ${num}` : `${name} ${sym} = ${num}`;
}

/** A click or tap on token k: pin it, or unpin it when it was the pinned one. */
export const toggle = (pinned: number | null, k: number): number | null => (pinned === k ? null : k);

/** The token index an element's `data-token` names (null when it names none). */
export function tokenOfAttr(value: string | undefined | null): number | null {
  if (value === undefined || value === null || !/^\d+$/.test(value)) return null;
  return Number(value);
}

const quoted = (label: string) => `'${label}'`;
// the format of the tables the words sit under (sig, 3 digits), so that a number reads the same in both
const num = (v: number) => sig(v, 3);

/**
 * A cell of the sum's equation, channel c of token k, in the numbers the tables print (3 digits): with a position
 * row when the scheme adds one (`pos` not null), else the token row alone, and why.
 */
export function explainSum(k: number, label: string, c: number, tok: number, pos: number | null, x: number, why = ""): string {
  const head = `token ${k} ${quoted(label)}, channel ${c}: token row ${num(tok)}`;
  if (pos !== null) return `${head} + position row ${num(pos)} = ${num(x)} entering block 0`;
  return `${head} + nothing = ${num(x)} entering block 0${why ? ` (${why})` : ""}`;
}

/** A cell of an attention map: how much query q takes from key k (masked: a future key, not a 0). */
export function explainAttention(q: number, qLabel: string, k: number, kLabel: string, p: number | null): string {
  const who = `query ${quoted(qLabel)} (position ${q})`;
  if (p === null) return `${who} cannot see key ${quoted(kLabel)} (position ${k}): a future token, masked`;
  return `${who} attends to key ${quoted(kLabel)} (position ${k}) with probability ${num(p)}`;
}

/** A cell of a position bias: what is added to the score of query q on key k before the softmax. */
export function explainBias(q: number, qLabel: string, k: number, kLabel: string, b: number | null, head: number): string {
  const who = `query ${quoted(qLabel)} (position ${q})`;
  if (b === null) return `${who} cannot see key ${quoted(kLabel)} (position ${k}): a future token, masked`;
  return `head ${head}: ${num(b)} is added to the score of ${who} on key ${quoted(kLabel)} (position ${k}), before the softmax; x is untouched`;
}

/** A cell of q or k before and after the rotation (RoPE and its kin): channel c of token k, one head. */
export function explainRotation(name: string, k: number, label: string, head: number, c: number, before: number, after: number): string {
  return `${name} of token ${k} ${quoted(label)}, head ${head}, channel ${c}: ${num(before)} before the rotation, ${num(after)} after it (turned by an angle that grows with position ${k})`;
}

/** A candidate for the token after token k: its probability under the model (temperature 1, every token kept). */
export function explainNext(k: number, label: string, next: string, p: number, actual: boolean): string {
  return `after token ${k} ${quoted(label)}, the model gives ${quoted(next)} probability ${num(p)}${actual ? " (the text's own next token)" : ""}`;
}

// ---------------------------------------------------------------------------------------------------------
// The linker

interface View {
  root: Element;
  byToken: Map<number, Element[]>;
  keys: Map<number, Element[]>; // map cells by key (the column of token k)
}

/** Group `elements` by the integer their attribute `attr` holds. */
function indexBy(elements: Iterable<Element>, attr: string): Map<number, Element[]> {
  const out = new Map<number, Element[]>();
  for (const e of elements) {
    const k = tokenOfAttr(e.getAttribute(attr));
    if (k === null) continue;
    const list = out.get(k);
    if (list) list.push(e);
    else out.set(k, [e]);
  }
  return out;
}

export interface Linker {
  /** Index `root`'s [data-token] elements under `name` (replacing that name's last index) and listen on it. */
  register(name: string, root: Element): void;
  /** Light token k in every view (null: none). */
  highlight(k: number | null): void;
  /** The token lit now (pinned first, else hovered). */
  current(): number | null;
  /** Call `fn` with the pinned token (null: let go) whenever a click or tap pins one or lets it go. */
  onPin(fn: (k: number | null) => void): void;
  clear(): void;
}

/**
 * The one linking state of the page; `explain` is the line (aria-live) that reads out the number pointed at, and
 * `idle` its words when nothing is.
 */
export function linker(explain: HTMLElement, idle: () => string): Linker {
  const views = new Map<string, View>();
  const listening = new WeakSet<Element>();
  let hovered: number | null = null;
  let pinned: number | null = null;
  let pinnedWords = "";
  let lit: number | null = null;
  const pinListeners: ((k: number | null) => void)[] = [];

  const current = () => pinned ?? hovered;
  function paint(): void {
    const k = current();
    if (k === lit) return;
    for (const v of views.values()) {
      if (lit !== null) {
        for (const e of v.byToken.get(lit) ?? []) e.classList.remove(LINKED);
        for (const e of v.keys.get(lit) ?? []) e.classList.remove(LINKED_KEY);
      }
      if (k !== null) {
        for (const e of v.byToken.get(k) ?? []) e.classList.add(LINKED);
        for (const e of v.keys.get(k) ?? []) e.classList.add(LINKED_KEY);
      }
    }
    lit = k;
    explain.closest(".flow")?.classList.toggle("is-active", k !== null);
  }
  const say = (words: string) => (explain.textContent = words);

  /** What the pointer (or focus) is on: its token and, for a number, its words. */
  function point(target: EventTarget | null, root: Element): { k: number | null; words: string | null; number: boolean } {
    if (!(target instanceof Element) || !root.contains(target)) return { k: null, words: null, number: false };
    const owner = target.closest("[data-token]");
    const cell = target.closest("[data-explain]");
    const inside = cell !== null && root.contains(cell);
    return { k: owner && root.contains(owner) ? tokenOfAttr(owner.getAttribute("data-token")) : null, words: inside ? cell.getAttribute("data-explain") : null, number: inside && cell !== owner && owner !== null && owner.contains(cell) };
  }
  function enter(target: EventTarget | null, root: Element): void {
    const { k, words } = point(target, root);
    hovered = k;
    paint();
    if (words) say(words);
    else if (pinned === null) say(idle());
  }
  function leave(): void {
    hovered = null;
    paint();
    say(pinned === null ? idle() : pinnedWords);
  }
  function listen(root: Element): void {
    if (listening.has(root)) return;
    listening.add(root);
    root.addEventListener("pointerover", (e) => enter(e.target, root));
    root.addEventListener("pointerleave", () => leave());
    // focus lights a token when the keyboard brought it (a tap or a click also focuses a chip: that is a pin's job)
    root.addEventListener("focusin", (e) => e.target instanceof Element && e.target.matches(":focus-visible") && enter(e.target, root));
    root.addEventListener("focusout", () => leave());
    root.addEventListener("click", (e) => {
      const { k, words, number } = point(e.target, root);
      if (k === null) return;
      // a tap on a token (its chip, its row's label) pins it or lets it go; a tap on one of its numbers keeps it
      // pinned, so that a phone can read one number after another
      pinned = number ? k : toggle(pinned, k);
      pinnedWords = pinned === null ? "" : (words ?? explain.textContent ?? "");
      paint();
      say(pinned === null ? (words ?? idle()) : pinnedWords);
      for (const fn of pinListeners) fn(pinned);
    });
  }

  return {
    register(name, root) {
      const v: View = { root, byToken: indexBy(root.querySelectorAll("[data-token]"), "data-token"), keys: indexBy(root.querySelectorAll("[data-key]"), "data-key") };
      views.set(name, v);
      listen(root);
      // a view drawn again while a token is lit (a pinned one, say) shows it lit at once
      if (lit === null) return;
      for (const e of v.byToken.get(lit) ?? []) e.classList.add(LINKED);
      for (const e of v.keys.get(lit) ?? []) e.classList.add(LINKED_KEY);
    },
    highlight(k) {
      pinned = k;
      pinnedWords = "";
      paint();
    },
    current,
    onPin(fn) {
      pinListeners.push(fn);
    },
    clear() {
      pinned = hovered = null;
      paint();
      say(idle());
    },
  };
}

// ---------------------------------------------------------------------------------------------------------
// Pieces of the picture

/**
 * A tensor drawn as what it is: a grid of T rows by C columns (a few of each), stacked B deep when it has a batch
 * dimension; a [T, C] table that is broadcast over the batch is drawn dashed behind. Decorative: the label says it.
 */
function tensorGlyph(rank: number, broadcast: boolean): SVGElement {
  const NS = "http://www.w3.org/2000/svg";
  const s = document.createElementNS(NS, "svg");
  s.setAttribute("viewBox", "0 0 40 30");
  s.setAttribute("width", "40");
  s.setAttribute("height", "30");
  s.setAttribute("aria-hidden", "true");
  s.setAttribute("class", "tensor-glyph");
  const rect = (x: number, y: number, dashed: boolean) => {
    const r = document.createElementNS(NS, "rect");
    for (const [k, v] of Object.entries({ x, y, width: 28, height: 20, fill: dashed ? "none" : "#eaf1fa", stroke: "#1f5fa8", "stroke-dasharray": dashed ? "3 2" : "" })) if (v !== "") r.setAttribute(k, String(v));
    s.append(r);
  };
  if (rank >= 3 || broadcast) rect(9, 2, broadcast);
  rect(3, 8, false);
  return s;
}

/** A tensor's label: the glyph, then its name and shape (symbols = numbers for this text). */
export function tensorLabel(name: string, symbols: string[], values: readonly number[], broadcast = false): HTMLElement {
  return el("span", { class: "tensor", "data-shape": `[${values.join(", ")}]` }, tensorGlyph(symbols.length, broadcast), el("code", { text: shapeText(name, symbols, values) }));
}

/** One stage of the flow: a title, its tensors' labels, then its body. `view` names it for the linker and tests. */
export function stage(id: string, view: string, title: string, shapes: HTMLElement[], ...body: (HTMLElement | null)[]): HTMLElement {
  return el("div", { class: "flow-stage", id, "data-view": view }, el("div", { class: "flow-head" }, el("span", { class: "flow-title", text: title }), ...shapes), ...body);
}

/**
 * The window's tokens as chips, each with its id under it: text → token → id. Focusable, so that the keyboard
 * reaches the linking too.
 */
export function tokenChips(rows: number[], labels: string[], ids: number[]): HTMLElement {
  return el(
    "ol",
    { class: "flow-tokens", start: rows[0] ?? 0 },
    ...rows.map((k) =>
      el(
        "li",
        { class: "flow-token", "data-token": k, tabindex: 0, "data-explain": `token ${k} ${quoted(labels[k])} has id ${ids[k]}: it picks row ${ids[k]} of the token table` },
        el("span", { class: "flow-pos", text: `${k}` }),
        el("span", { class: "token-text", text: labels[k] }),
        el("span", { class: "flow-arrow", "aria-hidden": "true", text: "↓" }),
        el("span", { class: "flow-id", "data-token": k, text: String(ids[k]) }),
      ),
    ),
  );
}

/** Mark a numbers table (ui.ts numberTable) for linking: row i is token rows[i], column j channel c0 + j. */
export function markTable(table: HTMLTableElement, rows: number[], c0: number, words: (k: number, c: number, i: number, j: number) => string): HTMLTableElement {
  [...table.tBodies[0].rows].forEach((tr, i) => {
    tr.dataset.token = String(rows[i]);
    [...tr.cells].filter((c) => c.tagName === "TD").forEach((td, j) => {
      td.dataset.channel = String(c0 + j);
      td.dataset.explain = words(rows[i], c0 + j, i, j);
    });
  });
  return table;
}
