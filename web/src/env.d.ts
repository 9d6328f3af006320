/// <reference types="vite/client" />
declare module "octlm:*" {
  const excerpt: { file: string; line: number; code: string };
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
