import "../site";
import biasCode from "octlm:positions/formulas.py#alibi_bias";
import slopesCode from "octlm:positions/formulas.py#alibi_slopes";
import t5Code from "octlm:positions/formulas.py#t5_bucket";
import { alibiBias, alibiSlopes, randomMatrix, t5BucketMatrix } from "../math";
import { heatmap } from "../charts";
import { scaleAttr, scaleOf, sig, type Quantity, type Scale } from "../scale";
import { $, codeBlock, el, labelled, live, numberInput, readNumber, select } from "../ui";

const scheme = el(
  "fieldset",
  {},
  el("legend", { text: "Scheme" }),
  el("label", {}, el("input", { type: "radio", name: "bias-scheme", value: "alibi", checked: true, id: "bias-alibi" }), " ALiBi"),
  el("label", {}, el("input", { type: "radio", name: "bias-scheme", value: "t5", id: "bias-t5" }), " T5"),
);
const heads = numberInput("bias-heads", 8, 1, 32);
const length = numberInput("bias-length", 16, 2, 128);
const head = select("bias-head", [], "0");
const buckets = numberInput("bias-buckets", 32, 2, 64);
const distance = numberInput("bias-distance", 128, 1, 1024);
$("#bias-controls").append(
  scheme,
  labelled("Heads H", heads),
  labelled("Head shown", head),
  labelled("Length T", length),
  labelled("T5 buckets", buckets),
  labelled("T5 max distance", distance),
);
$("#code-slopes").append(codeBlock(slopesCode));
$("#code-bias").append(codeBlock(biasCode));
$("#code-t5").append(codeBlock(t5Code));

const biasMap = heatmap({ label: "Bias added to the scores", rowName: "query", colName: "key", maxSize: 400, format: (v) => (Number.isFinite(v) ? sig(v, 3) : "−∞ (masked)") });
const bucketMap = heatmap({ label: "T5 bucket of each query–key pair", rowName: "query", colName: "key", maxSize: 400, format: (v) => (Number.isFinite(v) ? `bucket ${v}` : "masked") });
biasMap.root.id = "bias-map";
bucketMap.root.id = "bucket-map";
// What each map shows, on the site's one scale for it: a bias is signed (diverging, white at 0, as the Models page
// draws the same ALiBi bias), a bucket a number from 0 up. The T5 values are random: the note says how.
const biasBox = el("div", { class: "map", "data-quantity": "bias" }, biasMap.root);
const bucketBox = el("div", { class: "map", "data-quantity": "bucket" }, bucketMap.root);
const t5Init = el("p", { class: "init-note", id: "t5-init", text: "Where the T5 numbers come from: one random number per bucket and head, drawn here with mean 0 and standard deviation 0.5 so that the colours show them. octlm starts this table at standard deviation 0.02, as it does every table, so every bias starts near 0 and training sets them." });
biasBox.append(t5Init);
$("#bias-maps").append(biasBox, bucketBox);

/** Draw `data` on its quantity's scale (fitted to `domain`, the data unless given) and state it on the map's box. */
function draw(map: { update(d: number[][], s: Scale): void }, box: HTMLElement, quantity: Quantity, data: number[][], domain = data.flat()): void {
  const scale = scaleOf(quantity, domain);
  map.update(data, scale);
  box.dataset.scale = scaleAttr(scale);
}

function render(): void {
  const h = readNumber(heads);
  if (head.options.length !== h) {
    const keep = Math.min(Number(head.value) || 0, h - 1);
    head.replaceChildren(...Array.from({ length: h }, (_, i) => el("option", { value: String(i), text: String(i) })));
    head.value = String(keep);
  }
  const which = (document.querySelector<HTMLInputElement>('input[name="bias-scheme"]:checked')?.value ?? "alibi") as "alibi" | "t5";
  const t = readNumber(length);
  const hi = Number(head.value);
  const pos = Array.from({ length: t }, (_, i) => i);
  buckets.disabled = which !== "t5";
  distance.disabled = which !== "t5";
  bucketBox.hidden = bucketMap.root.hidden = which !== "t5";
  t5Init.hidden = which !== "t5";
  if (which === "t5") biasBox.dataset.init = "t5-init";
  else delete biasBox.dataset.init;
  if (which === "alibi") {
    const slopes = alibiSlopes(h);
    const bias = alibiBias(slopes, pos, pos)[hi];
    draw(biasMap, biasBox, "bias", bias);
    $("#bias-slopes").replaceChildren(
      el(
        "table",
        { class: "plain", id: "slope-table" },
        el("caption", { text: `ALiBi slopes for ${h} heads` }),
        el("thead", {}, el("tr", {}, el("th", { scope: "col", text: "head" }), el("th", { scope: "col", text: "slope m" }), el("th", { scope: "col", text: "bias one token back" }))),
        el("tbody", {}, ...slopes.map((s, i) => el("tr", { class: i === hi ? "hl" : undefined }, el("td", { text: String(i) }), el("td", { text: sig(s, 4), "data-value": String(s) }), el("td", { text: sig(-s, 4) })))),
      ),
    );
  } else {
    const nb = readNumber(buckets);
    const md = readNumber(distance);
    const ids = t5BucketMatrix(pos, pos, nb, md).map((r, q) => r.map((b, k) => (k > q ? -Infinity : b)));
    const table = randomMatrix(nb, h, 5).map((r) => r.map((v) => v * 0.5));
    const bias = ids.map((r) => r.map((b) => (Number.isFinite(b) ? table[b][hi] : -Infinity)));
    // the bucket scale ends at the last bucket there is, whether or not this length reaches it
    draw(bucketMap, bucketBox, "bucket", ids, [nb - 1]);
    draw(biasMap, biasBox, "bias", bias);
    const counts = new Map<number, number[]>();
    for (let d = 0; d < t; d++) {
      const b = ids[t - 1][t - 1 - d];
      counts.set(b, [...(counts.get(b) ?? []), d]);
    }
    $("#bias-slopes").replaceChildren(
      el(
        "table",
        { class: "plain", id: "bucket-table" },
        el("caption", { text: `Distances q − k (up to ${t - 1}) in each of the ${nb} buckets` }),
        el("thead", {}, el("tr", {}, el("th", { scope: "col", text: "bucket" }), el("th", { scope: "col", text: "distances" }))),
        el("tbody", {}, ...[...counts].map(([b, ds]) => el("tr", {}, el("td", { text: String(b) }), el("td", { text: ds.length > 3 ? `${ds[0]} … ${ds[ds.length - 1]}` : ds.join(", ") })))),
      ),
    );
  }
}
live(render, scheme, heads, length, head, buckets, distance);
render();
