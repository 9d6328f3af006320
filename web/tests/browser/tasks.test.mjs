// The Task battery page (tasks.html): the battery's results as the committed tasks.json has them, with a colour
// key; the live copy and passkey examples built as octlm's Python generators build them; every shipped task model's
// greedy answer in onnxruntime-web equal to PyTorch's (tests/fixtures/site-task-models-reference.json, written by
// scripts/site-task-models from the same models); sizes said before anything large is fetched; nothing wider than
// the viewport at 1280 and 390 px, with screenshots of both.
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { RESULTS, WEB, axe, open, sample, settle } from "./harness.mjs";

const DATA = JSON.parse(readFileSync(join(WEB, "public/data/tasks.json"), "utf-8"));
const MANIFEST = JSON.parse(readFileSync(join(WEB, "public/task-models/manifest.json"), "utf-8"));
const REF = JSON.parse(sample("site-task-models-reference.json"));
const loaded = (page) => page.waitForSelector("body[data-loaded]", { timeout: 60_000 });

/** Set the passkey controls to a reference case, as a user would type them. */
async function setPasskey(page, c) {
  await page.fill("#passkey-size", String(c.size));
  await page.fill("#passkey-depth", String(c.depth));
  await page.fill("#passkey-start", String(c.start));
  await page.fill("#passkey-key", c.key);
  await settle(page);
}

const tokensOf = async (page, sel) => (await page.locator(sel).getAttribute("data-tokens")).split(",").map(Number);

/** Every scheme's row of the answers table after the run on `tokens` finished. */
async function answers(page, task, tokens) {
  await page.waitForFunction(({ task, want }) => document.querySelector(`#${task}-live`).dataset.ran === want, { task, want: tokens.join(",") }, { timeout: 120_000 });
  return page.locator(`#${task}-answers tbody tr`).evaluateAll((trs) => trs.map((tr) => ({ scheme: tr.dataset.scheme, answer: tr.dataset.answer, right: tr.dataset.right })));
}

describe("task battery page", () => {
  test("the results: every task's table and every passkey map hold tasks.json's numbers, with a colour key and the command", async () => {
    const { page, errors } = await open("tasks", { width: 1280 });
    await loaded(page);
    assert.equal(await page.locator("#tasks-section code.command").first().innerText(), DATA.command);
    const key = page.locator("#tasks-section .accuracy-key .legend");
    assert.equal(await key.count(), 1, "the tables have a colour key");
    assert.deepEqual([await key.getAttribute("data-min"), await key.getAttribute("data-max")], ["0", "1"]);
    for (const [task, spec] of Object.entries(DATA.tasks)) {
      const rows = await page.locator(`#acc-${task} tbody tr[data-row]`).evaluateAll((trs) =>
        trs.map((tr) => ({ row: tr.dataset.row, cells: [...tr.querySelectorAll("td")].map((td) => td.dataset.value ?? td.textContent) })),
      );
      assert.deepEqual(rows.map((r) => r.row).sort(), [...DATA.rows].sort(), `${task}: one row per battery row`);
      for (const { row, cells } of rows) {
        const want = spec.test_sizes.map((n) => {
          const r = DATA.results.find((x) => x.task === task && x.scheme === row && x.size === n && x.depth === null);
          return r.mean === null ? "–" : String(r.mean);
        });
        assert.deepEqual(cells, want, `${task} ${row}`);
      }
    }
    const maps = await page.locator("#passkey-section figure.depth-map").evaluateAll((fs) => fs.map((f) => ({ row: f.dataset.row, cells: [...f.querySelectorAll("td")].map((td) => td.dataset.value ?? td.textContent) })));
    assert.deepEqual(maps.map((m) => m.row).sort(), [...DATA.rows].sort());
    for (const { row, cells } of maps) {
      const want = DATA.depths.flatMap((d) => DATA.tasks.passkey.test_sizes.map((n) => {
        const r = DATA.results.find((x) => x.task === "passkey" && x.scheme === row && x.size === n && x.depth === d);
        return r.mean === null ? "–" : String(r.mean);
      }));
      assert.deepEqual(cells, want, `passkey map ${row}`);
    }
    assert.equal(await page.locator("#passkey-section .legend").count(), 1, "the maps have a colour key");
    // every coloured cell is painted the colour its key gives its value (the key's stops are every 5 %)
    const painted = await page.evaluate(() => {
      const stops = [...document.querySelector("#tasks-section .legend").querySelectorAll("stop")].map((st) => st.getAttribute("stop-color").match(/\d+/g).map(Number));
      const far = [];
      for (const td of document.querySelectorAll("table.accuracy td[data-value]")) {
        const u = Number(td.dataset.value) * (stops.length - 1);
        const i = Math.min(Math.floor(u), stops.length - 2);
        const want = stops[i].map((c, k) => c + (u - i) * (stops[i + 1][k] - c));
        const got = getComputedStyle(td).backgroundColor.match(/\d+/g).slice(0, 3).map(Number);
        if (Math.max(...got.map((c, k) => Math.abs(c - want[k]))) > 2) far.push(`${td.closest("table").id} ${td.dataset.value}: ${got} vs ${want.map(Math.round)}`);
      }
      return { cells: document.querySelectorAll("table.accuracy td[data-value]").length, far };
    });
    // every result with a number is a coloured cell: tables (depth null) and passkey maps (by depth)
    assert.equal(painted.cells, DATA.results.filter((r) => r.mean !== null).length, "coloured cells");
    assert.deepEqual(painted.far, [], "cells whose colour is not the key's");
    assert.deepEqual(errors, []);
    await page.close();
  });

  test("a malformed tasks.json is listed problem by problem, and the page names the command", async () => {
    const { page } = await open("tasks", { routes: { "data/tasks.json": JSON.stringify({ ...DATA, schema: 2, rows: "rope" }) } });
    await loaded(page);
    const problems = await page.locator("#tasks-invalid li").allInnerTexts();
    assert.ok(problems.includes("schema must be 1, got 2") && problems.includes("rows must be a list of strings"), problems.join(" | "));
    await page.close();
  });

  test("the passkey example moves with depth, length, start and key as Passkey.example_at draws it", async () => {
    const { page, errors } = await open("tasks");
    await loaded(page);
    for (const c of REF.tasks.passkey.cases) {
      await setPasskey(page, c);
      assert.deepEqual(await tokensOf(page, "#passkey-tokens"), c.tokens, `size ${c.size}, depth ${c.depth}`);
    }
    // the depth alone: the key sentence moves, the filler and the key stay (the first case, at every step of 0.25)
    const c = REF.tasks.passkey.cases[0];
    await setPasskey(page, c);
    const starts = [];
    for (const depth of [0, 0.25, 0.5, 0.75, 1]) {
      await page.fill("#passkey-depth", String(depth));
      const tokens = await tokensOf(page, "#passkey-tokens");
      const sentence = ` The pass key is ${c.key}. `;
      starts.push(tokens.findIndex((_, i) => tokens.slice(i, i + sentence.length).map((x) => String.fromCharCode(x - 4 + 32)).join("") === sentence));
    }
    assert.deepEqual(starts, [0, 0.25, 0.5, 0.75, 1].map((d) => 1 + Math.floor(d * c.size + 0.5)), "the sentence after round(depth × size) filler characters");
    for (const c of REF.tasks.copy.cases) {
      await page.fill("#copy-items", c.items);
      assert.deepEqual(await tokensOf(page, "#copy-tokens"), c.tokens, `copy ${c.items}`);
    }
    assert.deepEqual(errors, []);
    await page.close();
  });

  test("every task model's greedy answer in the browser is PyTorch's, sizes said before any download", async () => {
    const { page, errors, failed } = await open("tasks");
    const fetched = [];
    page.on("request", (r) => fetched.push(new URL(r.url()).pathname));
    await loaded(page);
    for (const task of ["copy", "passkey"]) {
      const models = MANIFEST.tasks[task].models;
      assert.deepEqual(Object.keys(REF.tasks[task].answers).sort(), Object.keys(models).sort(), `${task}: a reference for every model`);
      const button = page.locator(`#${task}-run`);
      if (task === "copy") {
        const bytes = Number(await button.getAttribute("data-bytes"));
        const models_ = Object.values(models).reduce((n, m) => n + m.files["model.onnx"], 0);
        assert.ok(bytes > models_, "the first run also downloads the engine, and says so");
        assert.match(await button.innerText(), /download \d+(\.\d+)? MB first/);
        assert.deepEqual(fetched.filter((p) => p.endsWith(".onnx") || p.endsWith(".wasm")), [], "nothing large before the click");
      }
      if (task === "passkey") {
        // copy's run fetched the engine: passkey's button now counts its own models only
        const models_ = Object.values(models).reduce((n, m) => n + m.files["model.onnx"], 0);
        assert.equal(Number(await button.getAttribute("data-bytes")), models_, "the engine is not counted twice");
      }
      for (const [i, c] of REF.tasks[task].cases.entries()) {
        if (task === "copy") {
          await page.fill("#copy-items", c.items);
          assert.equal(await page.inputValue("#copy-size"), String(c.items.length), "Letters to draw follows the letters typed");
        }
        else await setPasskey(page, c);
        if (!(await page.locator(`#${task}-live`).getAttribute("data-ran"))) await button.click();
        const got = await answers(page, task, c.tokens);
        const want = c.tokens.filter((_, k) => c.answer[k]);
        for (const row of got) {
          const pytorch = REF.tasks[task].answers[row.scheme][i];
          if (row.right === "none") {
            const needs = c.tokens.indexOf(2) + want.length; // prompt through <sep>, then all but the last answer token
            assert.ok(needs > models[row.scheme].context_length, `${task} ${row.scheme}: said it cannot run, yet its graph takes ${needs}`);
            continue;
          }
          assert.deepEqual(row.answer.split(",").map(Number), pytorch, `${task} case ${i} ${row.scheme}: browser vs PyTorch`);
          assert.equal(row.right, String(JSON.stringify(pytorch) === JSON.stringify(want)), `${task} case ${i} ${row.scheme}: verdict`);
        }
        console.log(`# ${task} case ${i}: ${got.filter((r) => r.right === "true").length} of ${got.length} right, every answer equal to PyTorch's`);
      }
    }
    assert.deepEqual(errors, []);
    assert.deepEqual(failed, []);
    await page.close();
  });

  test("nothing is wider than the viewport at 1280 and 390 px; screenshots with answers shown", async () => {
    const { page, errors } = await open("tasks", { width: 1280 });
    await loaded(page);
    await page.fill("#copy-items", REF.tasks.copy.cases[0].items);
    await page.click("#copy-run");
    await answers(page, "copy", REF.tasks.copy.cases[0].tokens);
    await setPasskey(page, REF.tasks.passkey.cases[0]);
    await page.click("#passkey-run");
    await answers(page, "passkey", REF.tasks.passkey.cases[0].tokens);
    for (const width of [1280, 390]) {
      await page.setViewportSize({ width, height: 900 });
      await settle(page);
      await page.waitForTimeout(100);
      const report = await page.evaluate(() => {
        const vw = document.documentElement.clientWidth;
        const scrolls = [...document.querySelectorAll(".scroll")];
        const out = [...document.querySelectorAll("main *")].filter((e) => {
          if (scrolls.some((s) => s !== e && s.contains(e))) return false; // inside a box that scrolls sideways, with its cue
          const r = e.getBoundingClientRect();
          return r.width > 0 && (r.right > vw + 1 || r.left < -1);
        });
        return { page: document.documentElement.scrollWidth - window.innerWidth, out: out.slice(0, 5).map((e) => `${e.tagName}#${e.id}.${e.className}`) };
      });
      assert.ok(report.page <= 1, `${width} px: the page is ${report.page} px wider than the viewport`);
      assert.deepEqual(report.out, [], `${width} px: elements past the viewport`);
      assert.deepEqual(await axe(page), [], `axe at ${width} px`);
      await page.screenshot({ path: join(RESULTS, `tasks-${width}.png`), fullPage: true });
    }
    assert.deepEqual(errors, []);
    await page.close();
  });
});
