"""A small document model: a list of blocks rendered to Markdown and to one self-contained HTML file.

The report (octlm/inspect/report.py) builds its text once as blocks; each renderer walks them in order. HTML
inlines every image as a base64 data URI, so report.html can be mailed or opened anywhere on its own.
"""

from __future__ import annotations

import base64
import html
from dataclasses import dataclass
from pathlib import Path


@dataclass
class Code:
    """Inline code (a token's repr)."""

    text: str


@dataclass
class Strong:
    """Bold text (the best cell of a column)."""

    text: str


Inline = str | Code | Strong | list[str | Code | Strong]


@dataclass
class Heading:
    text: str
    level: int = 2


@dataclass
class Paragraph:
    text: Inline


@dataclass
class Table:
    headers: list[str]
    rows: list[list[Inline]]
    align: str = ""  # one letter per column, "l" or "r" (numbers); columns past its end are left-aligned


@dataclass
class Image:
    path: Path
    caption: str


Block = Heading | Paragraph | Table | Image


def _md_inline(text: Inline, in_table: bool = False) -> str:
    if isinstance(text, list):
        return "".join(_md_inline(t, in_table) for t in text)
    if isinstance(text, Code):
        body = text.text.replace("|", "\\|") if in_table else text.text
        fence = "``" if "`" in body else "`"
        pad = " " if fence == "``" or body.startswith("`") else ""
        return f"{fence}{pad}{body}{pad}{fence}"
    if isinstance(text, Strong):
        return f"**{_md_inline(text.text, in_table)}**"
    return text.replace("|", "\\|") if in_table else text


def render_markdown(blocks: list[Block], folder: Path) -> str:
    """Markdown with images linked relative to `folder` (where report.md lives)."""
    out: list[str] = []
    for block in blocks:
        if isinstance(block, Heading):
            out.append("#" * block.level + " " + block.text)
        elif isinstance(block, Paragraph):
            out.append(_md_inline(block.text))
        elif isinstance(block, Table):
            rule = "".join("---:|" if _right(block, i) else "---|" for i in range(len(block.headers)))
            lines = ["| " + " | ".join(block.headers) + " |", "|" + rule]
            lines += ["| " + " | ".join(_md_inline(c, True) for c in row) + " |" for row in block.rows]
            out.append("\n".join(lines))
        elif isinstance(block, Image):
            out.append(
                f"![{block.caption}]({block.path.relative_to(folder).as_posix()})\n\n*{block.caption}*"
            )
    return "\n\n".join(out) + "\n"


def _right(table: Table, column: int) -> bool:
    return table.align[column : column + 1] == "r"


def _html_inline(text: Inline) -> str:
    if isinstance(text, list):
        return "".join(_html_inline(t) for t in text)
    if isinstance(text, Code):
        return f"<code>{html.escape(text.text)}</code>"
    if isinstance(text, Strong):
        return f"<strong>{html.escape(text.text)}</strong>"
    return html.escape(text)


def _html_cell(table: Table, column: int, tag: str, content: str) -> str:
    style = ' style="text-align: right"' if _right(table, column) else ""
    return f"<{tag}{style}>{content}</{tag}>"


HTML_STYLE = """
body { font: 15px/1.5 system-ui, sans-serif; max-width: 70rem; margin: 2rem auto; padding: 0 1rem; }
table { border-collapse: collapse; margin: 0.5rem 0 1.2rem; font-size: 13px; }
th, td { border: 1px solid #ccc; padding: 0.2rem 0.5rem; text-align: left; vertical-align: top; }
code { background: #f3f3f3; padding: 0 0.2rem; white-space: pre; }
figure { margin: 1rem 0 2rem; } figure img { max-width: 100%; } figcaption { color: #555; font-size: 13px; }
"""


def render_html(blocks: list[Block]) -> str:
    """One HTML file with every image inlined as a base64 data URI."""
    body: list[str] = []
    title = "octlm report"
    for block in blocks:
        if isinstance(block, Heading):
            if block.level == 1:
                title = block.text
            body.append(f"<h{block.level}>{html.escape(block.text)}</h{block.level}>")
        elif isinstance(block, Paragraph):
            body.append(f"<p>{_html_inline(block.text)}</p>")
        elif isinstance(block, Table):
            head = "".join(_html_cell(block, i, "th", html.escape(h)) for i, h in enumerate(block.headers))
            rows = "".join(
                "<tr>"
                + "".join(_html_cell(block, i, "td", _html_inline(c)) for i, c in enumerate(row))
                + "</tr>"
                for row in block.rows
            )
            body.append(f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>")
        elif isinstance(block, Image):
            data = base64.b64encode(block.path.read_bytes()).decode("ascii")
            caption = html.escape(block.caption)
            body.append(
                f'<figure><img src="data:image/png;base64,{data}" alt="{caption}">'
                f"<figcaption>{caption}</figcaption></figure>"
            )
    return (
        '<!doctype html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f"<title>{html.escape(title)}</title>\n"
        f"<style>{HTML_STYLE}</style>\n</head>\n<body>\n" + "\n".join(body) + "\n</body>\n</html>\n"
    )
