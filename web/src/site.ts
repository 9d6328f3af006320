/** Loaded by every page: the styles (KaTeX's included, fonts bundled) and the scroll cue on wide tables. */
import "katex/dist/katex.min.css";
import "./style.css";

/**
 * A `.scroll` box (or a displayed formula) whose content is wider than the box (a table on a phone) gets a visible cue: the cut edge
 * fades, a line under it says that it scrolls, and the box becomes a labelled, focusable region so that the
 * arrow keys scroll it too. The cue follows the content as pages redraw it.
 */
function cue(box: HTMLElement): void {
  if (box.dataset.cue) return;
  box.dataset.cue = "1";
  const hint = document.createElement("p");
  hint.className = "scroll-hint";
  hint.hidden = true;
  hint.textContent = "Wider than the screen: scroll sideways to see the rest →";
  box.after(hint);
  const update = () => {
    const over = box.scrollWidth > box.clientWidth + 1;
    box.dataset.overflow = String(over);
    box.dataset.atEnd = String(box.scrollLeft + box.clientWidth >= box.scrollWidth - 1);
    hint.hidden = !over;
    if (over) {
      box.tabIndex = 0;
      box.setAttribute("role", "region");
      const caption = box.classList.contains("katex-display") ? "Formula" : box.querySelector("caption, figcaption")?.textContent?.trim();
      box.setAttribute("aria-label", `${caption || "Wide content"} (scrolls sideways)`);
    } else {
      box.removeAttribute("tabindex");
      box.removeAttribute("role");
      box.removeAttribute("aria-label");
    }
  };
  const sizes = new ResizeObserver(update);
  const watch = () => {
    sizes.disconnect();
    sizes.observe(box);
    for (const child of box.children) sizes.observe(child);
    update();
  };
  new MutationObserver(watch).observe(box, { childList: true, subtree: true });
  box.addEventListener("scroll", update, { passive: true });
  watch();
}

function cueAll(): void {
  // formulas (KaTeX display blocks) scroll too when a phone is narrower than they are
  document.querySelectorAll<HTMLElement>(".scroll, .katex-display").forEach(cue);
}
new MutationObserver(cueAll).observe(document.documentElement, { childList: true, subtree: true });
cueAll();
