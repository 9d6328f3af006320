// Issue 46 on the Results page (and the Models page's bits-per-byte table): numbers that both pages show come
// with a note naming the other source; every registered scheme is either drawn or named as not exported; the
// length chart's series differ in colour and dash (look-alike colours in both), its labels do not collide, the
// "no rows" words sit at the learned series' own last point, the key's checkboxes show and hide series, a phone
// starts with a few key series and does not scroll sideways; and one number format per table column and axis.
// Harness: ./harness.mjs (WEB_DIST may point it at a build of its own).
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { WEB, open, settle } from "./harness.mjs";
import { collisions } from "./look.mjs";

const LENGTH = JSON.parse(readFileSync(join(WEB, "public/data/length.json"), "utf-8"));
const SHIPPED = JSON.parse(readFileSync(join(WEB, "public/models/manifest.json"), "utf-8"));
const REGISTRY = JSON.parse(readFileSync(join(WEB, "fixtures/schemes.json"), "utf-8")).schemes.map((s) => s.name);
const seriesName = (r) => (r.variant && r.variant !== "plain" ? `${r.scheme} (${r.variant})` : r.scheme);
const NAMES = [...new Set(LENGTH.rows.map(seriesName))];
const num = (t) => Number(t.replace("−", "-"));

/** CIE76 difference of two hex colours (the page's own rule for "look alike" is below 30). */
function deltaE(a, b) {
  const lab = (h) => {
    const [r, g, bl] = [1, 3, 5].map((i) => parseInt(h.slice(i, i + 2), 16) / 255).map((c) => (c <= 0.04045 ? c / 12.92 : ((c + 0.055) / 1.055) ** 2.4));
    const f = (t) => (t > 216 / 24389 ? Math.cbrt(t) : ((24389 / 27) * t + 16) / 116);
    const [x, y, z] = [(0.4124 * r + 0.3576 * g + 0.1805 * bl) / 0.95047, 0.2126 * r + 0.7152 * g + 0.0722 * bl, (0.0193 * r + 0.1192 * g + 0.9505 * bl) / 1.08883];
    return [116 * f(y) - 16, 500 * (f(x) - f(y)), 200 * (f(y) - f(z))];
  };
  const [p, q] = [lab(a), lab(b)];
  return Math.hypot(p[0] - q[0], p[1] - q[1], p[2] - q[2]);
}

async function results(width) {
  const opened = await open("results", { width });
  await opened.page.waitForSelector("body[data-loaded]");
  await settle(opened.page);
  return opened;
}

/** The chart's series as drawn: each polyline's (or a lone point's marker's) colour and dash, and whether it shows. */
const drawn = (page) =>
  page.evaluate(() => {
    const out = new Map();
    for (const m of document.querySelectorAll("#length-chart polyline.series, #length-chart path.glyph")) {
      const name = m.dataset.series;
      if (out.has(name) && out.get(name).line) continue;
      out.set(name, { name, line: m.tagName === "polyline", colour: (m.getAttribute("stroke") === "#fff" ? m.getAttribute("fill") : m.getAttribute("stroke")).toLowerCase(), dash: m.tagName === "polyline" ? (m.getAttribute("stroke-dasharray") ?? "") : "", glyph: document.querySelector(`#length-chart path.glyph[data-series="${CSS.escape(name)}"]`)?.dataset.glyph ?? null, shown: m.checkVisibility() });
    }
    return [...out.values()];
  });

describe("issue 46: the Results page and the Models page", () => {
  test("a number both pages show (bits per byte at the training length) differs only with a note naming the other source", async () => {
    const res = await results(1280);
    const col = (await res.page.locator("#length-table thead th").allInnerTexts()).indexOf(String(LENGTH.train_length));
    const here = Object.fromEntries(await res.page.locator("#length-table tbody tr").evaluateAll((rs, c) => rs.map((r) => [r.cells[0].textContent, r.cells[c].textContent.split(" ± ")[0]]), col));
    const models = await open("models", { width: 1280 });
    await models.page.waitForSelector("body[data-loaded]", { timeout: 60_000 });
    const bc = (await models.page.locator("#lm-models thead th").allInnerTexts()).findIndex((t) => /bits per byte/.test(t));
    const there = Object.fromEntries(await models.page.locator("#lm-models tbody tr").evaluateAll((rs, c) => rs.map((r) => [r.dataset.scheme, r.cells[c].textContent]), bc));
    const both = Object.keys(there).filter((s) => s in here && /^\d/.test(here[s]));
    assert.ok(both.length >= 3, `schemes on both pages: ${both}`);
    const differ = both.filter((s) => Math.abs(num(here[s]) - num(there[s])) > 5e-4);
    assert.ok(differ.length > 0, "the two sources do differ (else no note is needed)");
    const seeds = Math.max(...LENGTH.rows.map((r) => r.n_seeds));
    const windows = LENGTH.command.match(/--eval-windows\s+(\d+)/)[1];
    const steps = Object.values(SHIPPED.models)[0].steps.toLocaleString("en-US");
    // Results: the note under the table links the Models page and says why (separate trainings, both sides' facts)
    const noteHere = res.page.locator("#length-other-source");
    assert.equal(await noteHere.count(), 1, "Results has a note on the Models page's numbers");
    const wordsHere = await noteHere.innerText();
    assert.match(await noteHere.locator("a").getAttribute("href"), /models\.html/);
    assert.match(wordsHere, /separate trainings/);
    for (const fact of [`${steps} steps`, `${seeds} seeds`, `${windows} windows`]) assert.ok(wordsHere.includes(fact), `Results' note says "${fact}": ${wordsHere}`);
    for (const s of differ) {
      const m = wordsHere.match(new RegExp(`\\b${s} ([\\d.]+) there, ([\\d.]+) here`));
      assert.ok(m && Math.abs(Number(m[1]) - num(there[s])) <= 5e-4 && m[2] === here[s], `Results' note gives ${s}'s two numbers (${there[s]} there, ${here[s]} here): ${m?.[0]}`);
    }
    // Models: the note with its table (in the caption) links Results and says the same
    const noteThere = models.page.locator("#lm-models caption #lm-models-note");
    assert.equal(await noteThere.count(), 1, "the Models table's caption has a note on the Results page's numbers");
    const wordsThere = await noteThere.innerText();
    assert.match(await noteThere.locator("a").getAttribute("href"), /results\.html/);
    assert.match(wordsThere, /separate trainings/);
    for (const fact of [`${steps} steps`, `${seeds} seeds`, `${windows} windows`]) assert.ok(wordsThere.includes(fact), `Models' note says "${fact}": ${wordsThere}`);
    for (const s of differ) assert.ok(wordsThere.includes(`${s} ${here[s]}`), `Models' note gives ${s}'s Results number ${here[s]}`);
    assert.deepEqual(res.errors, []);
    assert.deepEqual(models.errors, []);
  });

  test("every registered scheme is a series of the chart or named in the 'not in this export' sentence", async () => {
    const { page, errors } = await results(1280);
    const series = await page.locator(".series-key[data-chart=length-chart] li").evaluateAll((ls) => ls.map((l) => l.dataset.series));
    const coverage = await page.locator("#length-coverage").innerText();
    const absent = coverage.match(/Not in this export: ([^.]*)\./)?.[1].split(/, | and /) ?? [];
    for (const s of REGISTRY) assert.ok(series.some((n) => n === s || n.startsWith(`${s} (`)) || absent.includes(s), `${s} is neither drawn nor named as not exported: ${coverage}`);
    for (const s of absent) assert.ok(REGISTRY.includes(s) && !LENGTH.rows.some((r) => r.scheme === s), `${s} is named as missing but is not`);
    assert.match(coverage, new RegExp(`${REGISTRY.length - absent.length} of the ${REGISTRY.length} registered`));
    assert.match(coverage, /lab log/);
    assert.doesNotMatch(await page.locator("main").innerText(), /Every position scheme is trained/);
    assert.deepEqual(errors, []);
  });

  for (const width of [1280, 390]) {
    test(`${width} px: visible series differ in colour and dash (look-alikes in dash and marker), labels do not collide, no sideways scroll`, async () => {
      const { page, errors } = await results(width);
      const all = await drawn(page);
      assert.deepEqual(all.map((s) => s.name).sort(), [...NAMES].sort());
      const shown = all.filter((s) => s.shown);
      if (width === 1280) assert.equal(shown.length, NAMES.length, "a wide chart shows every series");
      else assert.ok(shown.length >= 3 && shown.length <= 6, `a phone starts with a few key series: ${shown.map((s) => s.name)}`);
      const clashes = [];
      shown.forEach((a, i) =>
        shown.slice(i + 1).forEach((b) => {
          if (a.colour === b.colour && a.dash === b.dash) clashes.push(`${a.name} and ${b.name}: ${a.colour}, dash "${a.dash}"`);
          if (deltaE(a.colour, b.colour) < 30 && a.dash === b.dash) clashes.push(`${a.name} and ${b.name} look alike (${a.colour}, ${b.colour}) and share dash "${a.dash}"`);
          if (deltaE(a.colour, b.colour) < 30 && a.glyph === b.glyph) clashes.push(`${a.name} and ${b.name} look alike and share marker ${a.glyph}`);
        }),
      );
      assert.deepEqual(clashes, []);
      // every label in the chart (the "no rows" words, the training-length marker, ticks) clear of every other
      const texts = await page.locator("#length-chart text").evaluateAll((ts) => ts.filter((t) => t.checkVisibility()).map((t) => ({ text: t.textContent, label: t.classList.contains("no-rows-label") || /^trained at/.test(t.textContent), ...t.getBoundingClientRect().toJSON() })));
      const labels = texts.filter((t) => t.label);
      assert.ok(labels.length >= 2, "the 'no rows' words and the training-length marker");
      labels.forEach((a) => texts.filter((b) => b !== a).forEach((b) => assert.ok(!(a.left < b.right - 0.5 && b.left < a.right - 0.5 && a.top < b.bottom - 0.5 && b.top < a.bottom - 0.5), `"${a.text}" overlaps "${b.text}"`)));
      assert.deepEqual(await collisions(page, "#length-section"), []);
      const over = await page.evaluate(() => document.documentElement.scrollWidth - innerWidth);
      assert.ok(over <= 1, `the page is ${over}px wider than the window`);
      assert.deepEqual(errors, []);
    });

    test(`${width} px: the 'no rows' words and crosses sit on the learned series, at its last point`, async () => {
      const { page } = await results(width);
      const learned = LENGTH.rows.filter((r) => r.scheme === "learned" && r.status === "ok");
      const last = Math.max(...learned.map((r) => r.length));
      const where = await page.evaluate(() => {
        const c = document.querySelector('#length-chart circle.point[data-series="learned"]');
        const label = document.querySelector("#length-chart .no-rows-label");
        const b = label.getBBox();
        return {
          point: [Number(c.getAttribute("cx")), Number(c.getAttribute("cy"))],
          label: { series: label.dataset.series, text: label.textContent, left: b.x, right: b.x + b.width, top: b.y, bottom: b.y + b.height },
          crosses: [...document.querySelectorAll('#length-chart .no-rows-mark[data-series="learned"]')].map((m) => { const r = m.getBBox(); return r.y + r.height / 2; }),
        };
      });
      assert.equal(where.label.series, "learned");
      assert.match(where.label.text, new RegExp(`^learned: no rows past ${last}$`));
      const [x, y] = where.point;
      // its nearest corner within 16 px of the learned point
      const dx = Math.max(where.label.left - x, 0, x - where.label.right);
      const dy = Math.max(where.label.top - y, 0, y - where.label.bottom);
      assert.ok(Math.hypot(dx, dy) <= 16, `the label is ${Math.hypot(dx, dy).toFixed(1)} px from the learned point`);
      assert.ok(where.crosses.length > 0);
      for (const cy of where.crosses) assert.ok(Math.abs(cy - y) < 0.5, `a cross at y ${cy}, the learned point at ${y}`);
    });
  }

  test("390 px: the key's checkboxes show and hide a series; 'show all' shows every one; focus stays on the box", async () => {
    const { page, errors } = await results(390);
    const hidden = (await drawn(page)).filter((s) => !s.shown).map((s) => s.name);
    assert.ok(hidden.length > 0);
    const pick = hidden.find((n) => NAMES.length && LENGTH.rows.filter((r) => seriesName(r) === n && r.status === "ok").length > 1);
    const line = () => page.locator(`#length-chart polyline.series[data-series="${pick}"]`);
    const box = () => page.locator(`.series-key input.key-toggle[data-series="${pick}"]`);
    assert.equal(await line().isVisible(), false);
    assert.equal(await box().isChecked(), false);
    await box().check();
    assert.equal(await line().isVisible(), true, `${pick} shows once ticked`);
    assert.equal(await page.evaluate(() => document.activeElement?.dataset.series), pick, "focus stays on the box just ticked");
    await box().uncheck();
    assert.equal(await line().isVisible(), false, `${pick} hides once unticked`);
    const shownLine = (await drawn(page)).find((s) => s.shown && s.line).name;
    await page.locator(`.series-key input.key-toggle[data-series="${shownLine}"]`).uncheck();
    assert.equal(await page.locator(`#length-chart polyline.series[data-series="${shownLine}"]`).isVisible(), false);
    await page.click("#length-show-all");
    assert.ok((await drawn(page)).every((s) => s.shown), "every series shows after 'show all'");
    assert.match(await page.locator("#length-shown").innerText(), new RegExp(`all ${NAMES.length} series`));
    const over = await page.evaluate(() => document.documentElement.scrollWidth - innerWidth);
    assert.ok(over <= 1, `the page is ${over}px wider than the window with every series shown`);
    await page.click("#length-show-key");
    assert.ok((await drawn(page)).some((s) => !s.shown));
    assert.deepEqual(errors, []);
  });

  test("390 px: the length table reflows (a card per series): no sideways scroll, nothing clipped, each cell names its length", async () => {
    const { page, errors } = await results(390);
    await page.locator("#length-table").scrollIntoViewIfNeeded();
    const found = await page.evaluate(() => {
      const table = document.querySelector("#length-table");
      const wrap = table.parentElement;
      const box = wrap.getBoundingClientRect();
      const cells = [...table.querySelectorAll("th, td")].filter((c) => c.checkVisibility());
      return {
        page: document.documentElement.scrollWidth,
        wrap: [wrap.scrollWidth, wrap.clientWidth],
        outside: cells.filter((c) => { const r = c.getBoundingClientRect(); return r.left < box.left - 0.5 || r.right > box.right + 0.5; }).map((c) => c.textContent),
        cut: cells.filter((c) => c.scrollWidth > c.clientWidth + 1).map((c) => c.textContent),
        labels: [...table.querySelectorAll("tbody td")].map((td) => getComputedStyle(td, "::before").content),
      };
    });
    assert.ok(found.page <= 390, `the page is ${found.page} px wide`);
    assert.ok(found.wrap[0] <= found.wrap[1], `the table's box scrolls: ${found.wrap[0]} px in ${found.wrap[1]} px`);
    assert.deepEqual(found.outside, [], "cells outside the table's box");
    assert.deepEqual(found.cut, [], "cells that cut their text");
    // with no header row in view, every cell says its length
    const lengths = [...LENGTH.eval_lengths].sort((a, b) => a - b);
    found.labels.forEach((l, i) => assert.ok(l.includes(`${lengths[i % lengths.length]} tokens`), `cell ${i}: label ${l}`));
    assert.deepEqual(errors, []);
  });

  test("one number format per table column and axis: the same significant digits, no exponent", async () => {
    const { page } = await results(1280);
    const cells = await page.locator("#length-table tbody td").allInnerTexts();
    const sigDigits = (t) => t.replace(/^[−-]?0\.0*/, "").replace(".", "").length;
    const means = cells.filter((t) => /^\d/.test(t)).map((t) => t.split(" ± ")[0]);
    const stds = cells.filter((t) => t.includes(" ± ")).map((t) => t.split(" ± ")[1]);
    assert.ok(means.length > 10 && stds.length > 10);
    assert.deepEqual([...new Set(means.map(sigDigits))], [4], `means: ${means.join(" ")}`);
    assert.deepEqual([...new Set(stds.map(sigDigits))], [2], `standard deviations: ${stds.join(" ")}`);
    const chartText = await page.locator("#length-chart text, .series-key li").evaluateAll((ts) => ts.map((t) => t.textContent));
    for (const t of [...cells, ...chartText]) assert.doesNotMatch(t, /e[-+]?\d|×\s*10/, `"${t}" uses an exponent`);
    const yticks = await page.locator("#length-chart .ytick").evaluateAll((ts) => ts.map((t) => t.textContent));
    assert.ok(yticks.length >= 3);
    assert.equal(new Set(yticks.map((t) => (t.split(".")[1] ?? "").length)).size, 1, `y ticks: ${yticks.join(" ")}`);
  });
});
