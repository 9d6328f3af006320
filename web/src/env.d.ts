/// <reference types="vite/client" />
declare module "octlm:*" {
  // lines: the code highlighted when the site is built, per line [kind, text] pieces (plugins/octlm.ts highlightPython)
  const excerpt: { file: string; line: number; code: string; lines: [string, string][][] };
  export default excerpt;
}
declare module "octlm-raise:*" {
  const message: { file: string; line: number; parts: (string | { expr: string })[] };
  export default message;
}
declare module "octlm-const:*" {
  const constant: { file: string; line: number; value: string[] };
  export default constant;
}
declare module "octlm-bytes:*" {
  const bytes: number; // the size of the imported file, measured when the site is built (plugins/octlm.ts)
  export default bytes;
}
