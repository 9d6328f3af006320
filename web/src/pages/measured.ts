import "../site";
import { DATA_FILES, checkEmbeddings, loadData, nearest, presentFiles, type EmbeddingsData } from "../data";
import { cosineSimilarityMatrix, randomMatrix } from "../math";
import { $, el, fmt } from "../ui";

const BASE = import.meta.env.BASE_URL;
const K = 5;

/** The k most similar other rows to row `i` of a similarity matrix, best first. */
export function nearestBySimilarity(sim: number[][], i: number, k: number): { index: number; similarity: number }[] {
  return sim[i]
    .map((similarity, index) => ({ index, similarity }))
    .filter((x) => x.index !== i)
    .sort((a, b) => b.similarity - a.similarity)
    .slice(0, k);
}

const list = (id: string, items: { index: number; similarity: number }[], name: (i: number) => string) =>
  el("ol", { id }, ...items.map((n) => el("li", { "data-value": String(n.similarity), "data-index": String(n.index) }, name(n.index), `, similarity ${fmt(n.similarity, 3)}`)));

const tokenName = (data: EmbeddingsData | null, i: number) => (data ? `${JSON.stringify(data.tokens[i].text)} (id ${data.tokens[i].id})` : `row ${i}`);

async function main(): Promise<void> {
  const present = await presentFiles(BASE);
  const state = present.includes("embeddings.json") ? await loadData(BASE + DATA_FILES.embeddings.path, checkEmbeddings) : ({ state: "missing" } as const);
  const data = state.state === "ok" ? state.data : null;
  // The untrained side is computed here: a table of the trained one's shape, drawn at random with the page's own
  // generator (not octlm's torch seed). Cosine similarity ignores scale, so octlm's std 0.02 makes no difference.
  const rows = data?.tokens.length ?? 300;
  const width = data?.d_model ?? 128;
  const positions = data?.position_similarity?.length ?? 128;
  const untrainedTokens = randomMatrix(rows, width, 505);
  const untrainedPositions = cosineSimilarityMatrix(randomMatrix(positions, width, 506));
  const untrained = el(
    "div",
    { id: "nn-untrained" },
    el("h3", { text: "Untrained (computed in this page)" }),
    el("p", { text: `A random ${rows} × ${width} token table and a random ${positions} × ${width} position table, as at initialization. Nearest to ${data ? tokenName(data, 0) : "row 0"}:` }),
    list("nn-untrained-tokens", nearest(untrainedTokens, 0, K), (i) => tokenName(data, i)),
    el("p", { text: "Nearest to position 0:" }),
    list("nn-untrained-positions", nearestBySimilarity(untrainedPositions, 0, K), (i) => `position ${i}`),
  );
  let trained: HTMLElement;
  if (data) {
    trained = el(
      "div",
      { id: "nn-trained" },
      el("h3", { text: `Trained (run ${data.run}, read from the export)` }),
      el("p", { text: `Its ${data.tokens.length} most frequent tokens, width ${data.d_model}. Nearest to ${tokenName(data, 0)}, the most frequent:` }),
      list("nn-trained-tokens", nearest(data.token_table, 0, K), (i) => tokenName(data, i)),
      ...(data.position_similarity
        ? [el("p", { text: "Nearest to position 0:" }), list("nn-trained-positions", nearestBySimilarity(data.position_similarity, 0, K), (i) => `position ${i}`)]
        : [el("p", { text: `The ${data.position} scheme has no position table, so there are no position neighbours.` })]),
    );
  } else {
    trained = el(
      "div",
      { id: "nn-trained-missing", class: "missing" },
      el("h3", { text: "Trained" }),
      el("p", {}, "No trained export is in this build. Make one with ", el("code", { text: DATA_FILES.embeddings.command }), " and rebuild the site."),
    );
  }
  const best = (items: { similarity: number }[]) => items[0]?.similarity ?? NaN;
  const summary = data
    ? `The closest neighbour of the first token has similarity ${fmt(best(nearest(untrainedTokens, 0, 1)), 2)} untrained and ${fmt(best(nearest(data.token_table, 0, 1)), 2)} trained` +
      (data.position_similarity ? `; for position 0, ${fmt(best(nearestBySimilarity(untrainedPositions, 0, 1)), 2)} against ${fmt(best(nearestBySimilarity(data.position_similarity, 0, 1)), 2)}.` : ".") +
      " Random vectors this wide are nearly at right angles to each other, so untrained similarities stay small and the order of the list means nothing." +
      (data.position_similarity
        ? ` After training, position 0's ${K} nearest positions all lie within ${Math.max(...nearestBySimilarity(data.position_similarity, 0, K).map((n) => n.index))} steps of it; untrained, the farthest of them is ${Math.max(...nearestBySimilarity(untrainedPositions, 0, K).map((n) => n.index))} steps away.`
        : "")
    : "";
  $("#nn-section").replaceChildren(el("div", { class: "compare" }, untrained, trained), summary ? el("p", { id: "nn-summary", text: summary }) : "");
  document.body.dataset.loaded = "true";
}
void main();
