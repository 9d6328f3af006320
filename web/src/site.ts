/** Loaded by every page: the styles (KaTeX's included, fonts bundled) and nothing else global. */
import "katex/dist/katex.min.css";
import "./style.css";
