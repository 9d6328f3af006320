// Charts and colour, checked by looking at what the pages draw (at 1280 and 390 px): every line chart with several
// series has a key that names each series in its colour and dash, sits under the plot and fits a phone; series
// that coincide both show; the hover readout gives each series' value; every cosine-similarity map on the site is
// painted on one colour scale with one domain, read off the canvas pixels; every coloured map and table has a key
// whose colours are the cells' colours. Harness: ./harness.mjs.
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { PAGES, WEB, open, settle } from "./harness.mjs";

const WIDTHS = [1280, 390];
const length = JSON.parse(readFileSync(join(WEB, "public/data/length.json"), "utf-8"));
const seriesName = (r) => (r.variant && r.variant !== "plain" ? `${r.scheme} (${r.variant})` : r.scheme);

/**
 * Every line chart on the page (an svg.chart whose marks carry data-series) with its series, each with the
 * colour and dash it is drawn in, and the key found under the chart with each entry's sample and box.
 */
const charts = (page) =>
  page.evaluate(() =>
    [...document.querySelectorAll("svg.chart")].map((chart) => {
      const series = new Map();
      for (const m of chart.querySelectorAll("[data-series]")) {
        const line = m.tagName === "polyline";
        const had = series.get(m.dataset.series);
        if (had?.line) continue; // a line's stroke says more than its dots
        series.set(m.dataset.series, { line, colour: line ? m.getAttribute("stroke") : (m.getAttribute("fill") ?? m.getAttribute("stroke")), dash: line ? m.getAttribute("stroke-dasharray") : null });
      }
      const box = (n) => {
        const r = n.getBoundingClientRect();
        return { left: r.left, right: r.right, top: r.top, bottom: r.bottom };
      };
      const key = chart.closest(".plot, .chart-box")?.querySelector(".series-key");
      return {
        id: chart.id,
        plot: box(chart),
        series: [...series].map(([name, s]) => ({ name, ...s })),
        key: key && {
          box: box(key),
          overflow: key.scrollWidth - key.clientWidth,
          entries: [...key.querySelectorAll("li")].map((li) => {
            const sample = li.querySelector("line, path, rect, .swatch");
            return { name: li.dataset.series, text: li.textContent.trim(), colour: sample?.getAttribute("stroke") ?? null, dash: sample?.getAttribute("stroke-dasharray") ?? null, box: box(li) };
          }),
        },
      };
    }),
  );

const overlaps = (a, b) => a.left < b.right - 0.5 && b.left < a.right - 0.5 && a.top < b.bottom - 0.5 && b.top < a.bottom - 0.5;

async function checkKeys(page, where) {
  const width = await page.evaluate(() => innerWidth);
  const found = (await charts(page)).filter((c) => c.series.length >= 2);
  for (const c of found) {
    const at = `${where}: ${c.id}`;
    assert.ok(c.key, `${at} has ${c.series.length} series (${c.series.map((s) => s.name).join(", ")}) and no key`);
    assert.deepEqual(c.key.entries.map((e) => e.name).sort(), c.series.map((s) => s.name).sort(), `${at}: one key entry per series`);
    assert.equal(new Set(c.series.map((s) => s.colour.toLowerCase())).size, c.series.length, `${at}: every series has a colour of its own`);
    for (const s of c.series) {
      const e = c.key.entries.find((x) => x.name === s.name);
      assert.ok(e.text.startsWith(s.name), `${at}: the entry for ${s.name} says ${e.text}`);
      assert.equal(e.colour?.toLowerCase(), s.colour.toLowerCase(), `${at}: ${s.name}'s sample is drawn in its colour`);
      if (s.line) assert.equal(e.dash, s.dash, `${at}: ${s.name}'s sample has its dash`);
    }
    // under or beside the plot, never on it; inside the window; entries side by side, not on each other
    assert.ok(!overlaps(c.key.box, c.plot), `${at}: the key overlaps the plot`);
    for (const e of c.key.entries) {
      assert.ok(!overlaps(e.box, c.plot), `${at}: ${e.name} lies on the plot`);
      assert.ok(e.box.left >= -0.5 && e.box.right <= width + 0.5, `${at}: ${e.name} at ${e.box.left.toFixed(1)}–${e.box.right.toFixed(1)} leaves the ${width}px window`);
    }
    c.key.entries.forEach((a, i) => c.key.entries.slice(i + 1).forEach((b) => assert.ok(!overlaps(a.box, b.box), `${at}: ${a.name} and ${b.name} overlap`)));
    assert.ok(c.key.overflow <= 1, `${at}: the key is ${c.key.overflow}px wider than its box`);
  }
  const page_ = await page.evaluate(() => document.documentElement.scrollWidth - innerWidth);
  assert.ok(page_ <= 1, `${where}: the page is ${page_}px wider than the window`);
  return found.length;
}

const SAMPLES = {
  "/data/manifest.json": JSON.stringify({ schema: 1, files: ["embeddings.json", "length.json"] }),
  "/data/length.json": readFileSync(join(WEB, "tests/fixtures/test-sample-length.json"), "utf-8"),
  "/data/embeddings.json": readFileSync(join(WEB, "tests/fixtures/test-sample-embeddings.json"), "utf-8"),
};

/**
 * How much of each series the eye can see: the chart's SVG is drawn into a canvas `scale` times its size, once
 * whole and once with only that series, and along the middle of each segment of its polyline the pixels of its
 * colour (within 45 of it, RGB distance) are counted in both. The ratio is the part of the line (dashes and width
 * included) that no other series covers.
 */
const visibility = (page, id, scale) =>
  page.evaluate(
    async ([id, scale]) => {
      const chart = document.getElementById(id);
      const w = chart.viewBox.baseVal.width;
      const h = chart.viewBox.baseVal.height;
      const canvas = document.createElement("canvas");
      canvas.width = w * scale;
      canvas.height = h * scale;
      const ctx = canvas.getContext("2d", { willReadFrequently: true });
      const paint = async (svg) => {
        const url = URL.createObjectURL(new Blob([new XMLSerializer().serializeToString(svg)], { type: "image/svg+xml" }));
        const img = new Image();
        img.src = url;
        await img.decode();
        ctx.fillStyle = getComputedStyle(document.documentElement).backgroundColor;
        ctx.fillRect(0, 0, canvas.width, canvas.height);
        ctx.drawImage(img, 0, 0, canvas.width, canvas.height);
        URL.revokeObjectURL(url);
        return ctx.getImageData(0, 0, canvas.width, canvas.height).data;
      };
      const rgb = (hex) => [1, 3, 5].map((i) => parseInt(hex.slice(i, i + 2), 16));
      const count = (px, want, pts) =>
        pts.slice(1).map(([x1, y1], i) => {
          const [x0, y0] = pts[i];
          let hits = 0;
          for (let t = 0.3; t <= 0.7; t += 0.01) {
            const cx = Math.round((x0 + t * (x1 - x0)) * scale);
            const cy = (y0 + t * (y1 - y0)) * scale;
            for (let y = Math.round(cy - 6 * scale); y <= Math.round(cy + 6 * scale); y++) {
              const k = (y * canvas.width + cx) * 4;
              if (Math.hypot(px[k] - want[0], px[k + 1] - want[1], px[k + 2] - want[2]) < 45) hits++;
            }
          }
          return hits;
        });
      const whole = await paint(chart);
      const out = [];
      for (const line of chart.querySelectorAll("polyline.series")) {
        const want = rgb(line.getAttribute("stroke"));
        const pts = line.getAttribute("points").split(" ").map((p) => p.split(",").map(Number));
        const alone = chart.cloneNode(true);
        for (const other of alone.querySelectorAll("[data-series], .hover-dots")) if (other.dataset.series !== line.dataset.series || other.tagName !== "polyline") other.remove();
        const own = count(await paint(alone), want, pts);
        out.push({ name: line.dataset.series, perSegment: count(whole, want, pts).map((n, i) => n / Math.max(own[i], 1)) });
      }
      return out;
    },
    [id, scale],
  );

describe("line charts: a key for several series, coinciding series visible, a hover readout", () => {
  for (const width of WIDTHS) {
    test(`${width} px: every chart with 2+ series has a key under it, one entry per series in its colour and dash, inside the window`, async () => {
      let checked = 0;
      for (const [name, routes] of [["rope", {}], ["results", {}], ["results", SAMPLES], ["sinusoidal", {}]]) {
        const { page, errors } = await open(name, { width, routes });
        if (name === "results") await page.waitForSelector("body[data-loaded]");
        await settle(page);
        checked += await checkKeys(page, `${name}${routes === SAMPLES ? " (test samples)" : ""} at ${width}px`);
        assert.deepEqual(errors, []);
        await page.close();
      }
      assert.equal(checked, 3, "the RoPE plot, the Results chart and the Results chart on the samples have several series");
    });
  }

  test("results: rope and p-rope lie on each other, yet both show; the key says so; every series can be seen", async () => {
    const { page } = await open("results", { width: 1280 });
    await page.waitForSelector("body[data-loaded]");
    const names = [...new Set(length.rows.map(seriesName))];
    assert.ok(names.includes("rope") && names.includes("p-rope"));
    const seen = await visibility(page, "length-chart", 3);
    const lines = names.filter((n) => length.rows.filter((r) => seriesName(r) === n && r.status === "ok").length > 1);
    assert.deepEqual(seen.map((s) => s.name).sort(), lines.sort());
    for (const s of seen) {
      // on at least half its segments, at least half of what it shows when drawn alone is still to be seen
      const shown = s.perSegment.filter((v) => v >= 0.5).length;
      assert.ok(shown >= s.perSegment.length / 2, `${s.name}: visible on ${shown} of ${s.perSegment.length} segments (${s.perSegment.map((v) => v.toFixed(2)).join(", ")} of its pixels)`);
    }
    // the key names the pair; no other series is said to be the same as another (only this pair is within 1 %
    // of the axis at every length)
    const same = await page.evaluate(() => [...document.querySelectorAll(".series-key li")].filter((li) => /same as/.test(li.textContent)).map((li) => li.textContent.trim()));
    assert.equal(same.length, 1, `entries that say "same as": ${same}`);
    assert.match(same[0], /^p-rope \(same as rope\b/);
  });

  for (const width of WIDTHS) {
    test(`${width} px: moving over a chart reads out the nearest x and every shown series' value there`, async () => {
      const { page } = await open("results", { width });
      await page.waitForSelector("body[data-loaded]");
      await settle(page);
      const chart = page.locator("#length-chart");
      await chart.scrollIntoViewIfNeeded();
      // the pointer a little right of the 256 tick: the nearest length is 256
      const tick = await page.locator("#length-chart .xtick", { hasText: /^256$/ }).boundingBox();
      const box = await chart.boundingBox();
      await page.mouse.move(tick.x + tick.width / 2 + 6, box.y + box.height / 3);
      const read = () => page.evaluate(() => {
        const out = [...document.querySelectorAll("p, output, div")].find((n) => n.dataset.chart === "length-chart" && n.classList.contains("plot-readout"));
        return out ? { x: out.dataset.x ?? null, text: out.innerText } : null;
      });
      const out = await read();
      assert.ok(out, "a readout under the chart");
      assert.equal(out.x, "256");
      const said = out.text.replace(/^[^:]*:\s*/, "").split(" · ");
      // every series the chart shows (all of them at 1280 px; the key series a phone starts with at 390 px), in order
      const shown = await page.locator('.series-key[data-chart="length-chart"] li[data-shown="true"]').evaluateAll((ls) => ls.map((l) => l.dataset.series));
      const names = [...new Set(length.rows.map(seriesName))].filter((n) => shown.includes(n));
      if (width === 1280) assert.equal(names.length, new Set(length.rows.map(seriesName)).size, "every series shows at 1280 px");
      assert.ok(names.length >= 3, `shown: ${shown}`);
      assert.equal(said.length, names.length, out.text);
      for (const [i, name] of names.entries()) {
        const row = length.rows.find((r) => seriesName(r) === name && r.length === 256);
        assert.ok(said[i].startsWith(`${name} `), `${said[i]} is ${name}'s`);
        const value = said[i].slice(name.length + 1);
        if (row.bpb_mean === null) assert.equal(value, "no value");
        else assert.ok(Math.abs(Number(value) - row.bpb_mean) <= 5e-4 * Math.max(1, row.bpb_mean), `${name}: ${value} against ${row.bpb_mean}`);
      }
      assert.match(out.text, /^evaluation length = 256:/);
      // off the chart: gone
      await page.mouse.move(1, 1);
      assert.equal((await read()).text, "");
    });
  }
});

/**
 * The similarity maps of a page (a heatmap whose caption speaks of similarity, or that says it shows cosines),
 * each with its stated scale, its key's colour stops, and some cells: the value the readout gives for a cell and
 * the colour its canvas pixel has. Cells are read along row 0 and down the diagonal.
 */
const similarityMaps = (page) =>
  page.evaluate(() =>
    [...document.querySelectorAll("figure.heatmap")]
      .filter((f) => /similarit/i.test(f.querySelector("figcaption").textContent) || f.dataset.quantity)
      .map((f) => {
        const frame = f.querySelector(".heatmap-frame");
        const canvas = f.querySelector("canvas");
        const img = canvas.getContext("2d").getImageData(0, 0, canvas.width, canvas.height).data;
        const out = f.querySelector("output.readout");
        const press = (key) => frame.dispatchEvent(new KeyboardEvent("keydown", { key, bubbles: true }));
        const cells = [];
        const read = () => {
          const [r, c] = [Number(out.dataset.row), Number(out.dataset.col)];
          const k = (r * canvas.width + c) * 4;
          cells.push({ r, c, value: Number(out.dataset.value), rgb: [img[k], img[k + 1], img[k + 2]] });
        };
        for (let i = 0; i < canvas.height; i++) press("ArrowUp");
        press("Home");
        read();
        for (let c = 1; c < canvas.width; c++) {
          press("ArrowRight");
          read();
        }
        press("Home");
        for (let r = 1; r < canvas.height; r++) {
          press("ArrowDown");
          press("ArrowRight");
          read();
        }
        const legend = f.querySelector(".legend");
        return {
          id: f.id,
          caption: f.querySelector("figcaption").textContent,
          quantity: f.dataset.quantity ?? null,
          scale: f.dataset.scale ?? null,
          domain: f.dataset.domain ?? null,
          key: legend && { kind: legend.dataset.kind, min: Number(legend.dataset.min), max: Number(legend.dataset.max), stops: [...legend.querySelectorAll("stop")].map((s) => s.getAttribute("stop-color").match(/\d+/g).map(Number)) },
          cells,
        };
      }),
  );

/** The colour a key gives to value v: its stops are evenly spaced from its min to its max; linear between them. */
function keyColour(key, v) {
  const u = Math.min(1, Math.max(0, (v - key.min) / (key.max - key.min))) * (key.stops.length - 1);
  const i = Math.min(Math.floor(u), key.stops.length - 2);
  return key.stops[i].map((c, k) => c + (u - i) * (key.stops[i + 1][k] - c));
}
const far = (a, b) => Math.max(...a.map((c, k) => Math.abs(c - b[k])));
// the key's stops include the scale's own (every 5 %), so only rounding differs
const TOL = 2;

describe("colour: one scale for every similarity map, and a key for every coloured map and table", () => {
  test("every cosine-similarity map on the site is drawn on the same diverging scale over [−1, 1], pixel for pixel", async () => {
    const maps = [];
    for (const name of PAGES) {
      const { page } = await open(name, { width: 1280 });
      if (["results", "measured"].includes(name)) await page.waitForSelector("body[data-loaded]");
      for (const m of await similarityMaps(page)) maps.push({ page: name, ...m });
      await page.close();
    }
    assert.deepEqual(maps.map((m) => `${m.page} #${m.id}`).sort(), ["results #position-sim", "sinusoidal #sin-sim"], "the similarity maps found");
    const first = maps[0];
    // the pixels first: every cell read, on every map, is painted the colour the first map's key gives its value
    for (const m of maps) {
      const at = `${m.page} #${m.id}`;
      assert.ok(m.key, `${at} has a colour key`);
      assert.ok(m.cells.length > 100, `${at}: ${m.cells.length} cells read`);
      for (const c of m.cells) assert.ok(far(c.rgb, keyColour(first.key, c.value)) <= TOL, `${at} [${c.r}, ${c.c}] = ${c.value}: pixel ${c.rgb}, but ${first.page}'s key gives ${keyColour(first.key, c.value).map(Math.round)}`);
    }
    // then what they say: one key, over [−1, 1], and the scale stated on the map
    for (const m of maps) {
      const at = `${m.page} #${m.id}`;
      assert.deepEqual(m.key.stops, first.key.stops, `${at}: the key's colours are ${first.page}'s`);
      assert.deepEqual([m.key.kind, m.key.min, m.key.max], ["diverging", -1, 1], `${at}: the key's domain`);
      assert.deepEqual([m.scale, m.domain], ["diverging", "-1 1"], `${at}: stated scale`);
      assert.equal(m.quantity, "cosine similarity", `${at} says it shows cosines`);
      // the diagonal (a position with itself) is 1: the orange end
      const one = m.cells.find((c) => c.r === c.c && c.r > 0);
      assert.ok(Math.abs(one.value - 1) < 1e-6);
      assert.ok(far(one.rgb, first.key.stops.at(-1)) <= 1, `${at}: 1 is painted ${one.rgb}`);
    }
  });

  for (const width of WIDTHS) {
    test(`${width} px: the sinusoidal similarity map keeps its scale as the sliders move; −1, 0 and 1 look as on Results`, async () => {
      const res = await open("results", { width });
      await res.page.waitForSelector("body[data-loaded]");
      const [results] = await similarityMaps(res.page);
      const { page } = await open("sinusoidal", { width });
      const seen = [];
      for (const c of ["64", "8", "2"]) {
        await page.fill("#sin-width", c);
        await page.press("#sin-width", "Enter");
        const [m] = await similarityMaps(page);
        seen.push(m);
        for (const cell of m.cells) assert.ok(far(cell.rgb, keyColour(results.key, cell.value)) <= TOL, `width ${c} [${cell.r}, ${cell.c}] = ${cell.value}: pixel ${cell.rgb}, Results' key gives ${keyColour(results.key, cell.value).map(Math.round)}`);
        assert.deepEqual([m.key.kind, m.key.min, m.key.max, m.domain], ["diverging", -1, 1, "-1 1"], `width ${c}`);
      }
      // at width 2 position t and s have similarity cos(t − s): cell [0, 3] is cos 3 = −0.990, [0, 11] is cos 11 = 0.004
      const at2 = seen[2].cells;
      const cell = (r, c) => at2.find((x) => x.r === r && x.c === c);
      assert.ok(Math.abs(cell(0, 3).value - Math.cos(3)) < 1e-9 && Math.abs(cell(0, 11).value - Math.cos(11)) < 1e-9);
      const diag = (m) => m.cells.find((x) => x.r === 1 && x.c === 1).rgb;
      // 1 is one colour at every width and on both pages; −1 and 0 are the key's ends and middle
      for (const m of seen) assert.deepEqual(diag(m), diag(results), "the colour of similarity 1");
      // (−0.990 is 0.5 % of the key's length from its end, 0.004 is 0.2 % from its middle: a few units of colour)
      const ends = results.key.stops;
      assert.ok(far(cell(0, 3).rgb, ends[0]) <= 5, `−0.99 is painted ${cell(0, 3).rgb}, the key's −1 is ${ends[0]}`);
      assert.ok(far(cell(0, 11).rgb, ends[(ends.length - 1) / 2]) <= 3, `0.004 is painted ${cell(0, 11).rgb}, the key's 0 is ${ends[(ends.length - 1) / 2]}`);
    });
  }

  test("every coloured number table has a key whose colours are its cells' (the one-hot vector's included)", async () => {
    let tables = 0;
    for (const name of ["embeddings", "positions"]) {
      const { page } = await open(name, { width: 1280 });
      const found = await page.evaluate(() => {
        const keys = [...document.querySelectorAll(".legend")].map((l) => ({
          label: l.querySelector(".legend-label")?.textContent,
          min: Number(l.dataset.min),
          max: Number(l.dataset.max),
          stops: [...l.querySelectorAll("stop")].map((s) => s.getAttribute("stop-color").match(/\d+/g).map(Number)),
        }));
        const tables = [...document.querySelectorAll("table.numbers")].map((t) => ({
          caption: t.querySelector("caption").textContent,
          cells: [...t.querySelectorAll("td")].map((td) => ({ value: Number(td.dataset.value), rgb: getComputedStyle(td).backgroundColor.match(/\d+/g).slice(0, 3).map(Number) })),
        }));
        return { keys, tables };
      });
      for (const t of found.tables) {
        tables++;
        const match = found.keys.filter((k) => t.cells.every((c) => far(c.rgb, keyColour(k, c.value)) <= TOL));
        assert.ok(match.length > 0, `${name}: "${t.caption}" has no key that gives its cells' colours (keys: ${found.keys.map((k) => k.label).join(", ")})`);
      }
      await page.close();
    }
    assert.equal(tables, 6, "one-hot, table and product; tokens, rows and sum");
  });
});
