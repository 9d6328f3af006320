// The Models page (models.html): octlm's exported models in onnxruntime-web (WASM) against PyTorch, the browser
// tokenizer against Python's, the downloads (sizes said first, nothing large fetched before the user asks, a
// progress bar that reaches the full size), the first layer's numbers against the graph's own outputs and the
// sinusoidal formula, the token-labelled attention (masked cells unlike a 0), and the page's controls.
// The reference is tests/fixtures/site-models-reference.json, written by scripts/site-models from the same runs.
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { existsSync, readFileSync, readdirSync, statSync } from "node:fs";
import { join, resolve } from "node:path";
import { RESULTS, WEB, axe, fixture, open, sample, settle } from "./harness.mjs";
import { collisions, overflows, unkeyed } from "./look.mjs";

// the build the harness serves (WEB_DIST, else web/dist): its models, manifest and engine are what the page fetches
const DIST = resolve(process.env.WEB_DIST ?? join(WEB, "dist"));
const REF = JSON.parse(sample("site-models-reference.json"));
const MANIFEST = JSON.parse(readFileSync(join(DIST, "models/manifest.json"), "utf-8"));
const SCHEMES = Object.keys(MANIFEST.models);
const INFO = Object.fromEntries(SCHEMES.map((s) => [s, JSON.parse(readFileSync(join(DIST, "models", s, "model.json"), "utf-8"))]));
const FIRST_LAYER = ["token_rows", "embedded", "q_0", "k_0", "q_rot_0", "k_rot_0", "bias_0"];
const outputsOf = (info) => (Array.isArray(info.outputs) ? info.outputs : Object.keys(info.outputs ?? {}));
const hasFirstLayer = (s) => INFO[s].signal !== undefined && FIRST_LAYER.every((n) => outputsOf(INFO[s]).includes(n));
const ENGINE = readdirSync(join(DIST, "assets")).filter((f) => /^ort-wasm-simd-threaded.*\.wasm$/.test(f));
const ENGINE_BYTES = statSync(join(DIST, "assets", ENGINE[0])).size;
const onnxBytes = (s) => statSync(join(DIST, "models", s, "model.onnx")).size;
/** The page's own wording of a size (src/lm.ts megabytes): 3 significant digits. */
const MB = (bytes) => `${bytes / 1e6 >= 100 ? (bytes / 1e6).toFixed(0) : (bytes / 1e6).toPrecision(3)} MB`;
// |logit| difference onnxruntime-web (WASM, float32) vs PyTorch (CPU, float32); the bound. Measured: the
// test prints it per scheme (about 1e-5 or less: float32 rounding in different kernels).
const LOGIT_TOL = 1e-4;
const ROW_SUM_TOL = 1e-5; // the bound on an attention row's sum
// stick-breaking's weights telescope to 1 − Π(1 − β) ≤ 1, and a query takes nothing from its own key, so the first
// row is all 0 (octlm/positions/stick_breaking.py): its rows lie in [0, 1] instead of summing to 1
const UNNORMALISED = new Set(["stick-breaking"]);
const ready = async (page) => page.waitForSelector("body[data-loaded]", { timeout: 60_000 });
/** Choose `scheme`, press its Load button, and wait until it has run on the text. */
async function loadModel(page, scheme) {
  await page.selectOption("#lm-scheme", scheme);
  await page.waitForFunction((s) => document.querySelector("#lm-load").hidden || document.querySelector("#lm-load").textContent.includes(s), scheme);
  if (await page.locator("#lm-load").isVisible()) await page.click("#lm-load");
  await page.waitForFunction((s) => document.body.dataset.ran === s || document.querySelector("#lm-status").textContent.startsWith(`The ${s} model ran`), scheme, { timeout: 120_000 });
}

describe("models page", () => {
  test("every registered scheme ships, with its tokenizer and sizes, and the manifest states each model.onnx's true size", () => {
    assert.equal(ENGINE.length, 1, `one engine file in the build: ${ENGINE}`);
    // octlm's registry as `octlm export fixtures` writes it (web/fixtures/schemes.json): a scheme added to octlm
    // and not exported by scripts/site-models fails here
    const registry = JSON.parse(readFileSync(join(WEB, "fixtures", "schemes.json"), "utf-8")).schemes.map((r) => r.name);
    assert.deepEqual([...SCHEMES].sort(), [...registry].sort(), "the shipped models are the registered schemes");
    for (const s of SCHEMES) {
      const m = MANIFEST.models[s];
      assert.equal(m.context_length, 64, `${s} trained at the length experiment's 64 tokens`);
      assert.ok(m.val_bpb > 0 && m.val_bpb < 8, `${s}: validation bits per byte ${m.val_bpb}`);
      assert.equal(m.files["model.onnx"], onnxBytes(s), `${s}: the manifest's size is the file's`);
      assert.ok(existsSync(join(DIST, "models", s, "tokenizer.json")), `${s}: tokenizer.json`);
    }
  });

  test("the page says every size before it downloads anything large, and fetches no .onnx or .wasm until asked", async () => {
    const { page, errors, offsite } = await open("models");
    const large = [];
    page.on("request", (r) => /\.(onnx|wasm)(\?|$)/.test(r.url()) && large.push(r.url()));
    await ready(page);
    await page.waitForTimeout(500); // anything the page would fetch by itself has had time to start
    // every resource since navigation (the listener above was attached after it): none is an engine or a model
    const fetched = await page.evaluate(() => performance.getEntriesByType("resource").map((e) => e.name));
    assert.ok(fetched.some((u) => u.endsWith("/models/manifest.json")), "the resource list is read");
    assert.deepEqual(fetched.filter((u) => /\.(onnx|wasm)(\?|$)/.test(u)), [], "large downloads before the user asked");
    assert.deepEqual(large, [], "large downloads before the user asked");
    const sizes = await page.locator("#lm-sizes").innerText();
    assert.ok(sizes.includes(`is ${MB(ENGINE_BYTES)}`), `the engine's ${MB(ENGINE_BYTES)} stated: ${sizes}`);
    const col = (await page.locator("#lm-models thead th").allInnerTexts()).indexOf("download");
    const rows = await page.locator("#lm-models tbody tr").evaluateAll((rs, c) => rs.map((r) => [r.dataset.scheme, Number(r.dataset.bytes), r.cells[c].textContent]), col);
    assert.deepEqual(rows.map((r) => r[0]).sort(), [...SCHEMES].sort());
    for (const [s, bytes, words] of rows) {
      assert.equal(bytes, onnxBytes(s), s);
      assert.equal(words, MB(bytes), s);
    }
    // on a phone the sizes are in view, not behind a sideways scroll
    const size = page.viewportSize();
    await page.setViewportSize({ width: 390, height: 844 });
    await settle(page);
    const right = await page.locator("#lm-models tbody tr").evaluateAll((rs, c) => Math.max(...rs.map((r) => r.cells[c].getBoundingClientRect().right)), col);
    assert.ok(right <= 390, `the download column ends at ${right}px on a 390px phone`);
    await page.setViewportSize(size);
    const button = await page.locator("#lm-load").innerText();
    const chosen = await page.inputValue("#lm-scheme");
    assert.ok(button.includes(MB(onnxBytes(chosen))) && button.includes(MB(ENGINE_BYTES)), `the button says what it fetches: ${button}`);
    assert.deepEqual(large, [], "still nothing large");
    // asked: the engine and one model, each once, and the bar reaches each file's full size
    await loadModel(page, chosen);
    assert.equal(large.length, 2, `the engine and one model: ${large}`);
    assert.ok(large.some((u) => u.endsWith(`/assets/${ENGINE[0]}`)) && large.some((u) => u.endsWith(`/models/${chosen}/model.onnx`)), String(large));
    const downloads = await page.evaluate(() => document.body.dataset.downloads);
    assert.equal(downloads, `engine=${ENGINE_BYTES} ${chosen}=${onnxBytes(chosen)}`);
    const bar = await page.locator("#lm-progress").evaluate((p) => [p.value, p.max]);
    assert.deepEqual(bar, [onnxBytes(chosen), onnxBytes(chosen)], "the bar ends full");
    const mb = (onnxBytes(chosen) / 1e6).toFixed(1);
    assert.equal(await page.locator("#lm-progress-text").innerText(), `${mb} of ${mb} MB`);
    // cached for the session: choosing another model and coming back fetches nothing again
    const other = SCHEMES.find((s) => s !== chosen);
    await page.selectOption("#lm-scheme", other);
    await page.selectOption("#lm-scheme", chosen);
    await page.waitForFunction((s) => document.querySelector("#lm-status").textContent.startsWith(`The ${s} model ran`), chosen);
    assert.equal(large.length, 2, "a loaded model is not fetched again");
    assert.deepEqual(errors, []);
    assert.deepEqual(offsite, []);
    await page.close();
  });

  test("every model in the manifest is selectable, its constructor shown with its sizes", async () => {
    const { page, errors } = await open("models");
    await ready(page);
    const options = await page.locator("#lm-scheme option").evaluateAll((os) => os.map((o) => o.value));
    assert.deepEqual([...options].sort(), [...SCHEMES].sort());
    for (const s of SCHEMES) {
      await page.selectOption("#lm-scheme", s);
      await page.waitForFunction((s) => document.querySelector("#lm-constructor").textContent.includes(`the ${s} model`), s);
      const code = await page.locator("#lm-constructor").innerText();
      const info = INFO[s];
      assert.ok(code.includes(`vocab_size, C = ${info.vocab_size}, ${info.d_model}`), `${s}: ${code}`);
      assert.ok(code.includes(`context_length = ${info.train_length}`));
      assert.ok(code.includes("pos = nn.Embedding(context_length, C)") && code.includes("pos(torch.arange(context_length))") && code.includes("x = tok(ids) + pos(torch.arange(T))"));
      assert.match(await page.locator("#lm-load").innerText(), new RegExp(`Load the ${s} model \\(`));
    }
    assert.deepEqual(errors, []);
    await page.close();
  });

  test("onnxruntime-web's logits equal PyTorch's within 1e-4 for every scheme", async () => {
    const { page, errors, offsite } = await open("models");
    await ready(page);
    assert.deepEqual(Object.keys(REF.schemes).sort(), [...SCHEMES].sort(), "a PyTorch reference for every shipped model");
    for (const s of SCHEMES) {
      for (const c of REF.schemes[s]) {
        assert.deepEqual(c.ids, c.repeat ? Array.from({ length: c.repeat }, () => REF.ids).flat() : REF.ids.slice(0, c.ids.length));
        const diff = await page.evaluate(
          async ({ s, c }) => {
            const { logits } = await window.octlmModels.forward(s, c.ids);
            const V = logits.length / c.ids.length;
            let max = 0;
            c.top_ids.forEach((row, t) => row.forEach((id, j) => (max = Math.max(max, Math.abs(logits[t * V + id] - c.top_logits[t][j])))));
            for (const [t, row] of Object.entries(c.full)) row.forEach((v, i) => (max = Math.max(max, Math.abs(logits[Number(t) * V + i] - v))));
            return max;
          },
          { s, c },
        );
        console.log(`# ${s}, ${c.ids.length} tokens: max |logit difference| browser vs PyTorch ${diff.toExponential(2)}`);
        assert.ok(diff <= LOGIT_TOL, `${s} (${c.ids.length} tokens): ${diff}`);
      }
    }
    assert.deepEqual(errors, []);
    assert.deepEqual(offsite, []);
    await page.close();
  });

  test("the browser tokenizer gives EOT then Python's ids (Unicode, tabs, CRLF, a literal <|endoftext|>), and the page shows them", async () => {
    const { page, errors } = await open("models");
    await ready(page);
    // octlm generate puts EOT before every prompt (octlm.generation.generate.encode_prompt); so does the page
    const EOT_ID = INFO[SCHEMES[0]].eot_id;
    for (const [text, want] of [[REF.text, REF.ids], ...REF.extra_texts.map((e) => [e.text, e.ids])]) {
      assert.deepEqual(await page.evaluate(async (t) => (await window.octlmModels.encode(t)).ids, text), [EOT_ID, ...want], JSON.stringify(text));
    }
    assert.match(REF.text, /\r\n/);
    assert.match(REF.text, /\t/);
    assert.match(REF.text, /[^\x00-\x7f]/);
    // a text box holds line ends as LF (HTML normalises CRLF in a textarea's value), so the page shows the ids of
    // the text with LF line ends: Python's for that text are in the fixture too
    const lf = REF.extra_texts.find((e) => e.text === REF.text.replace(/\r\n/g, "\n"));
    assert.ok(lf, "the fixture holds the LF form of the test text");
    await page.fill("#lm-text", REF.text);
    await page.waitForFunction((n) => document.querySelectorAll("#lm-tokens .token").length === n, lf.ids.length + 1);
    const shown = await page.locator("#lm-tokens .token").evaluateAll((ts) => ts.map((t) => Number(t.dataset.id)));
    assert.deepEqual(shown, [EOT_ID, ...lf.ids]);
    assert.match(await page.locator("#lm-tokens").innerText(), /→/); // the tab, made visible
    assert.deepEqual(errors, []);
    await page.close();
  });

  test("attention rows are causal (exactly 0 above the diagonal) and sum to 1 within 1e-5 (stick-breaking: at most 1), every scheme, layer and head", async () => {
    const { page } = await open("models");
    await ready(page);
    for (const s of SCHEMES) {
      // the reference's texts, or (a model without one yet) the test text, as much as the model takes
      for (const c of REF.schemes[s] ?? [{ ids: REF.ids.slice(0, MANIFEST.models[s].max_length) }]) {
        const { above, sum, low, high, layers } = await page.evaluate(
          async ({ s, ids }) => {
            const { attention } = await window.octlmModels.forward(s, ids);
            const T = ids.length;
            let above = 0;
            let sum = 0;
            let [low, high] = [Infinity, -Infinity];
            for (const a of attention) {
              const H = a.length / (T * T);
              for (let h = 0; h < H; h++)
                for (let i = 0; i < T; i++) {
                  let row = 0;
                  for (let j = 0; j < T; j++) {
                    const v = a[(h * T + i) * T + j];
                    row += v;
                    if (j > i) above = Math.max(above, Math.abs(v));
                  }
                  sum = Math.max(sum, Math.abs(row - 1));
                  [low, high] = [Math.min(low, row), Math.max(high, row)];
                }
            }
            return { above, sum, low, high, layers: attention.length };
          },
          { s, ids: c.ids },
        );
        assert.equal(layers, INFO[s].n_layers);
        assert.equal(above, 0, `${s}: attention above the diagonal`);
        if (UNNORMALISED.has(s)) assert.ok(low >= -ROW_SUM_TOL && high <= 1 + ROW_SUM_TOL, `${s}: row sums from ${low} to ${high}, not within [0, 1]`);
        else assert.ok(sum <= ROW_SUM_TOL, `${s}: a row sums to 1 ± ${sum}`);
      }
    }
    await page.close();
  });
});

/** The numbers of a table the page drew (td data-value), row by row, and its row positions. */
const tableValues = (page, id) =>
  page.locator(`#${id}`).evaluate((t) => ({
    positions: [...t.querySelectorAll("tbody th")].map((th) => Number(th.textContent.split(" ")[0])),
    channels: [...t.querySelectorAll("thead th")].slice(1).map((th) => Number(th.textContent)),
    values: [...t.querySelectorAll("tbody tr")].map((tr) => [...tr.querySelectorAll("td")].map((td) => Number(td.dataset.value))),
  }));

/** A flow map's window as drawn: its query and key positions, and each cell's value (null: masked). */
const mapShown = (page, id) =>
  page.locator(`#${id} table.attn-map`).evaluate((t) => ({
    qs: [...t.querySelectorAll("tbody th")].map((th) => Number(th.dataset.position)),
    ks: [...t.querySelectorAll("thead th.key")].map((th) => Number(th.dataset.position)),
    cells: [...t.querySelectorAll("tbody tr")].map((tr) => [...tr.querySelectorAll("td")].map((td) => (td.classList.contains("masked") ? null : Number(td.dataset.value)))),
  }));

/** output[name][0, (head,) t, c] from the page's own engine, for the positions and channels a table shows. */
const outputAt = (page, s, name, positions, channels, head = 0) =>
  page.evaluate(
    async ({ s, name, positions, channels, head, max }) => {
      const text = (await window.octlmModels.encode(document.querySelector("#lm-text").value)).ids;
      const ids = text.slice(0, max); // what the page runs: the text's first max_length tokens
      const { first } = await window.octlmModels.forward(s, ids);
      const { data, dims } = first[name];
      const [T, C] = [dims[dims.length - 2], dims[dims.length - 1]];
      const h = dims.length === 4 ? Math.min(head, dims[1] - 1) : 0; // keys may have fewer heads than queries
      return positions.map((t) => channels.map((c) => data[(h * T + t) * C + c]));
    },
    { s, name, positions, channels, head, max: MANIFEST.models[s].max_length },
  );

/** sin(t / base^(2i/C)) in channel 2i, cos in 2i + 1: octlm's sinusoidal_table, as its fixture's note states it. */
const sinusoid = (t, c, C, base) => {
  const angle = t / Math.pow(base, (2 * Math.floor(c / 2)) / C);
  return c % 2 ? Math.cos(angle) : Math.sin(angle);
};

describe("models page: the first layer and attention", () => {
  test("the formula this test uses is octlm's sinusoidal table (web/fixtures/sinusoidal_table.json)", () => {
    for (const { inputs, output } of fixture("sinusoidal_table"))
      output.forEach((row, t) => row.forEach((v, c) => assert.ok(Math.abs(sinusoid(t, c, inputs.width, inputs.base) - v) <= 1e-6, `t ${t} c ${c}`)));
  });

  for (const s of SCHEMES) {
    test(`${s}: the first layer's numbers on the page are the graph's outputs (or the page asks for a re-export)`, async () => {
      const { page, errors } = await open("models");
      await ready(page);
      await loadModel(page, s);
      if (!hasFirstLayer(s)) {
        console.log(`# ${s}: this export has no first-layer outputs; the page says so`);
        assert.match(await page.locator("#lm-layer-intro").innerText(), /exported before .* run scripts\/site-models again/);
        assert.equal(await page.locator("#lm-token-rows").count(), 0);
        assert.deepEqual(errors, []);
        return page.close();
      }
      // move the windows off their start, so that the rows and channels shown are not simply the first ones
      await page.fill("#lm-layer-from", "5");
      await page.fill("#lm-layer-channel", "16");
      await page.press("#lm-layer-channel", "Tab");
      const rows = await tableValues(page, "lm-token-rows");
      assert.deepEqual(rows.positions, [5, 6, 7, 8, 9, 10, 11, 12]);
      assert.deepEqual(rows.channels, [16, 17, 18, 19, 20, 21, 22, 23]);
      assert.deepEqual(rows.values, await outputAt(page, s, "token_rows", rows.positions, rows.channels));
      const sum = await tableValues(page, "lm-embedded");
      assert.deepEqual(sum.values, await outputAt(page, s, "embedded", sum.positions, sum.channels));
      const signal = INFO[s].signal;
      // the equation reads token rows (+ rows added) = x: every "=" is followed by x, and whatever a scheme puts
      // inside attention (a bias, a rotation, its own weights) comes after x, never between a "+" and its "="
      const order = await page.locator("#lm-layer .layer > *").evaluateAll((els) => els.map((e) => (e.classList.contains("op-line") ? e.textContent : e.querySelector("table, .attn-map")?.id || e.id || e.className)));
      const equals = order.indexOf("=");
      assert.ok(equals > 0 && order[equals + 1] === "lm-embedded", `${s}: ${JSON.stringify(order)}`);
      assert.equal(order.filter((x) => x === "=").length, 1, `${s}: ${JSON.stringify(order)}`);
      // attention is a probability: one [0, 1] scale for every scheme (stick-breaking's rows need not sum to 1)
      for (const map of ["#lm-attn-map", "#lm-attend-map"]) if (await page.locator(map).count()) assert.equal(await page.locator(map).getAttribute("data-scale"), "sequential 0 1", `${s} ${map}`);
      // the flow's stages inside attention (the bias map, the scheme's own weights, the rotation) are named by id
      const inside = { bias: "flow-bias", attend: "flow-attend", rotate: "lm-q_0" }[signal];
      if (inside) assert.ok(order.includes(inside), `${s}: ${inside} drawn: ${JSON.stringify(order)}`);
      for (const stage of ["lm-bias-map", "lm-attend-map", "lm-q_0", "flow-bias", "flow-attend", "flow-rotation"]) if (order.some((x) => String(x).startsWith(stage))) assert.ok(order.findIndex((x) => String(x).startsWith(stage)) > equals + 1, `${s}: ${stage} before x`);
      if (signal === "embed") {
        const added = await tableValues(page, "lm-signal");
        added.values.forEach((r, i) => r.forEach((v, j) => assert.equal(v, sum.values[i][j] - rows.values[i][j])));
        if (s === "sinusoidal") {
          // the rows added are a multiple of the formula (sinusoidal_scale, fitted here), cell for cell
          const want = added.positions.map((t) => added.channels.map((c) => sinusoid(t, c, INFO[s].d_model, 10000)));
          const dot = (a, b) => a.flat().reduce((acc, v, k) => acc + v * b.flat()[k], 0);
          const scale = dot(added.values, want) / dot(want, want);
          console.log(`# sinusoidal: embedded − token_rows = ${scale.toPrecision(6)} × the formula`);
          assert.ok(scale > 0);
          added.values.forEach((r, i) => r.forEach((v, j) => assert.ok(Math.abs(v - scale * want[i][j]) <= 1e-7, `t ${added.positions[i]} c ${added.channels[j]}: ${v} vs ${scale * want[i][j]}`)));
        }
      } else if (signal === "rotate") {
        await page.selectOption("#lm-layer-head", "1");
        for (const name of ["q_0", "q_rot_0", "k_0", "k_rot_0"]) {
          const shown = await tableValues(page, `lm-${name}`);
          assert.deepEqual(shown.values, await outputAt(page, s, name, shown.positions, shown.channels, 1), name);
        }
      } else if (signal === "bias") {
        await page.selectOption("#lm-layer-head", "2");
        // the flow's map shows the tables' window of tokens (from position 5 here), queries by keys, cell for cell
        const shown = await mapShown(page, "lm-bias-map");
        assert.deepEqual(shown.qs, [5, 6, 7, 8, 9, 10, 11, 12]);
        const want = await outputAt(page, s, "bias_0", shown.qs, shown.ks, 2);
        const zero = (v) => (v === 0 ? 0 : v); // a cell's data-value writes −0 as "0"
        assert.deepEqual(shown.cells, want.map((r, i) => r.map((v, j) => (shown.ks[j] > shown.qs[i] ? null : zero(v)))));
      } else {
        const words = await page.locator("#lm-layer .op-line").first().innerText();
        assert.match(words, /^\+ nothing: x = tok\(ids\) \(largest \|embedded − token_rows\| = 0\b/);
        if (signal === "attend") {
          // the scheme's own attention, shown where its position signal would be: layer 0, head 0
          const shown = await mapShown(page, "lm-attend-map");
          const want = await page.evaluate(
            async ({ s, qs, ks, max }) => {
              const ids = (await window.octlmModels.encode(document.querySelector("#lm-text").value)).ids.slice(0, max);
              const a = (await window.octlmModels.forward(s, ids)).attention[0];
              return qs.map((q) => ks.map((k) => (k > q ? null : a[q * ids.length + k])));
            },
            { s, qs: shown.qs, ks: shown.ks, max: MANIFEST.models[s].max_length },
          );
          assert.deepEqual(shown.cells, want);
        }
      }
      assert.deepEqual(errors, []);
      await page.close();
    });
  }

  test("attention: token labels on both axes, masked cells hatched (not the colour of 0), lines for a short text, a movable window for a long one", async () => {
    const { page, errors } = await open("models", { width: 1280 });
    await ready(page);
    const s = await page.inputValue("#lm-scheme");
    await loadModel(page, s);
    const labels = await page.locator("#lm-tokens .token-text").allInnerTexts();
    assert.ok(labels.length > 24, `the default text is long: ${labels.length} tokens`);
    // the window's axes are the tokens themselves
    const keys = await page.locator("#lm-attn-map thead th.key").evaluateAll((ths) => ths.map((th) => [Number(th.dataset.position), th.textContent]));
    assert.equal(keys.length, 24);
    for (const [k, text] of keys) assert.ok(labels[k].startsWith(text.replace(/^\d+ /, "").replace(/…$/, "")), `key ${k}: ${text} vs ${labels[k]}`);
    // masked cells: a hatch, and a key entry with the same hatch; a real cell is a flat colour
    const look = await page.evaluate(() => {
      const style = (el) => ({ image: getComputedStyle(el).backgroundImage, colour: getComputedStyle(el).backgroundColor });
      return { masked: style(document.querySelector("#lm-attn-map td.masked")), real: style(document.querySelector("#lm-attn-map td:not(.masked)")), key: style(document.querySelector("#lm-attn-map .swatch.masked")), words: document.querySelector("#lm-attn-map .attn-key").textContent };
    });
    assert.match(look.masked.image, /repeating-linear-gradient/);
    assert.equal(look.real.image, "none");
    assert.equal(look.key.image, look.masked.image);
    assert.match(look.words, /masked/);
    // the overview: a masked cell is grey, a 0 would be the scale's first colour (yellow)
    const corner = await page.locator("#lm-attn-map canvas.attn-overview").evaluate((c) => [...c.getContext("2d").getImageData(c.width - 1, 0, 1, 1).data].slice(0, 3));
    assert.deepEqual(corner, [107, 107, 107]);
    // the window moves: queries from 40
    await page.fill("#lm-attn-map-q", "40");
    const first = await page.locator("#lm-attn-map tbody th").first().getAttribute("data-position");
    assert.equal(first, "40");
    // a cell's value is the graph's attention (layer 1, head 2 after choosing them)
    await page.selectOption("#lm-attn-layer", "1");
    await page.selectOption("#lm-attn-head", "2");
    await settle(page);
    assert.match(await page.locator("#lm-attn-map caption").innerText(), /layer 1, head 2/);
    const cell = await page.locator("#lm-attn-map tbody tr").first().locator("td:not(.masked)").first().getAttribute("data-value");
    const want = await page.evaluate(async (s) => {
      const ids = (await window.octlmModels.encode(document.querySelector("#lm-text").value)).ids;
      const { attention } = await window.octlmModels.forward(s, ids);
      return attention[1][(2 * ids.length + 40) * ids.length + 0];
    }, s);
    assert.equal(Number(cell), want);
    // a short text: lines between the tokens, as heavy as the probability
    await page.fill("#lm-text", "x = 1\nprint(x)\n");
    await page.waitForSelector("#lm-attn-map svg.attn-lines");
    const arcs = await page.locator("#lm-attn-map line.arc").evaluateAll((ls) => ls.map((l) => [Number(l.dataset.query), Number(l.dataset.key), Number(l.dataset.value)]));
    assert.ok(arcs.length > 0);
    assert.ok(arcs.every(([q, k]) => k <= q), "no line to a future token");
    assert.ok((await page.locator("#lm-attn-map .query-label").count()) >= 5);
    assert.deepEqual(errors, []);
    await page.close();
  });

  test("one number format in every table: no exponent (1.987e+4), and each column's numbers to one count of significant digits", async () => {
    const { page, errors } = await open("models", { width: 1280 });
    await ready(page);
    await loadModel(page, await page.inputValue("#lm-scheme"));
    await page.waitForSelector("#lm-next tbody tr[data-prob]");
    // every table of the page, filled: the models, the next tokens, bits per token, and the flow's tables
    const columns = await page.evaluate(() => {
      const out = {};
      for (const table of document.querySelectorAll("main table")) {
        if (!table.checkVisibility()) continue;
        const name = table.id || table.closest("[id]")?.id || "a table";
        for (const tr of table.tBodies[0]?.rows ?? [])
          [...tr.cells].forEach((cell, j) => {
            const key = `${name} column ${j}`;
            (out[key] ??= []).push(cell.innerText.trim());
          });
      }
      return out;
    });
    const tables = Object.keys(columns).map((k) => k.split(" column ")[0]);
    for (const id of ["lm-models", "lm-next", "lm-bits", "lm-token-rows", "lm-embedded", "flow-next"]) assert.ok(tables.includes(id), `${id} is read: ${[...new Set(tables)]}`);
    const NUMBER = /^[−-]?\d+(\.\d+)?( × 10[⁻⁰¹²³⁴⁵⁶⁷⁸⁹]+)?$/;
    // significant digits as sig() writes them: leading zeros are not, trailing ones are (6.990 has 4)
    const digits = (t) => t.replace(/^[−-]/, "").split(" × ")[0].replace(".", "").replace(/^0+/, "").length;
    for (const [column, texts] of Object.entries(columns)) {
      for (const t of texts) assert.doesNotMatch(t, /\de[+-]?\d/, `${column}: "${t}" has an exponent`);
      // measured numbers only: a rank or a token id is a count, written whole
      const numbers = texts.filter((t) => NUMBER.test(t) && /[.×]/.test(t));
      assert.ok(new Set(numbers.map(digits)).size <= 1, `${column} mixes formats: ${numbers.join(" ")}`);
    }
    // the flow's next-token probabilities, inside their cells beside the token: the same
    const probs = await page.locator("#flow-next td").evaluateAll((tds) => tds.flatMap((td) => td.innerText.match(/\S+$/) ?? []));
    const shown = probs.filter((t) => NUMBER.test(t));
    assert.ok(shown.length >= 8, `${probs}`);
    assert.equal(new Set(shown.map(digits)).size, 1, `the flow's probabilities: ${shown.join(" ")}`);
    assert.deepEqual(errors, []);
    await page.close();
  });

  test("temperature, top-k, sampling, the all-model chart, and the page at 1280 and 390 px", async () => {
    const { page, errors, offsite, failed } = await open("models", { width: 1280 });
    await ready(page);
    // before any model runs, the views say what to do instead of drawing empty frames
    assert.match(await page.locator("#lm-next tbody").innerText(), /Nothing yet: load the \S+ model above/);
    assert.ok(await page.locator("#lm-chart-empty").isVisible());
    assert.ok(!(await page.locator("#lm-bits-chart").isVisible()), "no empty chart frame");
    assert.match(await page.locator("#lm-bits tbody").innerText(), /Nothing yet/);
    const firstScheme = await page.inputValue("#lm-scheme");
    await loadModel(page, firstScheme);
    assert.ok(!(await page.locator("#lm-chart-empty").isVisible()) && (await page.locator("#lm-bits-chart").isVisible()));
    // a second model loaded joins the chart beside the first, with a key
    const second = SCHEMES.find((x) => x !== firstScheme);
    await loadModel(page, second);
    const two = await page.locator("#lm-bits-chart polyline.series").evaluateAll((ps) => ps.map((p) => p.dataset.series));
    assert.deepEqual([...two].sort(), [firstScheme, second].sort());
    assert.equal(await page.locator("#lm-chart .series-key li").count(), 2);
    await page.selectOption("#lm-scheme", firstScheme);
    await page.waitForFunction(() => document.querySelectorAll("#lm-next tbody tr[data-prob]").length === 10);
    const probs = () => page.locator("#lm-next tbody tr").evaluateAll((rs) => rs.map((r) => Number(r.dataset.prob)));
    const first = await probs();
    assert.equal(first.length, 10);
    assert.ok(first.every((p, i) => p > 0 && (i === 0 || p <= first[i - 1])), "most probable first");
    await page.fill("#lm-topk", "3");
    await page.waitForFunction(() => document.querySelectorAll("#lm-next tbody tr").length === 3);
    const three = await probs();
    assert.ok(Math.abs(three.reduce((a, b) => a + b, 0) - 1) < 1e-9, `top-3 renormalised: ${three}`);
    assert.ok(three[0] > first[0], "dropping the tail raises the top probability");
    await page.fill("#lm-temperature", "0");
    await page.waitForFunction(() => document.querySelectorAll("#lm-next tbody tr").length === 1);
    assert.deepEqual(await probs(), [1]);
    const before = await page.inputValue("#lm-text");
    await page.click("#lm-generate");
    await page.waitForFunction((n) => document.querySelector("#lm-text").value.length > n, before.length);
    assert.ok((await page.inputValue("#lm-text")).startsWith(before));
    assert.match(await page.locator("#lm-generated").innerText(), /8 sampled tokens/);
    // every shipped model on one chart with a key, the training length marked; the learned table has no rows past 64
    await page.click("#lm-compare");
    await page.waitForSelector("body[data-compared]", { timeout: 300_000 });
    const series = await page.locator("#lm-bits-chart polyline.series").evaluateAll((ps) => ps.map((p) => p.dataset.series));
    assert.deepEqual([...series].sort(), [...SCHEMES].sort());
    assert.deepEqual((await page.locator("#lm-chart .series-key li").evaluateAll((ls) => ls.map((l) => l.dataset.series))).sort(), [...SCHEMES].sort());
    assert.equal(await page.locator("#lm-bits-chart line.marker").count(), 1);
    if (SCHEMES.includes("learned")) assert.match(await page.locator('#lm-bits tr[data-scheme="learned"]').innerText(), /no rows/);
    const past = await page.locator('#lm-bits tr[data-scheme="alibi"]').getAttribute("data-past");
    assert.ok(Number.isFinite(Number(past)) && Number(past) > 0, `alibi past 64: ${past}`);
    assert.equal((await page.locator("#lm-models .model-status").allInnerTexts()).filter((t) => t === "loaded").length, SCHEMES.length);
    // as drawn, with every view filled: no text on text, nothing out of its box, a key on every multi-series chart
    for (const width of [1280, 390]) {
      await page.setViewportSize({ width, height: 844 });
      await settle(page);
      const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
      assert.ok(overflow <= 1, `${overflow}px wider than the ${width}px window`);
      await page.screenshot({ path: join(RESULTS, `models-${width}.png`), fullPage: true });
      const found = { collisions: await collisions(page), overflows: await overflows(page), unkeyed: await unkeyed(page) };
      assert.deepEqual(found, { collisions: [], overflows: [], unkeyed: [] }, `models, loaded, at ${width} px`);
      assert.deepEqual(await axe(page), [], `axe at ${width} px`);
    }
    assert.deepEqual(errors, []);
    assert.deepEqual(failed, []);
    assert.deepEqual(offsite, []);
    await page.close();
  });
});
