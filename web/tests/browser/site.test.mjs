// Browser tests: the built site (dist/) served on 127.0.0.1, driven by playwright-core with the system Chromium
// (tests/browser/harness.mjs). Every page: loads without console errors or failed requests, makes no request off
// 127.0.0.1, passes axe (no serious/critical violation) at desktop and phone width, fits a 375px phone, has no
// heading jumps or empty headers. Each playground: its controls change its output, a value read off the page
// equals the Python fixture, keyboard operation works. Screenshots go to test-results/ (gitignored).
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { join } from "node:path";
import { PAGES, RESULTS, axe, close, fixture, open, readout, sample, settle, text } from "./harness.mjs";

/** Heading levels in document order that skip one (an h1 followed by an h3), and header cells with no text. */
const structure = (page) =>
  page.evaluate(() => {
    const levels = [...document.querySelectorAll("h1, h2, h3, h4, h5, h6")].map((h) => Number(h.tagName[1]));
    const jumps = levels.flatMap((l, i) => (i && l > levels[i - 1] + 1 ? [`h${levels[i - 1]} → h${l}`] : []));
    const empty = [...document.querySelectorAll("th")].filter((th) => th.textContent.trim() === "").length;
    return { jumps, empty, first: levels[0] };
  });

describe("every page", () => {
  for (const name of PAGES) {
    test(`${name}: loads clean, stays local, passes axe at 1100 and 375 px, fits a phone, no heading jumps`, async () => {
      const { page, errors, offsite, failed } = await open(name);
      if (["results", "measured", "models"].includes(name)) await page.waitForSelector("body[data-loaded]", { timeout: 60_000 });
      assert.equal(await page.locator("main h1").count(), 1);
      // sources are named: no "the article" or "the seed" a reader has no way to find
      const unplaced = (await page.locator("main").innerText()).match(/\b(the|an?) (article|seed series)\b|\bthe seed's\b/gi);
      assert.equal(unplaced, null, `${name} refers to a source it does not name`);
      const { jumps, empty, first } = await structure(page);
      assert.equal(first, 1, "the first heading is the h1");
      assert.deepEqual(jumps, [], "heading levels that skip one");
      assert.equal(empty, 0, "table header cells with no text");
      // every slider shows the value of the number box beside it (a range input snaps a value set before its step)
      const apart = await page.evaluate(() =>
        [...document.querySelectorAll('input[type="range"][id$="-slider"]')].flatMap((slider) => {
          const box = document.getElementById(slider.id.slice(0, -"-slider".length));
          return box && Number(box.value) !== Number(slider.value) ? [`${box.id} ${box.value} / slider ${slider.value}`] : [];
        }),
      );
      assert.deepEqual(apart, [], `${name}: a slider and its number box disagree`);
      const icon = await page.locator('link[rel="icon"]').getAttribute("href");
      assert.ok(icon, "a favicon link");
      assert.equal(await page.evaluate(async (href) => (await fetch(href)).status, icon), 200, "the favicon is served");
      await page.screenshot({ path: join(RESULTS, `${name}.png`), fullPage: true });
      assert.deepEqual(await axe(page), [], "axe at 1100 px");
      await page.setViewportSize({ width: 375, height: 800 });
      await settle(page);
      await page.waitForTimeout(50);
      const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
      assert.ok(overflow <= 1, `${name} is ${overflow}px wider than a 375px phone`);
      // formulas never break: every inline formula's boxes share one line
      const broken = await page.evaluate(() =>
        [...document.querySelectorAll(":not(.katex-display) > .katex .katex-html")].filter((f) => new Set([...f.getClientRects()].map((r) => Math.round(r.top))).size > 1).map((f) => f.textContent.slice(0, 40)),
      );
      assert.deepEqual(broken, [], `${name}: inline formulas broken across lines at 375 px`);
      assert.deepEqual(await axe(page), [], "axe at 375 px");
      await page.screenshot({ path: join(RESULTS, `${name}-phone.png`), fullPage: true });
      assert.deepEqual(errors, [], "console errors");
      assert.deepEqual(failed, [], "failed requests (404s included)");
      assert.deepEqual(offsite, [], "requests that left 127.0.0.1");
      await page.close();
    });
  }
});

describe("playgrounds", () => {
  test("embeddings: the product equals the highlighted row, by mouse and by keyboard", async () => {
    const { page, errors } = await open("embeddings");
    const row = () => page.locator("#embed-table tr.hl td").evaluateAll((tds) => tds.map((td) => td.dataset.value));
    const product = () => page.locator("#embed-product td").evaluateAll((tds) => tds.map((td) => td.dataset.value));
    const first = await product();
    assert.deepEqual(first, await row());
    await page.selectOption("#token", "4");
    assert.notDeepEqual(await product(), first);
    assert.deepEqual(await product(), await row());
    await page.focus("#token");
    await page.keyboard.press("ArrowDown");
    assert.equal(await page.inputValue("#token"), "5");
    assert.deepEqual(await product(), await row());
    assert.match(await text(page, "#embed-check"), /equals row 5/);
    assert.deepEqual(errors, []);
  });

  test("positions: sinusoidal rows equal the fixture; equal tokens differ only by position", async () => {
    const { page } = await open("positions");
    const sums = () => page.locator("#pos-sum-table td").evaluateAll((tds) => tds.map((td) => Number(td.dataset.value)));
    const learned = await sums();
    await page.check('input[value="sinusoidal"]');
    assert.notDeepEqual(await sums(), learned);
    const rows = await page.locator("#pos-rows tbody tr").evaluateAll((trs) => trs.map((tr) => [...tr.querySelectorAll("td")].map((td) => Number(td.dataset.value))));
    const want = fixture("sinusoidal_table")[0]; // length 8, width 8
    assert.equal(want.inputs.width, 8);
    rows.forEach((r, t) => r.forEach((v, c) => close(v, want.output[t][c])));
    assert.match(await text(page, "#pos-note"), /positions 0 and 4/);
    await page.selectOption("#tok-4", "6");
    assert.match(await text(page, "#pos-note"), /Every token differs/);
  });

  test("sinusoidal: a value read off the heatmap equals the fixture; keyboard moves the cursor", async () => {
    const { page } = await open("sinusoidal");
    const want = fixture("sinusoidal_table")[0];
    await page.fill("#sin-width", String(want.inputs.width));
    await page.press("#sin-width", "Enter");
    await page.fill("#sin-length", String(want.inputs.length));
    await page.press("#sin-length", "Tab");
    await page.locator("#sin-table .heatmap-frame").focus();
    for (let i = 0; i < 3; i++) await page.keyboard.press("ArrowDown");
    for (let i = 0; i < 5; i++) await page.keyboard.press("ArrowRight");
    assert.match(await text(page, "#sin-table output"), /position 3, column 5/);
    close(await readout(page, "#sin-table"), want.output[3][5]);
    await page.keyboard.press("End");
    close(await readout(page, "#sin-table"), want.output[3][7]);
    // the similarity map: a cell equals the Python cosine similarity of the same table
    const cos = fixture("cosine_similarity_matrix")[0]; // rows of sinusoidal_table(12, 16)
    await page.fill("#sin-width", "16");
    await page.fill("#sin-length", "12");
    await page.press("#sin-length", "Tab");
    await page.locator("#sin-sim .heatmap-frame").focus();
    for (let i = 0; i < 4; i++) await page.keyboard.press("ArrowDown");
    await page.keyboard.press("ArrowRight");
    close(await readout(page, "#sin-sim"), cos.output[4][1]);
    // the mouse works too
    const box = await page.locator("#sin-sim canvas").boundingBox();
    await page.mouse.move(box.x + box.width * 0.99, box.y + 1);
    assert.match(await text(page, "#sin-sim output"), /position 0, position 11/);
  });

  test("shapes: a mismatch shows octlm's error, word for word", async () => {
    const { page } = await open("shapes");
    assert.equal(await page.locator("#shape-ok").count(), 1);
    await page.locator("#shape-mismatch").focus();
    await page.keyboard.press("Enter");
    assert.match(await text(page, "#shape-error"), /cannot add position table of shape \[5, 256\] to token vectors of shape \[8, 4, 256\]/);
    const want = fixture("add_positions")[0];
    const [b, t, c] = want.inputs.token_shape;
    const [tp, cp] = want.inputs.table_shape;
    for (const [id, v] of [["#shape-b", b], ["#shape-t", t], ["#shape-c", c], ["#shape-tp", tp], ["#shape-cp", cp]]) {
      await page.fill(id, String(v));
      await page.press(id, "Tab");
    }
    assert.equal((await text(page, "#shape-error")).replace(/^UserError:\s*/, ""), want.output);
    await page.check("#shape-follow");
    assert.equal(await page.locator("#shape-ok").count(), 1);
  });

  test("rope: shifting both positions keeps q·k; frequencies equal the fixture", async () => {
    const { page } = await open("rope");
    const dotBefore = await text(page, "#rope-dot");
    const angleBefore = await text(page, "#rope-q-angle");
    await page.locator("#rope-shift-up").focus();
    await page.keyboard.press("Enter");
    await page.keyboard.press("Space");
    assert.equal(await page.inputValue("#rope-m"), "7");
    assert.notEqual(await text(page, "#rope-q-angle"), angleBefore);
    assert.equal(await text(page, "#rope-dot"), dotBefore);
    await page.fill("#rope-n", "0");
    await page.press("#rope-n", "Tab");
    assert.notEqual(await text(page, "#rope-dot"), dotBefore);
    const want = fixture("rope_frequencies").find((c) => c.inputs.head_dim === 64);
    await page.selectOption("#rope-dim", "64");
    await page.selectOption("#rope-pair", "5");
    assert.equal(await text(page, "#rope-channels"), "5 and 37");
    const theta = await page.locator("#rope-freq-table tbody tr").evaluateAll((trs) => trs.map((tr) => Number(tr.children[2].dataset.value)));
    theta.forEach((v, i) => close(v, want.output[i]));
    await page.selectOption("#rope-layout", "interleaved");
    assert.equal(await text(page, "#rope-channels"), "10 and 11");
  });

  test("bias: ALiBi slopes and a T5 bucket equal the fixtures; radios work by keyboard", async () => {
    const { page } = await open("bias");
    const slopes = () => page.locator("#slope-table tbody tr").evaluateAll((trs) => trs.map((tr) => Number(tr.children[1].dataset.value)));
    for (const n of [8, 6]) {
      await page.fill("#bias-heads", String(n));
      await page.press("#bias-heads", "Tab");
      const want = fixture("alibi_slopes").find((c) => c.inputs.n_heads === n).output;
      (await slopes()).forEach((v, i) => close(v, want[i]));
    }
    await page.locator("#bias-map .heatmap-frame").focus();
    await page.keyboard.press("ArrowDown");
    await page.keyboard.press("ArrowDown");
    close(await readout(page, "#bias-map"), -2 * (await slopes())[0]);
    await page.keyboard.press("ArrowRight");
    await page.keyboard.press("ArrowRight");
    await page.keyboard.press("ArrowRight");
    assert.match(await text(page, "#bias-map output"), /−∞/);
    await page.locator("#bias-alibi").focus();
    await page.keyboard.press("ArrowDown");
    assert.ok(await page.isChecked("#bias-t5"));
    assert.ok(await page.locator("#bucket-map").isVisible());
    const t5 = fixture("t5_bucket")[0]; // 32 buckets, max distance 128
    await page.locator("#bucket-map .heatmap-frame").focus();
    for (let i = 0; i < 15; i++) await page.keyboard.press("ArrowDown");
    assert.equal(await readout(page, "#bucket-map"), t5.output[t5.inputs.relative_position.indexOf(-15)]);
    await page.fill("#bias-length", "128");
    await page.press("#bias-length", "Tab");
    await page.locator("#bucket-map .heatmap-frame").focus();
    for (let i = 0; i < 127; i++) await page.keyboard.press("ArrowDown");
    assert.equal(await readout(page, "#bucket-map"), t5.output[t5.inputs.relative_position.indexOf(-127)]);
  });

  test("results: the committed exports of real runs render without errors", async () => {
    const { page, errors } = await open("results");
    await page.waitForSelector("body[data-loaded]");
    assert.equal(await page.locator("#length-missing").count(), 0);
    assert.match(await text(page, "#length-table"), /no rows/); // the learned table ends at the training length
    assert.match(await text(page, "#length-table"), /alibi/);
    assert.ok((await page.locator("#length-chart circle").count()) > 0);
    assert.ok((await page.locator("#neighbours li").count()) > 0);
    await page.screenshot({ path: join(RESULTS, "results.png"), fullPage: true });
    assert.deepEqual(await axe(page), []);
    assert.deepEqual(errors, []);
  });

  test("results: with no exported files the page says how to make them", async () => {
    const routes = { "/data/manifest.json": JSON.stringify({ schema: 1, files: [] }) };
    const { page, errors } = await open("results", { routes });
    await page.waitForSelector("body[data-loaded]");
    assert.match(await text(page, "#length-missing"), /octlm experiment length/);
    assert.match(await text(page, "#embeddings-missing"), /octlm inspect runs\/<name>/);
    assert.equal(await page.locator("#length-table").count(), 0);
    assert.deepEqual(errors, []);
  });

  test("results: the test samples render (chart, table, neighbours, map) and pass axe", async () => {
    const routes = {
      "/data/manifest.json": JSON.stringify({ schema: 1, files: ["embeddings.json", "length.json"] }),
      "/data/length.json": sample("test-sample-length.json"),
      "/data/embeddings.json": sample("test-sample-embeddings.json"),
    };
    const { page, errors } = await open("results", { routes });
    await page.waitForSelector("body[data-loaded]");
    assert.equal(await page.locator("#length-chart circle").count(), 7);
    assert.match(await text(page, "#length-table"), /no rows/);
    assert.match(await text(page, "#neighbours li"), /kitten/);
    await page.selectOption("#token-pick", "2");
    assert.doesNotMatch(await text(page, "#neighbours li"), /kitten/);
    await page.locator("#position-sim .heatmap-frame").focus();
    await page.keyboard.press("ArrowRight");
    close(await readout(page, "#position-sim"), 0.6);
    await page.screenshot({ path: join(RESULTS, "results-with-test-samples.png"), fullPage: true });
    assert.deepEqual(await axe(page), []);
    assert.deepEqual(errors, []);
  });

  test("results: a malformed file is reported, not drawn", async () => {
    const routes = { "/data/manifest.json": JSON.stringify({ schema: 1, files: ["length.json"] }), "/data/length.json": '{"schema": 2}' };
    const { page } = await open("results", { routes });
    await page.waitForSelector("body[data-loaded]");
    assert.match(await text(page, "#length-invalid"), /schema must be 1/);
  });
});
