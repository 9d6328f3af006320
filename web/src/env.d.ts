/// <reference types="vite/client" />
declare module "octlm:*" {
  const excerpt: { file: string; line: number; code: string };
  export default excerpt;
}
