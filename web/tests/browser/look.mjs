// What the look tests measure on a page as drawn (look.test.mjs runs them over every page; defects.test.mjs on the
// pictures it pins): text on text, boxes sticking out, charts without a key. Each returns a list of what it found,
// in words, empty when the page is clean.
/**
 * Pieces of text drawn on top of each other. Each text is boxed as drawn: an SVG <text> by its element box, an HTML
 * text node by the boxes of its lines (a Range), so a block's empty width never counts. Two boxes collide when they
 * share more than 1.5 px across and more than a quarter of the lower one's height (lines that merely touch, with a
 * tight line-height, do not). Left out: what is not rendered (hidden, zero size, the MathML copy KaTeX keeps for
 * screen readers) and KaTeX's own glyph layout, which stacks boxes by design; a formula counts as one box.
 */
export const collisions = (page, root = "body") =>
  page.evaluate((root) => {
    // drawn at all: not hidden, not inside a closed <details> (content-visibility), not cut away by a clip path (the
    // visually-hidden captions that only screen readers read)
    const visible = (el) => {
      if (!el.checkVisibility({ opacityProperty: true, visibilityProperty: true, contentVisibilityAuto: true })) return false;
      for (let n = el; n && n.nodeType === 1; n = n.parentElement) if (getComputedStyle(n).clipPath !== "none") return false;
      return true;
    };
    /** The part of a box left once every clipping or scrolling ancestor has cut it (null when nothing is left). */
    const clipped = (el, r) => {
      let [l, t, rt, b] = [r.left, r.top, r.right, r.bottom];
      for (let n = el; n && n !== document.body; n = n.parentElement) {
        const s = getComputedStyle(n);
        if (s.overflowX === "visible" && s.overflowY === "visible") continue;
        const c = n.getBoundingClientRect();
        [l, t, rt, b] = [Math.max(l, c.left), Math.max(t, c.top), Math.min(rt, c.right), Math.min(b, c.bottom)];
      }
      return rt - l > 0.5 && b - t > 0.5 ? { left: l, top: t, right: rt, bottom: b } : null;
    };
    const boxes = [];
    const add = (el, r, text) => {
      const c = clipped(el, r);
      if (c) boxes.push({ ...c, text: text.trim().slice(0, 40), where: where(el) });
    };
    const where = (el) => {
      const fig = el.closest("figure, svg, table, .legend, .pipeline, .controls, section, p, li, h1, h2, h3");
      const id = el.closest("[id]")?.id;
      return `${fig ? fig.tagName.toLowerCase() : el.tagName.toLowerCase()}${id ? ` in #${id}` : ""}`;
    };
    const skip = (el) => el.closest(".katex-mathml, script, style, title, option, .skip, desc") !== null;
    for (const k of document.querySelector(root).querySelectorAll(".katex")) {
      if (!k.closest(".katex-mathml") && visible(k)) for (const r of k.querySelector(".katex-html")?.getClientRects() ?? []) add(k, r, k.textContent);
    }
    const walk = document.createTreeWalker(document.querySelector(root), NodeFilter.SHOW_TEXT);
    for (let node = walk.nextNode(); node; node = walk.nextNode()) {
      const el = node.parentElement;
      if (!node.textContent.trim() || skip(el) || el.closest(".katex") || !visible(el)) continue;
      if (el.closest("svg")) {
        if (el.tagName.toLowerCase() === "text" || el.tagName.toLowerCase() === "tspan") add(el, el.getBoundingClientRect(), node.textContent);
        continue;
      }
      const range = document.createRange();
      range.selectNodeContents(node);
      for (const r of range.getClientRects()) if (r.width > 0.5 && r.height > 0.5) add(el, r, node.textContent);
    }
    boxes.sort((a, b) => a.top - b.top);
    const out = [];
    for (let i = 0; i < boxes.length; i++) {
      const a = boxes[i];
      for (let j = i + 1; j < boxes.length && boxes[j].top < a.bottom; j++) {
        const b = boxes[j];
        const across = Math.min(a.right, b.right) - Math.max(a.left, b.left);
        const down = Math.min(a.bottom, b.bottom) - Math.max(a.top, b.top);
        if (across > 1.5 && down > 0.25 * Math.min(a.bottom - a.top, b.bottom - b.top))
          out.push(`"${a.text}" (${a.where}) and "${b.text}" (${b.where}) overlap by ${across.toFixed(1)} × ${down.toFixed(1)} px at (${Math.max(a.left, b.left).toFixed(0)}, ${Math.max(a.top, b.top).toFixed(0)})`);
      }
    }
    return out;
  }, root);

/**
 * Boxes that stick out: an element past the window's left or right edge, an element wider than the box it sits in
 * (past its parent's left or right edge by more than 1 px), text cut inside a box that clips without scrolling, or a
 * caption (of a table, a figure or a colour key) whose words are not all in view before anything is scrolled.
 * A box that scrolls sideways (overflow-x auto or scroll: the site's .scroll boxes, code, wide formulas) may hold
 * wider content; what is inside it is judged by the part of it on screen. Absolutely placed marks (a heatmap's
 * ticks, a cursor) are judged against the window only, as is an SVG's drawing (its own viewBox clips it).
 */
export const overflows = (page) =>
  page.evaluate(() => {
    const W = document.documentElement.clientWidth;
    const scrolls = (n) => ["auto", "scroll"].includes(getComputedStyle(n).overflowX);
    const name = (n) => `${n.tagName.toLowerCase()}${n.id ? `#${n.id}` : ""}${n.classList.length ? `.${[...n.classList].join(".")}` : ""}${n.textContent.trim() ? ` "${n.textContent.trim().slice(0, 30)}"` : ""}`;
    const out = [];
    for (const el of document.querySelectorAll("body *")) {
      // inside an SVG or a formula, the drawing is the unit: KaTeX and SVG place their parts as they mean to
      const part = el.tagName.toLowerCase() !== "svg" && (el.closest("svg") !== null || el.parentElement?.closest(".katex") != null);
      if (part || el.closest(".skip, .katex-mathml, script, style, [hidden]")) continue;
      const s = getComputedStyle(el);
      if (s.display === "contents" || !el.checkVisibility({ contentVisibilityAuto: true }) || el.closest(".visually-hidden")) continue;
      const r = el.getBoundingClientRect();
      if (r.width < 0.5 || r.height < 0.5) continue;
      // the nearest box that scrolls sideways and holds this element: past it, the content is meant to be wider
      let box = null;
      for (let n = el.parentElement; n && n !== document.body; n = n.parentElement) if (scrolls(n)) { box = n; break; }
      const seen = box ? box.getBoundingClientRect() : { left: 0, right: W };
      const [left, right] = [Math.max(r.left, seen.left), Math.min(r.right, seen.right)];
      if (right > left && (left < -1 || right > W + 1)) out.push(`${name(el)} spans ${r.left.toFixed(0)}–${r.right.toFixed(0)} px in a ${W} px window`);
      if (box && box.getBoundingClientRect().right > W + 1) continue; // reported once, for the box
      const parent = el.parentElement;
      if (!box && parent && parent !== document.body && s.position !== "absolute" && s.position !== "fixed" && !scrolls(parent)) {
        const p = parent.getBoundingClientRect();
        if (r.right > p.right + 1 || r.left < p.left - 1) out.push(`${name(el)} (${r.left.toFixed(0)}–${r.right.toFixed(0)} px) sticks out of ${name(parent)} (${p.left.toFixed(0)}–${p.right.toFixed(0)} px)`);
      }
      // text cut off by a box that clips and cannot be scrolled to
      if (["hidden", "clip"].includes(s.overflowX) && el.scrollWidth > el.clientWidth + 1 && !el.closest(".katex")) out.push(`${name(el)} cuts its content: ${el.scrollWidth} px in ${el.clientWidth} px`);
    }
    // a caption is read before its table or figure is scrolled: its words must all be in view from the start
    for (const cap of document.querySelectorAll("caption, figcaption, .legend-label")) {
      if (!cap.checkVisibility({ contentVisibilityAuto: true }) || getComputedStyle(cap).clipPath !== "none") continue;
      const range = document.createRange();
      range.selectNodeContents(cap);
      const lines = [...range.getClientRects()].filter((r) => r.width > 0.5);
      let [lo, hi] = [0, W];
      for (let n = cap.parentElement; n && n !== document.body; n = n.parentElement)
        if (getComputedStyle(n).overflowX !== "visible") [lo, hi] = [Math.max(lo, n.getBoundingClientRect().left), Math.min(hi, n.getBoundingClientRect().right)];
      const cut = lines.filter((r) => r.left < lo - 1 || r.right > hi + 1);
      if (cut.length) out.push(`caption "${cap.textContent.trim().slice(0, 40)}" runs from ${Math.min(...cut.map((r) => r.left)).toFixed(0)} to ${Math.max(...cut.map((r) => r.right)).toFixed(0)} px, out of view (${lo.toFixed(0)}–${hi.toFixed(0)} px)`);
    }
    if (document.documentElement.scrollWidth > W + 1) out.push(`the page is ${document.documentElement.scrollWidth - W} px wider than the window`);
    return out;
  });

/**
 * Charts with several series and no key. A chart is an SVG whose marks name their series (data-series) or, failing
 * that, one that draws several lines (polylines with 3+ points) in different colours; its key is a .series-key in the
 * same figure or chart box, naming each series.
 */
export const unkeyed = (page) =>
  page.evaluate(() =>
    [...document.querySelectorAll("svg")].flatMap((chart) => {
      const named = new Set([...chart.querySelectorAll("[data-series]")].map((m) => m.dataset.series));
      const lines = new Set([...chart.querySelectorAll("polyline")].filter((p) => (p.getAttribute("points") ?? "").trim().split(/\s+/).length >= 3).map((p) => p.getAttribute("stroke")));
      const series = named.size ? [...named] : [...lines];
      if (series.length < 2) return [];
      const holder = chart.closest(".chart-box, .plot, figure") ?? chart.parentElement;
      const key = holder.querySelector(".series-key");
      const entries = key ? [...key.querySelectorAll("li")].map((li) => li.dataset.series ?? li.textContent.trim()) : [];
      const missing = named.size ? series.filter((s) => !entries.includes(s)) : entries.length >= series.length ? [] : series;
      return missing.length ? [`${chart.id ? `#${chart.id}` : "an svg"} draws ${series.length} series (${series.join(", ")}); ${key ? `its key lacks ${missing.join(", ")}` : "no key"}`] : [];
    }),
  );
