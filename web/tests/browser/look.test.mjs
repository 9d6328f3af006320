// Tests that look at every page as drawn, at 1280 and 390 px: no two pieces of text on top of each other, nothing
// sticking out of its box or the window (a box that scrolls may hold wider content), a key on every chart with
// several series; and a full-page screenshot of each page at each width, kept in test-results/screenshots/ for a
// person to look at. The checks read the layout the browser computed, so they fail on what a reader would see.
// Harness: ./harness.mjs.
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import { PAGES, RESULTS, open, settle } from "./harness.mjs";
import { collisions, overflows, unkeyed } from "./look.mjs";

const WIDTHS = [1280, 390];
const SHOTS = join(RESULTS, "screenshots");
// pages that fetch their data after load say so with body[data-loaded]
const LOADS = ["results", "measured", "models", "tasks"];

describe("every page as drawn, at 1280 and 390 px", () => {
  mkdirSync(SHOTS, { recursive: true });
  for (const name of PAGES) {
    for (const width of WIDTHS) {
      test(`${name} at ${width} px: no text on text, nothing sticking out, a key on every chart with several series; screenshot`, async () => {
        const { page, errors } = await open(name, { width });
        if (LOADS.includes(name)) await page.waitForSelector("body[data-loaded]", { timeout: 60_000 });
        await settle(page);
        await page.screenshot({ path: join(SHOTS, `${name}-${width}.png`), fullPage: true });
        const found = { collisions: await collisions(page), overflows: await overflows(page), unkeyed: await unkeyed(page) };
        assert.deepEqual(found, { collisions: [], overflows: [], unkeyed: [] }, `${name} at ${width} px`);
        assert.deepEqual(errors, []);
        await page.close();
      });
    }
  }
});
