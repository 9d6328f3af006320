import "../site";
import biasCode from "octlm:positions/formulas.py#alibi_bias";
import slopesCode from "octlm:positions/formulas.py#alibi_slopes";
import t5Code from "octlm:positions/formulas.py#t5_bucket";
import { alibiBias, alibiSlopes, randomMatrix, t5BucketMatrix } from "../math";
import { heatmap } from "../charts";
import { $, codeBlock, el, fmt, labelled, live, numberInput, readNumber, scaleFor, select } from "../ui";

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

const biasMap = heatmap({ label: "Bias added to the scores", rowName: "query", colName: "key", maxSize: 400 });
const bucketMap = heatmap({ label: "T5 bucket of each query–key pair", rowName: "query", colName: "key", maxSize: 400, format: (v) => (Number.isFinite(v) ? `bucket ${v}` : "masked") });
biasMap.root.id = "bias-map";
bucketMap.root.id = "bucket-map";
$("#bias-maps").append(biasMap.root, bucketMap.root);

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
  bucketMap.root.hidden = which !== "t5";
  if (which === "alibi") {
    const slopes = alibiSlopes(h);
    const bias = alibiBias(slopes, pos, pos)[hi];
    biasMap.update(bias, scaleFor(bias.flat()));
    $("#bias-slopes").replaceChildren(
      el(
        "table",
        { class: "plain", id: "slope-table" },
        el("caption", { text: `ALiBi slopes for ${h} heads` }),
        el("thead", {}, el("tr", {}, el("th", { scope: "col", text: "head" }), el("th", { scope: "col", text: "slope m" }), el("th", { scope: "col", text: "bias one token back" }))),
        el("tbody", {}, ...slopes.map((s, i) => el("tr", { class: i === hi ? "hl" : undefined }, el("td", { text: String(i) }), el("td", { text: fmt(s, 6), "data-value": String(s) }), el("td", { text: fmt(-s, 6) })))),
      ),
    );
  } else {
    const nb = readNumber(buckets);
    const md = readNumber(distance);
    const ids = t5BucketMatrix(pos, pos, nb, md).map((r, q) => r.map((b, k) => (k > q ? -Infinity : b)));
    const table = randomMatrix(nb, h, 5).map((r) => r.map((v) => v * 0.5));
    const bias = ids.map((r) => r.map((b) => (Number.isFinite(b) ? table[b][hi] : -Infinity)));
    bucketMap.update(ids, { kind: "sequential", min: 0, max: nb - 1 });
    biasMap.update(bias, scaleFor(bias.flat()));
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
