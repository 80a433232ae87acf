"""HTML as the text a reader sees (seed 003 §3.4): what :func:`.parsing.parse` makes of HTML.

The page is parsed by Lexbor (selectolax), an HTML5 parser, so broken markup is repaired
the way a browser repairs it. Script, style, noscript and template contents are dropped: they
are code or alternatives, not the page's text, and indexing them would let a page's tracker
code answer searches. Whitespace inside a text run collapses as a browser renders it, except
in ``<pre>``; block elements (paragraphs, headings, list items, table rows…) become line
breaks, so a heading and the paragraph after it are two lines, not one run-on sentence.
"""

from __future__ import annotations

import codecs
import re
from typing import Final

from selectolax.lexbor import LexborHTMLParser, LexborNode

from aigc_hub.pipelines.documents import formats

#: Elements whose content is not page text.
DROPPED: Final = ["script", "style", "noscript", "template"]
#: Block elements set apart by a blank line.
_PARAGRAPHS: Final = frozenset({
    "address", "article", "aside", "blockquote", "details", "dl", "fieldset", "figure",
    "footer", "form", "h1", "h2", "h3", "h4", "h5", "h6", "header", "hr", "main", "nav", "ol",
    "p", "pre", "section", "table", "ul",
})  # fmt: skip
#: Block elements that start a line of their own.
_LINES: Final = frozenset({
    "br", "caption", "dd", "div", "dt", "figcaption", "legend", "li", "summary", "tbody",
    "tfoot", "thead", "tr",
})  # fmt: skip
_CELLS: Final = frozenset({"td", "th"})  # cells are tab-separated
_SPACES: Final = re.compile(r"\s+")
_BREAKS: Final = re.compile(r"[ \t]*\n[ \t\n]*")
#: Labels the HTML standard reads as windows-1252, as browsers do: pages declaring latin-1
#: hold its curly quotes and dashes (0x80-0x9F), which latin-1 makes control characters.
_WHATWG_ALIASES: Final = {"iso8859-1": "cp1252", "ascii": "cp1252"}
_META_CHARSET: Final = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?\s*([A-Za-z0-9_.:-]+)""", re.I)


def decode_html(data: bytes) -> str:
    """``data`` as a string: by its BOM, else by a ``<meta charset>`` in its first 1024
    bytes (where the HTML standard looks) when it decodes cleanly, else as a text file."""
    if not data.startswith((b"\xef\xbb\xbf", b"\xff\xfe", b"\xfe\xff")):
        declared = _META_CHARSET.search(data[:1024])
        if declared:
            try:
                encoding = codecs.lookup(declared.group(1).decode("ascii")).name
                encoding = _WHATWG_ALIASES.get(encoding, encoding)
                if not encoding.startswith("utf-16"):  # a meta can't declare it: it's ASCII
                    text = data.decode(encoding)
                    if formats.looks_binary(text):
                        raise formats.not_text()
                    return text
            except (LookupError, UnicodeDecodeError):
                pass  # an unknown or wrong declaration: decode as any text file
    return formats.decode_text(data)


def html_text(html: str) -> tuple[str, str | None]:
    """The visible text of the page ``html`` and its ``<title>``, if it has one."""
    tree = LexborHTMLParser(html)
    title_node = tree.css_first("title")
    title = " ".join(title_node.text().split()) if title_node is not None else ""
    body = tree.body
    if body is None:
        return "", title or None
    body.strip_tags(DROPPED, recursive=True)
    return _block_text(body), title or None


def _block_text(root: LexborNode) -> str:
    # An explicit stack, not recursion: nesting depth is the author's to choose, and a page of
    # ten thousand nested <div>s must not reach Python's recursion limit. An int on the stack
    # is a block edge (1: a line break, 2: a blank line); edges that meet (</li></ul>) make
    # the larger break, not their sum.
    out: list[str] = []
    pending = 0
    stack: list[tuple[LexborNode, bool] | int | str] = [(root, False)]
    while stack:
        item = stack.pop()
        if isinstance(item, int):
            pending = max(pending, item)
            continue
        if isinstance(item, str):
            text = item
        elif item[0].is_text_node:
            node, in_pre = item
            text = node.text_content or ""
            text = text if in_pre else _SPACES.sub(" ", text)
            if pending and not in_pre and not text.strip():
                continue  # the source's indentation between two blocks
        else:
            node, in_pre = item
            tag = node.tag or ""
            edge = 2 if tag in _PARAGRAPHS else 1 if tag in _LINES else 0
            in_pre = in_pre or tag == "pre"
            stack.append(edge)
            stack.extend((child, in_pre) for child in reversed(list(node.iter(include_text=True))))
            stack.append("\t" if tag in _CELLS else edge)  # a cell is apart from the one before
            continue
        if pending and out:
            out.append("\n" * pending)
        pending = 0
        out.append(text)
    return _BREAKS.sub(_one_break, "".join(out)).strip()


def _one_break(blanks: re.Match[str]) -> str:
    # The spaces and tabs around a break are not text (a row's first cell starts with a tab).
    return "\n\n" if blanks.group().count("\n") > 1 else "\n"
