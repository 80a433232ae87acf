"""How the test corpus renders a text as a file a user would upload: plain text, Markdown,
HTML, PDF (fpdf2) or DOCX (python-docx), with the text that file really carries.

HTML is built from the paragraphs (a heading, a list, paragraphs) with a ``<script>`` and a
``<style>`` whose content must never reach the index. fpdf2's core fonts are latin-1 only,
so a PDF carries :func:`latin1` of its text: typographic punctuation turned into ASCII,
accents kept, other characters decomposed or dropped; the text reported is that one.
"""

from __future__ import annotations

import datetime as dt
import functools
import html
import io
import re
import textwrap
import unicodedata
import zipfile

import docx
from docx.document import Document as DocxDocument
from docx.oxml.ns import qn
from fpdf import FPDF

from aigc_hub.pipelines.documents import formats

#: What the HTML documents' scripts hold: a parse that indexes scripts would show it.
SCRIPT_MARKER = "corpus script text that must never be indexed"
MIMES = {
    "txt": "text/plain",
    "md": "text/markdown",
    "html": "text/html",
    "pdf": "application/pdf",
    "docx": formats.DOCX_MIME,
}

_ASCII_PUNCTUATION = str.maketrans({
    "\u2018": "'", "\u2019": "'", "\u201a": "'", "\u201c": '"', "\u201d": '"', "\u201e": '"',
    "\u2010": "-", "\u2011": "-", "\u2012": "-", "\u2013": "-", "\u2014": "-", "\u2212": "-",
    "\u2026": "...", "\u2022": "*", "\u2192": "->", "\u00a0": " ", "\u00ad": "", "\t": " ",
})  # fmt: skip
_LIST_ITEM = re.compile(r"^\s*(?:[-*+\u2022]|\d+[.)])\s+")
_WRAP = 95  # characters per PDF line at 10 pt Helvetica on A4
_XML_UNSAFE = re.compile("[\ufffe\uffff]")
#: Every date a file carries: the same bytes for the same text, whenever it is built.
_EPOCH = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def render(
    number: int, kind: str, title: str, paragraphs: tuple[str, ...]
) -> tuple[str, bytes, str, str]:
    """The ``number``-th document of the corpus as a ``kind`` file ("txt", "md", "html",
    "pdf" or "docx"): its name, bytes, media type and the text it carries."""
    slug = re.sub(r"[^a-z0-9]+", "-", title.casefold()).strip("-")[:48]
    name = f"{number:03d}-{slug}.{kind}"
    if kind == "txt":
        text = "\n\n".join((title, *paragraphs))
        return name, text.encode(), MIMES[kind], text
    if kind == "md":
        text = "\n\n".join((f"# {title}", *paragraphs))
        return name, text.encode(), MIMES[kind], text
    blocks = [_block(p) for p in paragraphs]
    maker = {"html": _html, "pdf": _pdf, "docx": _docx}[kind]
    data, text = maker(title, blocks)
    return name, data, MIMES[kind], text


def word_streams(title: str, paragraphs: tuple[str, ...]) -> tuple[str, ...]:
    """Texts whose runs of words cover every run of words any rendering of the paragraphs
    carries, except runs through a list marker, a heading mark or a number: the title with
    the body (list markers dropped, as HTML, PDF and DOCX drop them), and the HTML and DOCX
    heads, whose count of blocks ends where the body starts."""
    blocks = [_block(p) for p in paragraphs]
    body = "\n".join(line for _, lines in blocks for line in lines)
    return (
        f"{title}\n{body}",
        f"{title}\nTitle: {title}\nBlocks: {len(blocks)}",
        f"{title}\nBlocks\t{len(blocks)}",
    )


def latin1(text: str) -> str:
    """``text`` in the characters fpdf2's core fonts have (latin-1), the rest transliterated
    or dropped."""
    text = text.translate(_ASCII_PUNCTUATION)
    if text.isascii():
        return text
    return "".join(ch if ord(ch) < 256 else _folded(ch) for ch in text)


def is_list(paragraph: str) -> bool:
    """Whether every line of ``paragraph`` is a list item ("- ", "* ", "1. "...)."""
    return all(_LIST_ITEM.match(line) for line in paragraph.splitlines())


@functools.cache
def _folded(ch: str) -> str:
    decomposed = unicodedata.normalize("NFKD", ch)
    return "".join(c for c in decomposed if ord(c) < 256 and not unicodedata.combining(c))


def _block(paragraph: str) -> tuple[str, tuple[str, ...]]:
    # ("list", items) | ("heading", (line,)) | ("p", (reflowed,))
    if is_list(paragraph):
        return "list", tuple(_LIST_ITEM.sub("", line) for line in paragraph.splitlines())
    line = " ".join(paragraph.split())
    if "\n" not in paragraph and len(line.split()) <= 10 and line[-1:] not in ".:;,!?":
        return "heading", (line,)
    return "p", (line,)


def _html(title: str, blocks: list[tuple[str, tuple[str, ...]]]) -> tuple[bytes, str]:
    facts = (f"Title: {title}", f"Blocks: {len(blocks)}")
    esc = html.escape
    out = [
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">',
        f"<title>{esc(title)}</title>",
        "<style>body { font-family: serif } .note::after { content: 'style text' }</style>",
        f'<script>window.corpusTracker = "{SCRIPT_MARKER}";</script></head>\n<body>',
        f"<h1>{esc(title)}</h1>",
        "<ul>" + "".join(f"<li>{esc(fact)}</li>" for fact in facts) + "</ul>",
    ]
    for kind, lines in blocks:
        if kind == "list":
            out.append("<ul>\n" + "\n".join(f"  <li>{esc(i)}</li>" for i in lines) + "\n</ul>")
        else:
            tag = "h2" if kind == "heading" else "p"
            out.append(f"<{tag}>{esc(lines[0])}</{tag}>")
    out.append(f'<script>document.title += " {SCRIPT_MARKER}";</script>\n</body></html>\n')
    text = "\n\n".join((title, "\n".join(facts), *("\n".join(lines) for _, lines in blocks)))
    return "\n".join(out).encode(), text


def _pdf(title: str, blocks: list[tuple[str, tuple[str, ...]]]) -> tuple[bytes, str]:
    # pdf.text() at computed positions, wrapped here: multi_cell() would do the same at
    # ~40x the cost, and 75 PDFs must build in well under a second.
    pdf = FPDF(format="A4")
    pdf.set_creation_date(_EPOCH)
    pdf.set_title(latin1(title))
    pdf.set_auto_page_break(False)
    pdf.add_page()
    pdf.set_font("helvetica", style="B", size=14)
    pdf.text(15, 20, latin1(title))
    pdf.set_font("helvetica", size=10)
    y = 32.0
    carried = [latin1(title)]
    for _, lines in blocks:
        paragraph = [latin1(line) for line in lines]
        carried.append("\n".join(paragraph))
        for line in paragraph:
            for row in textwrap.wrap(line, _WRAP, break_long_words=False, break_on_hyphens=False):
                if y > 282:
                    pdf.add_page()
                    y = 20.0
                pdf.text(15, y, row)
                y += 5
        y += 3
    return bytes(pdf.output()), "\n\n".join(carried)


def _docx(title: str, blocks: list[tuple[str, tuple[str, ...]]]) -> tuple[bytes, str]:
    writer = _DocxWriter.shared()
    document = writer.start(_XML_UNSAFE.sub("", title))
    facts = document.add_table(rows=1, cols=2)
    facts.cell(0, 0).text, facts.cell(0, 1).text = "Blocks", str(len(blocks))
    carried = [title, f"Blocks\t{len(blocks)}"]
    for kind, lines in blocks:
        lines = tuple(_XML_UNSAFE.sub("", line) for line in lines)
        carried.append("\n\n".join(lines))
        style = writer.heading if kind == "heading" else writer.bullet if kind == "list" else None
        for line in lines:
            # The style id set on the paragraph's XML: python-docx's style setter scans every
            # style of the template for the default one, at each call (~10 ms a paragraph).
            document.add_paragraph(line)._p.style = style
    return writer.finish(), "\n\n".join(carried)


class _DocxWriter:
    """One python-docx document, refilled for each DOCX of the corpus, and its package
    written with fixed timestamps (python-docx stamps members with the time of saving).

    Opening the template costs more than filling a document (~20 ms: its 800 kB of styles
    are parsed again), and only two parts change from one document to the next: the body and
    the core properties. The others are taken as python-docx saved them the first time. One
    thread at a time: the corpus is built in one.
    """

    _CHANGING = ("word/document.xml", "docProps/core.xml")

    def __init__(self) -> None:
        self.document = docx.Document()
        styles = self.document.styles
        self.heading = styles["Heading 2"].style_id
        self.bullet = styles["List Bullet"].style_id
        properties = self.document.core_properties
        properties.created = properties.modified = _EPOCH
        properties.last_modified_by = "tests.support.documents_corpus"
        saved = io.BytesIO()
        self.document.save(saved)
        with zipfile.ZipFile(saved) as package:
            self.members = {name: package.read(name) for name in package.namelist()}
        self.parts = {
            part.partname.membername: part
            for part in self.document.part.package.iter_parts()
            if part.partname.membername in self._CHANGING
        }

    @classmethod
    @functools.cache
    def shared(cls) -> _DocxWriter:
        return cls()

    def start(self, title: str) -> DocxDocument:
        body = self.document.element.body
        for child in list(body):
            if child.tag != qn("w:sectPr"):
                body.remove(child)
        self.document.core_properties.title = title
        self.document.add_heading(title, level=1)
        return self.document

    def finish(self) -> bytes:
        out = io.BytesIO()
        with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as package:
            for name, data in self.members.items():
                member = zipfile.ZipInfo(name, _EPOCH.timetuple()[:6])
                member.compress_type = zipfile.ZIP_DEFLATED
                package.writestr(member, self.parts[name].blob if name in self.parts else data)
        return out.getvalue()
