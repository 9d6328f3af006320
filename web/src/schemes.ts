/**
 * octlm's position-scheme registry as data: web/fixtures/schemes.json, written by `octlm export fixtures` from
 * `octlm.positions.scheme.SCHEMES` (every registered scheme, in the order octlm's tables list them). The pages read the
 * list of schemes from here and never keep one of their own.
 */
import registry from "../fixtures/schemes.json";
import { fillMessage, type MessagePart } from "./messages";

export type Hook = "embed" | "rotate" | "bias" | "contextual_bias" | "attend";
export interface SchemeInfo {
  name: string;
  family: string; // the scheme it is grouped under: itself, or the one it is a variant of (p-RoPE: rope)
  bounded: boolean; // has a maximum length
  shows: string[]; // what `octlm inspect` shows of it: "vectors", "frequencies", "bias"
  options: string[]; // the ModelConfig fields it reads
  hooks: Hook[]; // the PositionScheme hooks it overrides
  cost: string; // how its cost grows with the length when faster than softmax attention's T², else ""
  doc: string; // its class docstring's summary
}

export const SCHEMES: SchemeInfo[] = (registry as { schemes: SchemeInfo[] }).schemes;

/** The schemes with no maximum length, in table order: what octlm's learned-table error offers instead. */
export const unboundedSchemes = (schemes: SchemeInfo[] = SCHEMES): string[] => schemes.filter((s) => !s.bounded).map((s) => s.name);

/** The f-string field of octlm/model/decoder.py's learned-table error that names the unbounded schemes. */
export const UNBOUNDED_FIELD = "', '.join(unbounded_schemes())";

/**
 * The learned-table error (`parts` cut from `Decoder.check_ids` at build time) for a sequence of `length` tokens and
 * a table of `limit` rows, word for word what octlm prints: the unbounded list comes from the registry's export.
 */
export function tooLongMessage(parts: MessagePart[], length: number, limit: number, schemes: SchemeInfo[] = SCHEMES): string {
  return fillMessage(parts, { length, limit, [UNBOUNDED_FIELD]: unboundedSchemes(schemes).join(", ") });
}

const WHERE: Record<Hook, string> = {
  embed: "embed (added to the token vectors)",
  rotate: "rotate (queries and keys)",
  bias: "bias (on the scores, by distance)",
  contextual_bias: "contextual bias (on the scores, from q and k)",
  attend: "attention itself (weights computed by the scheme, from the content)",
};

/** Where a scheme acts, in words: its hooks in forward-pass order, or "nowhere" (NoPE: the causal mask only). */
export const actsWhere = (hooks: Hook[]): string => (hooks.length ? hooks.map((h) => WHERE[h] ?? h).join(", ") : "nowhere (the causal mask only)");

/** The maximum length, in words. */
export const maxLength = (s: SchemeInfo): string =>
  !s.bounded ? "none" : s.options.includes("context_length") ? "model.context_length (one row per position)" : "fixed when built";

/** The page (and section) of this site that explains a scheme; a scheme with no page yet has none. */
export const EXPLAINED: Record<string, string> = {
  learned: "./positions.html#limits",
  sinusoidal: "./sinusoidal.html",
  rope: "./rope.html",
  alibi: "./bias.html",
  t5: "./bias.html",
};

/** A scheme's cost beyond softmax attention's T², in words: the registry's string, or "—" for the usual T². */
export const costBeyond = (s: SchemeInfo): string => s.cost || "—";

/** The rows of the positions page's scheme table: name, where it acts, maximum length, family, cost, link. */
export function schemeRows(
  schemes: SchemeInfo[] = SCHEMES,
): { name: string; acts: string; max: string; family: string; cost: string; href: string | null; doc: string }[] {
  return schemes.map((s) => ({ name: s.name, acts: actsWhere(s.hooks), max: maxLength(s), family: s.family, cost: costBeyond(s), href: EXPLAINED[s.name] ?? null, doc: s.doc }));
}
