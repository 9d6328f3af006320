// The Models page (models.html): octlm's exported models in onnxruntime-web (WASM) against PyTorch, the browser
// tokenizer against Python's, the attention the graph returns, and the page's controls. The reference is
// tests/fixtures/site-models-reference.json, written by scripts/site-models from the same runs as the models.
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { RESULTS, WEB, axe, open, sample, settle } from "./harness.mjs";

const REF = JSON.parse(sample("site-models-reference.json"));
const MANIFEST = JSON.parse(readFileSync(join(WEB, "public/models/manifest.json"), "utf-8"));
const SCHEMES = ["learned", "sinusoidal", "rope", "alibi", "t5", "nope"];
// |logit| difference onnxruntime-web (WASM, float32) vs PyTorch (CPU, float32); the bound. Measured: the
// test prints it per scheme (about 1e-5 or less: float32 rounding in different kernels).
const LOGIT_TOL = 1e-4;
const ROW_SUM_TOL = 1e-5; // the bound on an attention row's sum
const loaded = async (page) => page.waitForSelector("body[data-loaded]", { timeout: 60_000 });
const idsOf = (c) => c.ids; // the text's ids (a learned table: its first 64), or the text 4 times over

describe("models page", () => {
  test("every scheme ships, with its training and download size stated", () => {
    assert.deepEqual(Object.keys(MANIFEST.models).sort(), [...SCHEMES].sort());
    assert.deepEqual(Object.keys(REF.schemes).sort(), [...SCHEMES].sort());
    for (const s of SCHEMES) {
      const m = MANIFEST.models[s];
      assert.equal(m.context_length, 64, `${s} trained at the length experiment's 64 tokens`);
      assert.ok(m.val_bpb > 0 && m.val_bpb < 8, `${s}: validation bits per byte ${m.val_bpb}`);
      assert.ok(m.files["model.onnx"] <= 2.6e6, `${s}: model.onnx is ${m.files["model.onnx"]} bytes`);
    }
  });

  test("onnxruntime-web's logits equal PyTorch's within 1e-4 for every scheme", async () => {
    const { page, errors, offsite } = await open("models");
    await loaded(page);
    for (const s of SCHEMES) {
      for (const c of REF.schemes[s]) {
        const ids = idsOf(c);
        assert.deepEqual(ids, c.repeat ? Array.from({ length: c.repeat }, () => REF.ids).flat() : REF.ids.slice(0, ids.length));
        const diff = await page.evaluate(
          async ({ s, ids, c }) => {
            const { logits } = await window.octlmModels.forward(s, ids);
            const V = logits.length / ids.length;
            let max = 0;
            c.top_ids.forEach((row, t) => row.forEach((id, j) => (max = Math.max(max, Math.abs(logits[t * V + id] - c.top_logits[t][j])))));
            for (const [t, row] of Object.entries(c.full)) row.forEach((v, i) => (max = Math.max(max, Math.abs(logits[Number(t) * V + i] - v))));
            return max;
          },
          { s, ids, c },
        );
        console.log(`# ${s}, ${ids.length} tokens: max |logit difference| browser vs PyTorch ${diff.toExponential(2)}`);
        assert.ok(diff <= LOGIT_TOL, `${s} (${ids.length} tokens): ${diff}`);
      }
    }
    assert.deepEqual(errors, []);
    assert.deepEqual(offsite, []);
    await page.close();
  });

  test("the browser tokenizer gives EOT then Python's ids (Unicode, tabs, CRLF, a literal <|endoftext|>), and the page shows them", async () => {
    const { page, errors } = await open("models");
    await loaded(page);
    // octlm generate puts EOT before every prompt (octlm.generation.generate.encode_prompt); so does the page
    const EOT_ID = JSON.parse(readFileSync(join(WEB, "public/models/learned/model.json"), "utf-8")).eot_id;
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

  test("attention rows are causal (exactly 0 above the diagonal) and sum to 1 within 1e-5, every scheme, layer and head", async () => {
    const { page } = await open("models");
    await loaded(page);
    for (const s of SCHEMES) {
      for (const c of REF.schemes[s]) {
        const ids = idsOf(c);
        const { above, sum, layers } = await page.evaluate(
          async ({ s, ids }) => {
            const { attention } = await window.octlmModels.forward(s, ids);
            const T = ids.length;
            let above = 0;
            let sum = 0;
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
                }
            }
            return { above, sum, layers: attention.length };
          },
          { s, ids },
        );
        assert.equal(layers, 2);
        assert.equal(above, 0, `${s}: attention above the diagonal`);
        assert.ok(sum <= ROW_SUM_TOL, `${s}: a row sums to 1 ± ${sum}`);
      }
    }
    await page.close();
  });

  test("temperature, top-k, sampling, the six-scheme chart and the attention map work, and the page stays clean", async () => {
    const { page, errors, offsite, failed } = await open("models");
    await loaded(page);
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
    // sampling: greedy (temperature 0) is deterministic, and the text grows
    const before = await page.inputValue("#lm-text");
    await page.click("#lm-generate");
    await page.waitForFunction((n) => document.querySelector("#lm-text").value.length > n, before.length);
    assert.ok((await page.inputValue("#lm-text")).startsWith(before));
    assert.match(await page.locator("#lm-generated").innerText(), /8 sampled tokens/);
    // every scheme on one chart, the training length marked; the learned table has no rows past 64
    await page.click("#lm-compare");
    await page.waitForSelector("body[data-compared]", { timeout: 60_000 });
    const series = await page.locator("#lm-bits-chart polyline.series").evaluateAll((ps) => ps.map((p) => p.dataset.series));
    assert.deepEqual(series, SCHEMES);
    assert.equal(await page.locator("#lm-bits-chart line.marker").count(), 1);
    assert.match(await page.locator('#lm-bits tr[data-scheme="learned"]').innerText(), /no rows/);
    const past = await page.locator('#lm-bits tr[data-scheme="alibi"]').getAttribute("data-past");
    assert.ok(Number.isFinite(Number(past)) && Number(past) > 0, `alibi past 64: ${past}`);
    assert.equal((await page.locator("#lm-models .model-status").allInnerTexts()).filter((t) => t === "loaded").length, 6);
    // attention: another layer and head draw another map
    const cell = () => page.locator("#lm-attn output.readout").getAttribute("data-value");
    await page.locator("#lm-attn .heatmap-frame").focus();
    await page.keyboard.press("ArrowDown");
    await page.keyboard.press("ArrowDown");
    const a = await cell();
    await page.selectOption("#lm-layer", "1");
    await page.selectOption("#lm-head", "2");
    await settle(page);
    assert.notEqual(await cell(), a);
    assert.match(await page.locator("#lm-attn figcaption").innerText(), /layer 1, head 2/);
    await page.screenshot({ path: join(RESULTS, "models-compared.png"), fullPage: true });
    assert.deepEqual(await axe(page), [], "axe after comparing");
    await page.setViewportSize({ width: 375, height: 800 });
    await settle(page);
    const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
    assert.ok(overflow <= 1, `${overflow}px wider than a 375px phone`);
    assert.deepEqual(await axe(page), [], "axe at 375 px after comparing");
    assert.deepEqual(errors, []);
    assert.deepEqual(failed, []);
    assert.deepEqual(offsite, []);
    await page.close();
  });
});
