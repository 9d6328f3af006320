// The Models page's first-layer picture (src/pages/models-flow.ts, models-layer.ts): one window of tokens from the
// text to the next-token probabilities, every view linked by token. For every shipped scheme, at 1280 px (a mouse:
// hover, click to pin, keyboard focus) and at 390 px (a phone: taps, with touch events as a phone sends them):
// pointing at token k lights exactly the elements of token k in every view and nothing else; pointing at a number
// explains it with the number shown; a bias scheme's bias sits on the attention scores, after x, never in x's sum;
// the attention stage draws lines from the token pointed at to every key it sees, heaviest to its largest weight,
// and none while nothing is pointed at; a token clicked in the text's tokens at the top is brought into the flow;
// and the page never scrolls sideways.
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { RESULTS, WEB, open, settle } from "./harness.mjs";

const DIST = resolve(process.env.WEB_DIST ?? join(WEB, "dist"));
const MANIFEST = JSON.parse(readFileSync(join(DIST, "models/manifest.json"), "utf-8"));
const SCHEMES = Object.keys(MANIFEST.models);
const INFO = Object.fromEntries(SCHEMES.map((s) => [s, JSON.parse(readFileSync(join(DIST, "models", s, "model.json"), "utf-8"))]));
// FLOW_SCHEMES=learned,alibi: a few while working on the page; the suite runs them all
const ONLY = process.env.FLOW_SCHEMES?.split(",");
const K = 5; // the token pointed at: inside the first window of 8, with keys before it
const KEY = 2;

const ready = (page) => page.waitForSelector("body[data-loaded]", { timeout: 60_000 });
/** Choose `scheme`, press its Load button, and wait until it has run on the text and the flow is drawn. */
async function loadModel(page, scheme) {
  await page.selectOption("#lm-scheme", scheme);
  await page.waitForFunction((s) => document.querySelector("#lm-load").hidden || document.querySelector("#lm-load").textContent.includes(s), scheme);
  if (await page.locator("#lm-load").isVisible()) await page.click("#lm-load");
  await page.waitForFunction((s) => document.body.dataset.ran === s || document.querySelector("#lm-status").textContent.startsWith(`The ${s} model ran`), scheme, { timeout: 120_000 });
  await page.waitForSelector("#flow-next tbody tr[data-token]");
}

/** A phone's tap: touch events through the DevTools protocol, so the page sees touch pointers and then a click. */
async function tap(page, cdp, locator) {
  // in the middle of the screen: the explanation line, kept in view at the bottom, covers the last lines
  await locator.evaluate((e) => e.scrollIntoView({ block: "center" }));
  const box = await locator.boundingBox();
  const at = { x: box.x + box.width / 2, y: box.y + box.height / 2 };
  // the click a tap makes comes a little after the touch ends: wait for it
  await page.evaluate(() => {
    window.flowTapped = new Promise((ok) => addEventListener("click", ok, { once: true, capture: true }));
  });
  await cdp.send("Input.dispatchTouchEvent", { type: "touchStart", touchPoints: [at] });
  await cdp.send("Input.dispatchTouchEvent", { type: "touchEnd", touchPoints: [] });
  await page.evaluate(() => Promise.race([window.flowTapped, new Promise((ok) => setTimeout(ok, 3000))]));
  await settle(page);
}

/** Point at an element as the width's user would: a mouse hovers, a phone taps. */
const point = (page, cdp, locator) => (cdp ? tap(page, cdp, locator) : locator.hover());

/** Every element lit now, and per view the elements of token k with whether each is lit. */
const lit = (page, k) =>
  page.evaluate((k) => {
    const views = { tokens: document.querySelector("#lm-tokens"), "attention-map": document.querySelector("#lm-attn-map") };
    for (const s of document.querySelectorAll("#lm-layer [data-view]")) views[s.id] = s;
    const mine = Object.fromEntries(Object.entries(views).map(([name, root]) => [name, [...(root?.querySelectorAll(`[data-token="${k}"]`) ?? [])].map((e) => e.classList.contains("is-linked"))]));
    const strays = [...document.querySelectorAll(".is-linked")].filter((e) => e.dataset?.token !== String(k) && e.getAttribute("data-token") !== String(k)).map((e) => e.outerHTML.slice(0, 80));
    return { mine, strays, count: document.querySelectorAll(".is-linked").length };
  }, k);

/** The number a phrase of the explanation gives, e.g. after "probability ": the page's minus sign read as "-". */
const numberAfter = (words, before) => {
  const m = words.match(new RegExp(`${before}(\\S+)`));
  assert.ok(m, `"${before}" in: ${words}`);
  return Number(m[1].replace("−", "-").replace(/[,;)]$/, ""));
};
const near = (shown, value, what) => assert.ok(Math.abs(shown - value) <= 5e-3 * Math.abs(value) + 1e-9, `${what}: ${shown} vs ${value}`);
const explained = (page) => page.locator("#flow-explain").innerText();

/**
 * The attention lines drawn now (visible ones only), and row k of the flow's attention map as the page holds it
 * (each cell's data-value is the graph's number, unrounded), with the window's first token.
 */
const attentionLines = (page, map, k) =>
  page.evaluate(
    ([map, k]) => ({
      lines: [...document.querySelectorAll("#lm-layer .flow-lines .attn-line")].filter((l) => l.checkVisibility()).map((l) => ({ token: Number(l.dataset.token), to: Number(l.dataset.to), value: Number(l.dataset.value), width: Number(l.getAttribute("stroke-width")), opacity: Number(l.getAttribute("stroke-opacity")) })),
      row: [...document.querySelectorAll(`${map} tr[data-token="${k}"] td[data-value]`)].map((td) => ({ key: Number(td.dataset.key), value: Number(td.dataset.value) })),
      first: Number(document.querySelector("#lm-layer .layer").dataset.rows.split(" ")[0]),
    }),
    [map, k],
  );

/**
 * Token k lit: one line from it to each key of the window at or before it (every one, however small its weight:
 * k − first + 1 lines), none to a later key, width and opacity growing with the weight, and the heaviest line to
 * the key with the largest weight in row k of the map the page holds.
 */
async function assertLines(page, map, k, what) {
  const { lines, row, first } = await attentionLines(page, map, k);
  assert.equal(lines.length, k - first + 1, `${what}: ${lines.length} lines for token ${k} (window from ${first})`);
  assert.ok(lines.every((l) => l.token === k && l.to <= k && l.to >= first), `${what}: lines from ${k} to the keys before it: ${JSON.stringify(lines)}`);
  assert.deepEqual(lines.map((l) => l.to).sort((a, b) => a - b), row.map((c) => c.key).sort((a, b) => a - b), `${what}: one line per unmasked key of row ${k}`);
  const byValue = [...lines].sort((a, b) => a.value - b.value);
  byValue.slice(1).forEach((l, i) => assert.ok(l.width >= byValue[i].width && l.opacity >= byValue[i].opacity, `${what}: weight ${l.value} drawn thinner than ${byValue[i].value}`));
  const argmax = row.reduce((best, c) => (c.value > best.value ? c : best));
  const heaviest = lines.reduce((best, l) => (l.width > best.width ? l : best));
  assert.ok(heaviest.value === argmax.value, `${what}: the heaviest line goes to key ${heaviest.to} (${heaviest.value}); row ${k}'s largest weight is key ${argmax.key} (${argmax.value})`);
  for (const l of lines) assert.equal(l.value, row.find((c) => c.key === l.to).value, `${what}: line ${k} → ${l.to} carries the map's weight`);
}
const visibleLines = async (page) => (await attentionLines(page, "#flow-attn-map", 0)).lines.length;

/** Token k lit in every view it has elements in, and nothing else lit; the views that must show it, do. */
async function assertLit(page, k, scheme) {
  const { mine, strays, count } = await lit(page, k);
  assert.deepEqual(strays, [], `${scheme}: only token ${k} is lit`);
  for (const [view, flags] of Object.entries(mine)) assert.ok(flags.every(Boolean), `${scheme}: every element of token ${k} in ${view} is lit (${flags})`);
  const signal = INFO[scheme].signal;
  const must = ["tokens", "flow-ids", "flow-token-rows", "flow-x", signal === "attend" ? "flow-attend" : "flow-attn", "flow-next", "attention-map"];
  if (signal === "embed") must.push("flow-signal");
  if (signal === "rotate") must.push("flow-rotation");
  if (signal === "bias") must.push("flow-bias");
  for (const view of must) assert.ok(mine[view]?.length > 0, `${scheme}: token ${k} has elements in ${view}: ${JSON.stringify(Object.keys(mine))}`);
  assert.ok(count >= must.length, `${scheme}: ${count} lit`);
}

async function checkScheme(page, cdp, scheme, width) {
  await loadModel(page, scheme);
  await page.mouse.move(1, 1);
  const signal = INFO[scheme].signal;
  const labels = await page.locator("#lm-tokens .token-text").allInnerTexts();
  const T = Math.min(labels.length, MANIFEST.models[scheme].max_length);
  // the tensors are labelled with this text's numbers
  assert.equal(await page.locator("#flow-x .tensor").getAttribute("data-shape"), `[1, ${T}, ${INFO[scheme].d_model}]`, scheme);
  assert.equal(await page.locator("#flow-ids .tensor").getAttribute("data-shape"), `[1, ${T}]`, scheme);
  if (signal === "embed") assert.match(await page.locator("#flow-signal").innerText(), new RegExp(`\\[T, C\\] = \\[${T}, ${INFO[scheme].d_model}\\][^]*broadcast`));

  // a token: lit in every view, with its attention lines
  const map = signal === "attend" ? "#lm-attend-map" : "#flow-attn-map";
  assert.equal(await visibleLines(page), 0, `${scheme}: no attention lines while no token is pointed at`);
  await point(page, cdp, page.locator(`#flow-ids .flow-token[data-token="${K}"]`));
  await assertLit(page, K, scheme);
  await assertLines(page, map, K, `${scheme} at ${width} px`);
  assert.match(await explained(page), new RegExp(`^token ${K} '${escape(labels[K])}' has id \\d+`), scheme);

  // a number of the sum: named by its token, with the numbers the tables show
  const cell = (id) => page.locator(`#${id} tr[data-token="${K}"] td`).nth(1);
  await point(page, cdp, cell("lm-embedded"));
  await assertLit(page, K, scheme);
  const words = await explained(page);
  const [tok, x] = [await cell("lm-token-rows").innerText(), await cell("lm-embedded").innerText()];
  assert.ok(words.startsWith(`token ${K} '${labels[K]}', channel `), `${scheme}: ${words}`);
  if (signal === "embed") assert.ok(words.includes(`token row ${tok} + position row ${await cell("lm-signal").innerText()} = ${x} entering block 0`), `${scheme}: ${words}`);
  else {
    assert.ok(words.includes(`token row ${tok} + nothing = ${x} entering block 0`), `${scheme}: ${words}`);
    assert.equal(tok, x, `${scheme}: nothing is added to x`);
  }

  // a cell of the attention map: query K, key KEY, with the cell's probability
  const attn = page.locator(`${map} tr[data-token="${K}"] td[data-key="${KEY}"]`);
  await point(page, cdp, attn);
  const said = await explained(page);
  assert.ok(said.startsWith(`query '${labels[K]}' (position ${K}) attends to key '${labels[KEY]}' (position ${KEY}) with probability `), `${scheme}: ${said}`);
  near(numberAfter(said, "probability "), Number(await attn.getAttribute("data-value")), `${scheme} attention`);
  assert.deepEqual(await page.locator(`${map} td.is-linked-key`).evaluateAll((tds) => [...new Set(tds.map((t) => t.dataset.key))]), [String(K)], `${scheme}: the key column lit is token ${K}'s`);

  // the bias goes onto the scores: after x, not in x's line, and its cell says so
  const order = await page.locator("#lm-layer .layer > *").evaluateAll((els) => els.map((e) => e.id || (e.classList.contains("op-line") ? e.textContent : e.className)));
  const xAt = order.indexOf("flow-x");
  assert.ok(xAt > 0, `${scheme}: ${order}`);
  for (const before of order.slice(0, xAt)) assert.doesNotMatch(before, /bias|rotat|flow-attn/, `${scheme}: ${before} is in x's sum`);
  assert.equal(await page.locator("#flow-x .token-map, #flow-x #lm-bias-map").count(), 0, `${scheme}: no map in x`);
  if (signal === "bias") {
    assert.ok(order.indexOf("flow-bias") > xAt, `${scheme}: the bias after x: ${order}`);
    assert.match(await page.locator("#flow-bias .flow-title").innerText(), /onto the scores, not onto x/);
    const b = page.locator(`#lm-bias-map tr[data-token="${K}"] td[data-key="${KEY}"]`);
    await point(page, cdp, b);
    const biasWords = await explained(page);
    assert.match(biasWords, new RegExp(`is added to the score of query '${escape(labels[K])}' \\(position ${K}\\) on key '${escape(labels[KEY])}' \\(position ${KEY}\\), before the softmax; x is untouched`));
    near(numberAfter(biasWords, "head \\d+: "), Number(await b.getAttribute("data-value")), `${scheme} bias`);
  }
  if (signal === "rotate") assert.ok(order.indexOf("flow-rotation") > xAt, `${scheme}: the rotation after x`);
  if (signal === "none") assert.match(await page.locator("#lm-layer").innerText(), /NoPE has no position signal/);

  // the next token: a candidate's words carry the probability shown beside it
  const candidate = page.locator(`#flow-next tr[data-token="${K}"] .flow-candidate`).first();
  await point(page, cdp, candidate);
  const next = await explained(page);
  assert.ok(next.startsWith(`after token ${K} '${labels[K]}', the model gives `), `${scheme}: ${next}`);
  assert.equal(numberAfter(next, "probability "), Number((await candidate.innerText()).split(" ").at(-1).replace("−", "-")), scheme);
  await assertLit(page, K, scheme);

  if (cdp) {
    // the first tap pinned token K (the phone has no hover) and taps on its numbers kept it; a tap on the token
    // itself lets go, and a tap on its row's label pins it again
    await tap(page, cdp, page.locator(`#flow-ids .flow-token[data-token="${K}"]`));
    assert.equal((await lit(page, K)).count, 0, `${scheme}: a tap on the pinned token lets go`);
    assert.equal(await visibleLines(page), 0, `${scheme}: no attention lines once let go`);
    await tap(page, cdp, page.locator(`#lm-token-rows tr[data-token="${K}"] th`));
    await assertLit(page, K, scheme);
    await tap(page, cdp, page.locator(`#lm-token-rows tr[data-token="${K}"] th`));
    assert.equal((await lit(page, K)).count, 0, `${scheme}: a second tap lets go`);
  } else {
    // the mouse leaves: nothing stays lit; a click pins until clicked again; the keyboard lights a chip it reaches
    await page.mouse.move(1, 1);
    assert.equal((await lit(page, K)).count, 0, `${scheme}: nothing lit once the mouse leaves`);
    assert.equal(await visibleLines(page), 0, `${scheme}: no attention lines once the mouse leaves`);
    await page.locator(`#lm-embedded tr[data-token="${K}"] th`).click();
    await page.mouse.move(1, 1);
    await assertLit(page, K, scheme);
    await page.locator(`#lm-embedded tr[data-token="${K}"] th`).click();
    await page.mouse.move(1, 1);
    assert.equal((await lit(page, K)).count, 0, `${scheme}: a second click lets go`);
    await page.focus(`#flow-ids .flow-token[data-token="2"]`);
    await page.keyboard.press("Tab");
    await assertLit(page, 3, scheme);
    await page.locator("#lm-scheme").focus();
  }
  const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
  assert.ok(overflow <= 0, `${scheme}: the page is ${overflow} px wider than the ${width} px window`);
  // and no table or map of the picture hides part of itself behind a sideways scroll
  const wide = await page.locator("#lm-layer .scroll").evaluateAll((boxes) => boxes.filter((b) => b.scrollWidth > b.clientWidth + 1).map((b) => `${b.firstElementChild?.id || b.parentElement.id}: ${b.scrollWidth} px in ${b.clientWidth} px`));
  assert.deepEqual(wide, [], `${scheme} at ${width} px`);
}

const escape = (s) => s.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");

describe("models page: the first layer in one picture, linked by token", () => {
  for (const width of [1280, 390]) {
    test(`every shipped scheme at ${width} px: one token lit in every view, numbers explained, the bias outside x, no sideways scroll`, async () => {
      const { page, errors, offsite } = await open("models", { width });
      const cdp = width < 500 ? await page.context().newCDPSession(page) : null;
      if (cdp) await cdp.send("Emulation.setTouchEmulationEnabled", { enabled: true, maxTouchPoints: 1 });
      await ready(page);
      await page.mouse.move(1, 1); // off every view: a phone has no mouse, and the one left on a button would hover
      const schemes = SCHEMES.filter((s) => !ONLY || ONLY.includes(s));
      assert.deepEqual(await page.locator("#lm-scheme option").evaluateAll((os) => os.map((o) => o.value).sort()), [...SCHEMES].sort(), "the picker offers every shipped model");
      for (const s of schemes) await checkScheme(page, cdp, s, width);
      // a phone shows fewer channels rather than a table wider than the screen
      assert.equal(await page.locator("#lm-embedded thead th").count(), width < 500 ? 5 : 9);
      await page.locator("#lm-flow").screenshot({ path: join(RESULTS, `flow-${width}.png`) });
      assert.deepEqual(errors, []);
      assert.deepEqual(offsite, []);
      await page.close();
    });
  }

  test("one selection: a token clicked in the text's tokens at the top is lit in the flow, its window moved to it", async () => {
    const { page, errors } = await open("models", { width: 1280 });
    await ready(page);
    const scheme = SCHEMES.find((s) => INFO[s].signal !== "attend") ?? SCHEMES[0];
    await loadModel(page, scheme);
    const map = INFO[scheme].signal === "attend" ? "#lm-attend-map" : "#flow-attn-map";
    const T = Math.min(await page.locator("#lm-tokens [data-token]").count(), MANIFEST.models[scheme].max_length);
    const far = Math.min(20, T - 1); // past the flow's first window of 8
    assert.ok(far >= 8, `the text has ${T} tokens`);
    for (const k of [far, 3]) {
      await page.locator(`#lm-tokens [data-token="${k}"]`).click();
      await page.mouse.move(1, 1);
      await settle(page);
      const chip = page.locator(`#flow-ids .flow-token[data-token="${k}"]`);
      assert.equal(await chip.count(), 1, `token ${k} is in the flow's window (${await page.locator("#lm-layer .layer").getAttribute("data-rows")})`);
      assert.ok(await chip.evaluate((e) => e.classList.contains("is-linked")), `token ${k}: its chip in the flow is lit`);
      await assertLit(page, k, scheme);
      await assertLines(page, map, k, `token ${k} clicked at the top`);
    }
    // a second click on it lets go, in the flow too
    await page.locator(`#lm-tokens [data-token="3"]`).click();
    await page.mouse.move(1, 1);
    assert.equal((await lit(page, 3)).count, 0);
    assert.equal(await visibleLines(page), 0);
    assert.deepEqual(errors, []);
    await page.close();
  });
});
