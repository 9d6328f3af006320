/** Filling in a message that the build cut out of octlm's source (see plugins/octlm.ts, `octlm-raise:`). */
export type MessagePart = string | { expr: string };

/**
 * The text octlm would raise, with each f-string field replaced by `values[expr]`. An expression the page does
 * not know is an error (the Python side changed its message), never a silent blank.
 */
export function fillMessage(parts: MessagePart[], values: Record<string, string | number>): string {
  return parts
    .map((p) => {
      if (typeof p === "string") return p;
      if (!(p.expr in values)) throw new Error(`the message uses {${p.expr}}, which the page does not fill in`);
      return String(values[p.expr]);
    })
    .join("");
}

/** The placeholders of a message, in order. */
export const fields = (parts: MessagePart[]): string[] => parts.filter((p): p is { expr: string } => typeof p !== "string").map((p) => p.expr);
