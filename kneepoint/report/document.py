"""A report as a list of plain blocks (headings, paragraphs, lists, tables, code, images),
rendered to Markdown and to one self-contained HTML page (images inlined), so the two always
say the same thing."""

from __future__ import annotations

import base64
import html
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class Heading:
    text: str
    level: int = 2


@dataclass(frozen=True)
class Paragraph:
    text: str


@dataclass(frozen=True)
class Bullets:
    items: Sequence[str]


@dataclass(frozen=True)
class Table:
    header: Sequence[str]
    rows: Sequence[Sequence[str]]


@dataclass(frozen=True)
class Code:
    text: str


@dataclass(frozen=True)
class Image:
    path: Path
    """A PNG; Markdown links it relative to the report, HTML embeds it."""
    caption: str


Block = Heading | Paragraph | Bullets | Table | Code | Image


@dataclass
class Document:
    title: str
    blocks: list[Block] = field(default_factory=list)

    def add(self, *blocks: Block) -> None:
        self.blocks.extend(blocks)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def to_markdown(doc: Document, base: Path) -> str:
    out = [f"# {doc.title}", ""]
    for block in doc.blocks:
        if isinstance(block, Heading):
            out += ["#" * block.level + " " + block.text, ""]
        elif isinstance(block, Paragraph):
            out += [block.text, ""]
        elif isinstance(block, Bullets):
            out += [f"- {item}" for item in block.items] + [""]
        elif isinstance(block, Table):
            out.append("| " + " | ".join(_cell(h) for h in block.header) + " |")
            out.append("|" + "---|" * len(block.header))
            out += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in block.rows]
            out.append("")
        elif isinstance(block, Code):
            out += ["```", block.text, "```", ""]
        else:
            out += [f"![{block.caption}]({block.path.relative_to(base).as_posix()})", ""]
    return "\n".join(out)


_STYLE = """
body { font-family: system-ui, sans-serif; max-width: 1100px; margin: 2em auto; color: #222;
       line-height: 1.45; padding: 0 1em; }
h1 { border-bottom: 2px solid #444; } h2 { border-bottom: 1px solid #ccc; margin-top: 2em; }
table { border-collapse: collapse; margin: 1em 0; font-size: 0.9em; }
th, td { border: 1px solid #bbb; padding: 0.3em 0.6em; text-align: left; vertical-align: top; }
th { background: #eef; } tr:nth-child(even) td { background: #f7f7fb; }
pre { background: #f4f4f4; padding: 0.8em; border-radius: 4px; white-space: pre-wrap;
      overflow-wrap: anywhere; }
td { overflow-wrap: anywhere; }
figure { margin: 1em 0; } img { max-width: 100%; border: 1px solid #ddd; }
figcaption { font-size: 0.85em; color: #555; }
"""


def to_html(doc: Document) -> str:
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{html.escape(doc.title)}</title><style>{_STYLE}</style></head><body>",
        f"<h1>{html.escape(doc.title)}</h1>",
    ]
    for block in doc.blocks:
        parts.append(_html_block(block))
    parts.append("</body></html>")
    return "\n".join(parts)


def _html_block(block: Block) -> str:
    esc = html.escape
    if isinstance(block, Heading):
        return f"<h{block.level}>{esc(block.text)}</h{block.level}>"
    if isinstance(block, Paragraph):
        return f"<p>{esc(block.text)}</p>"
    if isinstance(block, Bullets):
        return "<ul>" + "".join(f"<li>{esc(i)}</li>" for i in block.items) + "</ul>"
    if isinstance(block, Table):
        head = "".join(f"<th>{esc(h)}</th>" for h in block.header)
        rows = "".join(
            "<tr>" + "".join(f"<td>{esc(c)}</td>" for c in row) + "</tr>" for row in block.rows
        )
        return f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>"
    if isinstance(block, Code):
        return f"<pre><code>{esc(block.text)}</code></pre>"
    data = base64.b64encode(block.path.read_bytes()).decode()
    return (
        f'<figure><img alt="{esc(block.caption)}" src="data:image/png;base64,{data}">'
        f"<figcaption>{esc(block.caption)}</figcaption></figure>"
    )
