// Issue 46, on the explainer pages (embeddings, positions, sinusoidal, shapes, rope, bias): one scale per quantity
// across the site, a key on every map that agrees with the colours drawn, the distribution of every random table
// said beside it, and at 390 px nothing the text discusses scrolls sideways or is cut off, and no label sits on
// another. Each map states what it shows (data-quantity) and its scale (data-scale "kind min max", or a heatmap's
// data-scale kind plus data-domain "min max"); these tests check the statement against the key and the pixels.
// Harness: ./harness.mjs.
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { open, settle } from "./harness.mjs";

const PAGES = ["embeddings", "positions", "sinusoidal", "shapes", "rope", "bias"];

/**
 * The rule for each quantity: a fixed scale ("sequential 0 1"), or "signed" (diverging, symmetric around 0, its
 * domain stated by the key), or "from 0" (sequential starting at 0).
 */
const RULE = { probability: "sequential 0 1", "one-hot": "sequential 0 1", "cosine similarity": "diverging -1 1", bias: "signed", embedding: "signed", bucket: "from 0" };

/** Every visible map on the page: what it states, its key, and cells with the value and the colour drawn. */
const maps = (page) =>
  page.evaluate(() => {
    const rgb = (s) => (s.match(/\d+(\.\d+)?/g) ?? []).slice(0, 3).map(Number);
    return [...document.querySelectorAll("[data-quantity]")]
      .filter((m) => m.checkVisibility())
      .map((m) => {
        const words = (m.dataset.scale ?? "").trim().split(/\s+/);
        const fig = m.matches("figure.heatmap") ? m : m.querySelector("figure.heatmap");
        const domain = words.length === 3 ? words.slice(1) : (fig?.dataset.domain ?? "").split(" ");
        const legend = m.querySelector(".legend") ?? (m.dataset.key ? document.getElementById(m.dataset.key)?.querySelector(".legend") : null);
        const key = legend && legend.checkVisibility() ? { kind: legend.dataset.kind, min: Number(legend.dataset.min), max: Number(legend.dataset.max), stops: [...legend.querySelectorAll("stop")].map((s) => rgb(s.getAttribute("stop-color"))) } : null;
        const cells = [];
        // a table: every coloured cell; a heatmap: the cells down the first column and along the last row, read
        // through the keyboard readout and the canvas pixel
        for (const td of m.querySelectorAll("td[data-value]")) if (td.style.background) cells.push({ value: Number(td.dataset.value), rgb: rgb(td.style.background) });
        if (fig) {
          const canvas = fig.querySelector("canvas");
          const img = canvas.getContext("2d").getImageData(0, 0, canvas.width, canvas.height).data;
          const frame = fig.querySelector(".heatmap-frame");
          const out = fig.querySelector("output.readout");
          const press = (key) => frame.dispatchEvent(new KeyboardEvent("keydown", { key, bubbles: true }));
          const read = () => {
            const k = (Number(out.dataset.row) * canvas.width + Number(out.dataset.col)) * 4;
            const value = Number(out.dataset.value);
            if (Number.isFinite(value)) cells.push({ value, rgb: [img[k], img[k + 1], img[k + 2]] });
          };
          for (let i = 0; i < canvas.height; i++) press("ArrowUp");
          press("Home");
          for (let r = 0; r < canvas.height; r++, press("ArrowDown")) read();
          for (let c = 0; c < canvas.width; c++, press("ArrowRight")) read();
        }
        return { id: m.id || m.querySelector("[id]")?.id || m.tagName, quantity: m.dataset.quantity, kind: words[0], min: Number(domain[0]), max: Number(domain[1]), key, init: m.dataset.init ?? null, cells };
      });
  });

/** The colour a key gives to value v: its stops evenly spaced from min to max, linear between them. */
function keyColour(key, v) {
  const u = Math.min(1, Math.max(0, (v - key.min) / (key.max - key.min))) * (key.stops.length - 1);
  const i = Math.min(Math.floor(u), key.stops.length - 2);
  return key.stops[i].map((c, k) => c + (u - i) * (key.stops[i + 1][k] - c));
}
const lum = ([r, g, b]) => 0.2126 * r + 0.7152 * g + 0.0722 * b;

/** Open a page at `width`, and on the bias page switch to `scheme`. */
async function visit(name, width, scheme) {
  const opened = await open(name, { width });
  if (scheme) await opened.page.check(`#bias-${scheme}`);
  await settle(opened.page);
  return opened;
}
const VISITS = PAGES.flatMap((p) => (p === "bias" ? [["bias", "alibi"], ["bias", "t5"]] : [[p]]));

describe("one scale per quantity, a key on every map", () => {
  test("every map's key states the scale it is drawn on, its colours are the key's, and each quantity keeps its one scale", async () => {
    const all = [];
    for (const [name, scheme] of VISITS) {
      const { page, errors } = await visit(name, 1280, scheme);
      for (const m of await maps(page)) all.push({ page: scheme ? `${name} (${scheme})` : name, ...m });
      assert.deepEqual(errors, [], name);
      await page.close();
    }
    // the maps the text discusses all declare themselves (a map that states nothing cannot be checked)
    const found = new Set(all.map((m) => `${m.page} ${m.quantity}`));
    for (const want of ["embeddings one-hot", "embeddings embedding", "positions embedding", "sinusoidal embedding", "sinusoidal cosine similarity", "shapes embedding", "bias (alibi) bias", "bias (t5) bias", "bias (t5) bucket"]) assert.ok(found.has(want), `${want} is declared`);
    for (const m of all) {
      const at = `${m.page} ${m.id} (${m.quantity})`;
      assert.ok(m.key, `${at} has a visible key`);
      assert.deepEqual([m.key.kind, m.key.min, m.key.max], [m.kind, m.min, m.max], `${at}: the key shows the scale the map states`);
      assert.ok(m.quantity in RULE, `${at}: a known quantity`);
      const rule = RULE[m.quantity];
      if (rule === "signed") assert.ok(m.kind === "diverging" && m.min === -m.max && m.max > 0, `${at}: signed values on a diverging scale centred on 0, not ${m.kind} ${m.min} ${m.max}`);
      else if (rule === "from 0") assert.ok(m.kind === "sequential" && m.min === 0, `${at}: sequential from 0`);
      else assert.equal(`${m.kind} ${m.min} ${m.max}`, rule, `${at}: the site's one scale for ${m.quantity}`);
      // sequential: 0 is the light end, the top the dark end, on every scheme
      if (m.kind === "sequential") assert.ok(lum(m.key.stops[0]) > lum(m.key.stops.at(-1)) + 100, `${at}: light at the bottom, dark at the top`);
      // the colours drawn are the key's (2 units of rounding)
      assert.ok(m.cells.length > 0, `${at}: cells read`);
      for (const c of m.cells) {
        const want = keyColour(m.key, c.value);
        assert.ok(Math.max(...c.rgb.map((v, k) => Math.abs(v - want[k]))) <= 2, `${at}: ${c.value} drawn ${c.rgb}, the key gives ${want.map(Math.round)}`);
      }
    }
    // one quantity, one scale: every map of it the same kind, with the same colours at the same fraction of the key
    for (const q of new Set(all.map((m) => m.quantity))) {
      const same = all.filter((m) => m.quantity === q);
      for (const m of same) {
        assert.equal(m.kind, same[0].kind, `${q}: ${m.page} ${m.id} is ${m.kind}, ${same[0].page} ${same[0].id} is ${same[0].kind}`);
        assert.deepEqual(m.key.stops, same[0].key.stops, `${q}: ${m.page} ${m.id} has ${same[0].page}'s colours`);
      }
    }
  });

  test("every random table says beside it where its numbers come from; Positions and Shapes name their two inits", async () => {
    const notes = {};
    // the random tables: embeddings' E and product, the positions playground's tables, the shapes table, T5's biases
    const random = { embeddings: ["embedding"], positions: ["embedding"], shapes: ["embedding"], "bias (t5)": ["bias"] };
    for (const [name, scheme] of VISITS) {
      const label = scheme ? `${name} (${scheme})` : name;
      if (!random[label]) continue;
      const { page } = await visit(name, 1280, scheme);
      for (const m of (await maps(page)).filter((m) => random[label].includes(m.quantity))) {
        assert.ok(m.init, `${label} ${m.id}: names the note on its numbers`);
        const note = page.locator(`#${m.init}`);
        assert.ok(await note.isVisible(), `${label} ${m.id}: its note #${m.init} is shown`);
        const words = await note.innerText();
        assert.match(words, /N\(0, 1\)|standard deviation 0?\.\d+/, `${label} ${m.id}: the note gives the distribution`);
        notes[label] = words;
      }
      await page.close();
    }
    // the same table at two scales, each said: Positions draws N(0, 1) (nn.Embedding's default), Shapes std 0.02 (octlm's)
    assert.match(notes.positions, /N\(0, 1\)[\s\S]*nn\.Embedding[\s\S]*0\.02/);
    assert.match(notes.shapes, /standard deviation\s+0\.02[\s\S]*octlm[\s\S]*N\(0, 1\)/);
  });
});

// ---- at 390 px

/** The tables and maps the text discusses, by page: none may need sideways scrolling or be cut off at 390 px. */
const DISCUSSED = {
  embeddings: ["#embed-onehot table", "#embed-table table", "#embed-product"],
  positions: ["#pos-tokens table", "#pos-rows table", "#pos-sum-table", "#schemes"],
  sinusoidal: ["#sin-table", "#sin-sim", "#sin-width-table"],
  shapes: ["#shape-table", "#shape-picture svg"],
  rope: ["#rope-freq-table", "#rope-picture svg"],
  bias: ["#bias-map", "#slope-table"],
};

/** Each element (and each cell inside it) out of the window or out of a box that scrolls or clips it. */
const hidden = (page, selectors) =>
  page.evaluate((selectors) => {
    const W = document.documentElement.clientWidth;
    const out = [];
    if (document.documentElement.scrollWidth > W + 1) out.push(`the page is ${document.documentElement.scrollWidth - W} px wider than the window`);
    for (const sel of selectors) {
      const el = document.querySelector(sel);
      if (!el) {
        out.push(`${sel} is missing`);
        continue;
      }
      for (let n = el; n && n !== document.body; n = n.parentElement) {
        const s = getComputedStyle(n);
        if (s.overflowX !== "visible" && n.scrollWidth > n.clientWidth + 1) out.push(`${sel}: ${n.id ? `#${n.id}` : n.tagName.toLowerCase()} needs sideways scrolling (${n.scrollWidth} px in ${n.clientWidth} px)`);
      }
      for (const part of [el, ...el.querySelectorAll("th, td, caption")]) {
        const r = part.getBoundingClientRect();
        if (r.width > 0 && (r.left < -1 || r.right > W + 1)) out.push(`${sel}: "${part.textContent.trim().slice(0, 20)}" spans ${r.left.toFixed(0)}–${r.right.toFixed(0)} px in a ${W} px window`);
      }
    }
    return out;
  }, selectors);

/**
 * Labels too close: two tick labels of one heatmap axis, or two labels of one colour bar, closer than the width of
 * one of their characters (or on top of each other).
 */
const crowded = (page) =>
  page.evaluate(() => {
    const out = [];
    const check = (labels, where) => {
      const boxes = labels.filter((l) => l.checkVisibility()).map((l) => ({ r: l.getBoundingClientRect(), t: l.textContent }));
      for (let i = 0; i < boxes.length; i++)
        for (let j = i + 1; j < boxes.length; j++) {
          const [a, b] = [boxes[i], boxes[j]];
          const char = Math.min(a.r.width / a.t.length, b.r.width / b.t.length);
          const gapX = Math.max(a.r.left, b.r.left) - Math.min(a.r.right, b.r.right);
          const gapY = Math.max(a.r.top, b.r.top) - Math.min(a.r.bottom, b.r.bottom);
          if (gapX < char && gapY < 0) out.push(`${where}: "${a.t}" and "${b.t}" ${gapX < 0 ? "overlap" : `are ${gapX.toFixed(1)} px apart`}`);
        }
    };
    for (const fig of document.querySelectorAll("figure.heatmap"))
      for (const axis of ["x", "y"]) check([...fig.querySelectorAll(`.heatmap-${axis}ticks .tick`)], `${fig.id || "a heatmap"} ${axis} ticks`);
    document.querySelectorAll("svg.legend-bar").forEach((bar, i) => check([...bar.querySelectorAll("text")], `colour bar ${i} (${bar.closest(".legend")?.querySelector(".legend-label")?.textContent})`));
    return out;
  });

describe("at 390 px: nothing the text discusses scrolls sideways or is cut off, and no label crowds another", () => {
  for (const name of PAGES) {
    test(`${name} at 390 px`, async () => {
      const { page, errors } = await visit(name, 390);
      assert.deepEqual(await hidden(page, DISCUSSED[name]), [], `${name}: discussed tables and maps in view`);
      assert.deepEqual(await crowded(page), [], `${name}: labels apart`);
      if (name === "positions") {
        // the other four channels are one control away, still without scrolling
        await page.check("#pos-half-1");
        assert.deepEqual(await page.locator("#pos-sum-table thead th").allInnerTexts().then((h) => h.slice(1)), ["4", "5", "6", "7"]);
        assert.deepEqual(await hidden(page, DISCUSSED[name]), [], "channels 4–7");
      }
      if (name === "bias") {
        // every length, both schemes: the tick labels of the maps stay apart
        for (const scheme of ["alibi", "t5"]) {
          await page.check(`#bias-${scheme}`);
          for (let t = 2; t <= 40; t++) {
            await page.fill("#bias-length", String(t));
            await page.press("#bias-length", "Tab");
            assert.deepEqual(await crowded(page), [], `${scheme}, T = ${t}`);
          }
          assert.deepEqual(await hidden(page, scheme === "t5" ? ["#bias-map", "#bucket-map", "#bucket-table"] : DISCUSSED.bias), [], scheme);
        }
      }
      assert.deepEqual(errors, []);
      await page.close();
    });
  }
  test("the colour bars' labels stay apart at 1280 px too", async () => {
    for (const name of PAGES) {
      const { page } = await visit(name, 1280);
      assert.deepEqual(await crowded(page), [], name);
      await page.close();
    }
  });
});

describe("a near-zero probability is drawn pale, not loud", () => {
  // reversed viridis drew 0 bright yellow, so the emptiest attention cells were the loudest on the Models page
  test("Models page: an attention map's near-zero cell is light (luminance > 0.8) and not yellow", async () => {
    const { page, errors } = await open("models", { width: 1280 });
    await page.waitForSelector("body[data-loaded]", { timeout: 60_000 });
    if (await page.locator("#lm-load").isVisible()) await page.click("#lm-load");
    await page.waitForSelector("#lm-attn-map td[data-value]", { timeout: 120_000 });
    const cells = await page.locator("#lm-attn-map td[data-value]").evaluateAll((tds) =>
      tds.map((td) => ({ value: Number(td.dataset.value ?? NaN), masked: td.classList.contains("masked"), rgb: getComputedStyle(td).backgroundColor.match(/\d+(\.\d+)?/g).slice(0, 3).map(Number) })),
    );
    const wcag = (rgb) => {
      const [r, g, b] = rgb.map((c) => (c / 255 <= 0.03928 ? c / 255 / 12.92 : ((c / 255 + 0.055) / 1.055) ** 2.4));
      return 0.2126 * r + 0.7152 * g + 0.0722 * b;
    };
    const real = cells.filter((c) => !c.masked);
    const least = real.reduce((a, c) => (c.value < a.value ? c : a));
    assert.ok(least.value < 0.05, `a near-zero weight on the map: ${least.value}`);
    assert.ok(wcag(least.rgb) > 0.8, `weight ${least.value} is drawn ${least.rgb}, luminance ${wcag(least.rgb).toFixed(3)}`);
    assert.ok(least.rgb[2] >= least.rgb[0] - 10, `weight ${least.value} is drawn ${least.rgb}: yellow (blue far under red)`);
    // and the heaviest weight is drawn dark (masked cells are hatched, not a colour of the ramp: scale.test.ts)
    const most = real.reduce((a, c) => (c.value > a.value ? c : a));
    assert.ok(wcag(most.rgb) < wcag(least.rgb), `${most.value} (${most.rgb}) darker than ${least.value} (${least.rgb})`);
    assert.deepEqual(errors, []);
    await page.close();
  });
});
