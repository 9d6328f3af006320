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
// the cells painted by the colour key: scores, not the baselines (reference values) or the bracketed scores
const COLOURED = "table.accuracy td[data-value]:not(.baseline):not([data-unlearned])";
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
    const painted = await page.evaluate((COLOURED) => {
      const stops = [...document.querySelector("#tasks-section .legend").querySelectorAll("stop")].map((st) => st.getAttribute("stop-color").match(/\d+/g).map(Number));
      const far = [];
      for (const td of document.querySelectorAll(COLOURED)) {
        const u = Number(td.dataset.value) * (stops.length - 1);
        const i = Math.min(Math.floor(u), stops.length - 2);
        const want = stops[i].map((c, k) => c + (u - i) * (stops[i + 1][k] - c));
        const got = getComputedStyle(td).backgroundColor.match(/\d+/g).slice(0, 3).map(Number);
        if (Math.max(...got.map((c, k) => Math.abs(c - want[k]))) > 2) far.push(`${td.closest("table").id} ${td.dataset.value}: ${got} vs ${want.map(Math.round)}`);
      }
      return { cells: document.querySelectorAll(COLOURED).length, far };
    }, COLOURED);
    // every result with a number is a coloured cell, exact match in the tables (depth null) and the passkey maps
    // (by depth), per token in the tables; but not the scores past training of a row that did not learn the task
    const meaningful = (r) => !(r.scheme in (DATA.tasks[r.task].not_learned ?? {}) && r.size > DATA.tasks[r.task].train_sizes[1]);
    const exact = DATA.results.filter((r) => r.mean !== null && meaningful(r)).length;
    const tokens = DATA.results.filter((r) => r.depth === null && r.token_mean !== null && meaningful(r)).length;
    assert.equal(painted.cells, exact + tokens, "coloured cells");
    assert.deepEqual(painted.far, [], "cells whose colour is not the key's");
    assert.deepEqual(errors, []);
    await page.close();
  });

  test("every task has an exact and a per-token table of every row, with the baselines tasks.json gives", async () => {
    const { page, errors } = await open("tasks", { width: 1280 });
    await loaded(page);
    for (const [task, spec] of Object.entries(DATA.tasks)) {
      for (const [id, metric] of [[`acc-${task}`, "exact"], [`tok-${task}`, "per_token"]]) {
        const table = page.locator(`#${id}`);
        assert.equal(await table.count(), 1, `${task}: a ${metric} table`);
        if (metric === "per_token") assert.match(await page.locator(`figure[data-metric=per_token]:has(#${id}) figcaption`).innerText(), new RegExp(spec.per_token, "i"), `${task}: named as the file names its per-token metric`);
        const rows = await table.locator("tbody tr[data-row]").evaluateAll((trs) => trs.map((tr) => ({ row: tr.dataset.row, cells: [...tr.querySelectorAll("td")].map((td) => td.dataset.value ?? td.textContent) })));
        assert.deepEqual(rows.map((r) => r.row).sort(), [...DATA.rows].sort(), `${task} ${metric}: one row per battery row`);
        for (const { row, cells } of rows) {
          const want = spec.test_sizes.map((n) => {
            const r = DATA.results.find((x) => x.task === task && x.scheme === row && x.size === n && x.depth === null);
            const v = metric === "exact" ? r.mean : r.token_mean;
            return v === null ? "–" : String(v);
          });
          assert.deepEqual(cells, want, `${task} ${metric} ${row}`);
        }
        // the baselines: labelled, each value the file's, and the number shown is that value in %
        for (const [name, label] of [["chance", "chance"], ["majority", "best constant answer (majority)"]]) {
          const tr = table.locator(`tr[data-baseline=${name}]`);
          assert.equal((await tr.locator("th").innerText()).replace(/\s+/g, " ").trim(), label);
          const shown = await tr.locator("td").evaluateAll((tds) => tds.map((td) => ({ value: Number(td.dataset.value), text: td.textContent })));
          const want = spec.test_sizes.map((n) => spec.baselines.find((b) => b.size === n)[name][metric]);
          assert.deepEqual(shown.map((c) => c.value), want, `${task} ${metric} ${name}`);
          for (const [i, c] of shown.entries()) {
            const pct = 100 * want[i];
            assert.ok(Math.abs(Number(c.text) - pct) <= (pct < 10 ? 0.05 : 0.5), `${task} ${metric} ${name}: shows ${c.text} for ${pct} %`);
          }
        }
      }
    }
    assert.deepEqual(errors, []);
    await page.close();
  });

  test("the rows not_learned names are marked not learned, with reasons, their scores past training bracketed; no other row is", async () => {
    const { page, errors } = await open("tasks", { width: 1280 });
    await loaded(page);
    for (const [task, spec] of Object.entries(DATA.tasks)) {
      const unlearned = Object.keys(spec.not_learned).sort();
      for (const id of [`acc-${task}`, `tok-${task}`]) {
        const rows = await page.locator(`#${id} tbody tr[data-row]`).evaluateAll((trs) =>
          trs.map((tr) => ({
            row: tr.dataset.row,
            mark: tr.querySelector("th .not-learned")?.textContent ?? null,
            reason: tr.querySelector("th .not-learned")?.title ?? null,
            cells: [...tr.querySelectorAll("td")].map((td) => ({ text: td.textContent, bracketed: td.dataset.unlearned === "true", background: getComputedStyle(td).backgroundColor })),
          })),
        );
        assert.deepEqual(rows.filter((r) => r.mark === "not learned").map((r) => r.row).sort(), unlearned, `${id}: marked not learned`);
        assert.deepEqual(rows.filter((r) => r.mark !== null && r.mark !== "not learned"), [], `${id}: no other mark`);
        for (const r of rows) {
          if (unlearned.includes(r.row)) assert.ok(spec.not_learned[r.row].endsWith(r.reason), `${id} ${r.row}: the reason on hover`);
          spec.test_sizes.forEach((n, k) => {
            const c = r.cells[k];
            const past = unlearned.includes(r.row) && n > spec.train_sizes[1];
            if (c.text === "–") return; // no rows
            assert.equal(c.bracketed, past, `${id} ${r.row} at ${n}: bracketed only past training in a row not learned`);
            if (past) assert.ok(/^\(\d+\)$/.test(c.text) && c.background === "rgb(255, 255, 255)", `${id} ${r.row} at ${n}: "${c.text}" on ${c.background}`);
          });
        }
      }
      // each seed's step in the exact table; the reasons listed under the tables; the paragraph names the same rows
      const steps = await page.locator(`#acc-${task} tbody tr[data-row]`).evaluateAll((trs) => Object.fromEntries(trs.map((tr) => [tr.dataset.row, tr.querySelector(".learned-at").textContent])));
      for (const [row, at] of Object.entries(spec.learned_at)) assert.equal(steps[row], `step ${at.map((s) => (s === null ? "–" : s)).join(" / ")}`, `${task} ${row}: learned at`);
      const notes = await page.locator(`section[data-task="${task}"] .not-learned-notes li`).evaluateAll((lis) => lis.map((li) => li.dataset.row));
      assert.deepEqual(notes.sort(), unlearned, `${task}: a note per row not learned`);
      const said = page.locator(`section[data-task="${task}"] .who-learned`);
      assert.deepEqual(((await said.getAttribute("data-not-learned")) || "").split(",").filter(Boolean).sort(), unlearned);
      const text = await said.innerText();
      for (const row of unlearned) assert.ok(text.includes(`${row} (best seed`), `${task}: the paragraph names ${row} as not learned`);
      if (unlearned.length) assert.match(text, /say nothing about its positions/);
    }
    // the passkey maps mark the same rows
    const maps = await page.locator("#passkey-section figure.depth-map").evaluateAll((fs) => fs.filter((f) => f.querySelector(".not-learned")).map((f) => f.dataset.row));
    assert.deepEqual(maps.sort(), Object.keys(DATA.tasks.passkey.not_learned).sort());
    assert.deepEqual(errors, []);
    await page.close();
  });

  test("the claims table: one row per claim in tasks.json, its verdict in words and a symbol, its reasons", async () => {
    const { page, errors } = await open("tasks", { width: 1280 });
    await loaded(page);
    const rows = await page.locator("#claims-table tbody tr").evaluateAll((trs) => trs.map((tr) => ({ key: tr.dataset.claim, verdict: tr.querySelector(".verdict").textContent, text: tr.textContent })));
    assert.deepEqual(rows.map((r) => r.key), DATA.claims.map((c) => c.key));
    const symbols = { agree: "✓", disagree: "✗", inconclusive: "?" };
    for (const [i, c] of DATA.claims.entries()) {
      assert.equal(rows[i].verdict, `${symbols[c.verdict]} ${c.verdict}`, c.key);
      for (const part of [c.paper, c.statement, c.metric, ...c.reason.split("; ")]) assert.ok(rows[i].text.includes(part), `${c.key}: shows ${part}`);
    }
    assert.deepEqual(errors, []);
    await page.close();
  });

  test("Try it: passkey names its models for what they are (the battery's seed-0 cells, which learned) and the battery's rows that learned passkey", async () => {
    const { page, errors } = await open("tasks", { width: 1280 });
    await loaded(page);
    const intro = await page.locator("h2:has-text('Try it: passkey') + p").innerText();
    assert.match(intro, /The pass key is N\. Remember it\. N is the pass key\./);
    assert.match(intro, /battery's\s+seed-0 cells/);
    assert.doesNotMatch(intro, /older|Python source/);
    // the note under the run button: every model's steps and scores, straight from the manifest
    for (const task of ["copy", "passkey"]) {
      const note = await page.locator(`#${task}-models-note`).innerText();
      const models = MANIFEST.tasks[task].models;
      for (const [scheme, m] of Object.entries(models)) {
        if (m.learned_at !== null) assert.ok(note.includes(`${scheme} at step ${m.learned_at.toLocaleString("en")}`), `${task} ${scheme} learned at: ${note}`);
        const scores = MANIFEST.tasks[task].test_sizes.map((n) => (m.accuracy[String(n)] === null ? "–" : String(Math.round(100 * m.accuracy[String(n)])))).join(" / ");
        assert.ok(note.includes(`${scheme} ${scores}`), `${task} ${scheme} scores ${scores}: ${note}`);
      }
    }
    const note = page.locator("#passkey-battery-note");
    const learned = Object.keys(DATA.tasks.passkey.learned_at).filter((r) => !(r in DATA.tasks.passkey.not_learned));
    assert.equal(await note.getAttribute("data-learned"), learned.join(","));
    const text = await note.innerText();
    assert.ok(text.includes(`${learned.length} of ${DATA.tasks.passkey.rows.length} rows learned it`), text);
    assert.equal(await note.locator("a").getAttribute("href"), "#task-passkey");
    assert.equal(await page.locator("#task-passkey").count(), 1);
    assert.deepEqual(errors, []);
    await page.close();
  });

  test("at 390 px: no sideways page scroll, the task tables fit without scrolling, the claims reflow; screenshots", async () => {
    const { page, errors } = await open("tasks", { width: 390 });
    await loaded(page);
    await settle(page);
    const report = await page.evaluate(() => ({
      page: document.documentElement.scrollWidth - window.innerWidth,
      scrolled: [...document.querySelectorAll("#tasks-section .scroll")].filter((b) => b.scrollWidth > b.clientWidth + 1).map((b) => b.querySelector("table").id),
      claims: document.querySelector("#claims-table").getBoundingClientRect().right - document.documentElement.clientWidth,
      small: [...document.querySelectorAll("#tasks-section td, #claims-table td")].filter((e) => parseFloat(getComputedStyle(e).fontSize) < 11).length,
    }));
    assert.ok(report.page <= 0, `the page is ${report.page} px wider than the viewport`);
    assert.deepEqual(report.scrolled, [], "task tables that need a sideways scroll on a phone");
    assert.ok(report.claims <= 1, `the claims table sticks out ${report.claims} px`);
    assert.equal(report.small, 0, "cells in type under 11 px");
    await page.screenshot({ path: join(RESULTS, "tasks-results-390.png"), fullPage: true });
    assert.deepEqual(errors, []);
    await page.close();
  });

  test("every registered scheme is a battery row's or named as not run, with the command that runs it", async () => {
    const { page, errors } = await open("tasks");
    await loaded(page);
    const registry = JSON.parse(readFileSync(join(WEB, "fixtures/schemes.json"), "utf-8")).schemes.map((s) => s.name);
    const ran = new Set(DATA.rows.map((r) => r.split("+")[0]));
    const absent = registry.filter((s) => !ran.has(s));
    const note = page.locator("#tasks-coverage");
    assert.equal(await note.getAttribute("data-missing"), absent.join(","));
    const text = await note.innerText();
    assert.ok(text.includes(`${registry.length - absent.length} of the ${registry.length} registered`), text);
    for (const s of absent) assert.ok(text.includes(s), `${s} is not named: ${text}`);
    if (absent.length) assert.ok(text.includes(`octlm experiment tasks --schemes ${absent.join(" ")}`), text);
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
      const sentence = ` The pass key is ${c.key}. Remember it. ${c.key} is the pass key. `;
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
    const atTraining = [];
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
        // the page's promise: at a size it trained on (8 letters for copy, 32 characters for passkey), the models
        // that learned the task (95 %+ exact match on fresh examples) answer right; tallied over those cases below
        if ((c.items ? c.items.length : c.size) <= MANIFEST.tasks[task].test_sizes[0]) {
          for (const r of got.filter((r) => models[r.scheme].learned_at !== null)) atTraining.push(`${task} case ${i} ${r.scheme}: ${r.right}`);
        }
      }
    }
    // at most one answer in ten wrong (the models stop training at 99 % held out; one slip is 1 of the 30 here)
    const wrongs = atTraining.filter((t) => t.endsWith(": false"));
    assert.ok(atTraining.length >= 10 && wrongs.length <= atTraining.length / 10, `learned models wrong at a trained size: ${wrongs.join("; ")} (of ${atTraining.length})`);
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
