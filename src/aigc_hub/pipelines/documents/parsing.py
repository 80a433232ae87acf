"""A file a user uploads to a knowledge base, as plain text (seed 003 §3.4, §4.1).

:func:`parse` takes the bytes of a text, Markdown, HTML, PDF or DOCX file and returns a
:class:`ParsedDocument`, or raises a :class:`~.formats.DocumentRefused` whose ``reason`` says
why: ``unsupported_format``, ``too_large``, ``too_many_pages``, ``encrypted``, ``corrupt``,
``no_text`` or ``not_text``. No other exception escapes for bad bytes: each library's own
errors are caught by name and wrapped, so a damaged upload is dead-lettered as bad data
(seed 003 FAQ Q6), never retried, and never crashes a worker with a library's traceback.

Limits are checked before the work they bound: the byte size before anything is read, the
PDF page count before a page is extracted, the DOCX parts' declared unpacked size before one
is inflated (Python's zipfile never inflates past a member's declared size, so a zip bomb is
refused from its directory alone), and the text size as it accumulates.

Synchronous and CPU-bound: callers run it in a worker thread. It keeps no state between
calls, so several threads may parse at once. Beside it, :mod:`.formats` tells what a file is
(magic bytes, then name and type), decodes text and holds the refusals; :mod:`.markup`
turns HTML into text.
"""

from __future__ import annotations

import contextlib
import io
import logging
import re
import zipfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final, cast

import docx
import pypdf
import pypdf.errors
from docx.opc.exceptions import OpcError
from docx.oxml.text.paragraph import CT_P
from docx.oxml.xmlchemy import BaseOxmlElement

from aigc_hub.pipelines.documents import formats, markup
from aigc_hub.pipelines.documents.formats import (
    DocumentFormat,
    DocumentRefused,
    DocumentTooLarge,
    UnparsableDocument,
    UnsupportedFormat,
    detect_format,
)

__all__ = [
    "DEFAULT_LIMITS",
    "DocumentFormat",
    "DocumentRefused",
    "DocumentTooLarge",
    "ParseLimits",
    "ParsedDocument",
    "UnparsableDocument",
    "UnsupportedFormat",
    "detect_format",
    "parse",
]

MiB: Final = 1 << 20

# pypdf logs each repair it makes to a damaged file ("EOF marker not found", "Ignoring wrong
# pointing object") at WARNING, and a font encoding it does not know at ERROR, once per page:
# notes about the user's file, not faults of ours. What they come to, text or a refusal that
# says what to do, is what we report; they would only bury a worker's own log lines.
logging.getLogger("pypdf").setLevel(logging.CRITICAL)

#: What pypdf raises for bytes it cannot make sense of. Besides its own errors, a damaged
#: file can surface as the builtin errors of the code reading it (a bad number, a missing
#: dictionary key, a short read, a stream that does not inflate, a cycle in the page tree, a
#: filter name mangled into one pypdf does not implement, a feature needing a library that
#: is not installed).
_PDF_DAMAGE: Final = (
    pypdf.errors.PyPdfError, ValueError, KeyError, IndexError, TypeError, AttributeError,
    EOFError, zlib.error, RecursionError, NotImplementedError, pypdf.errors.DependencyError,
)  # fmt: skip
#: The same for python-docx: the package (zip), its relationships and its XML parts (lxml's
#: XMLSyntaxError is a SyntaxError; an element of the wrong kind shows as AttributeError, a
#: missing attribute as TypeError).
_DOCX_DAMAGE: Final = (
    OpcError, zipfile.BadZipFile, SyntaxError, KeyError, ValueError, EOFError,
    zlib.error, NotImplementedError, AttributeError, TypeError,
)  # fmt: skip
#: Paragraphs and tables of a DOCX body, in order, also inside block content controls.
_DOCX_BLOCKS: Final = "./w:p | ./w:tbl | ./w:sdt/w:sdtContent/w:p | ./w:sdt/w:sdtContent/w:tbl"
_ATX_TITLE: Final = re.compile(r"^# +(.+?)(?: +#+)?$", re.MULTILINE)


@dataclass(frozen=True)
class ParseLimits:
    """How much :func:`parse` reads before refusing a document as too large."""

    max_bytes: int = 20 * MiB
    max_pages: int = 500  # PDF pages
    max_chars: int = 2_000_000  # the extracted text, once normalised
    max_unpacked_bytes: int = 100 * MiB  # a DOCX's zip members, together, as declared


DEFAULT_LIMITS: Final = ParseLimits()


@dataclass(frozen=True)
class ParsedDocument:
    """A document's text (``\\n`` newlines, no control characters but tab), its format, its
    page count (PDF only) and its title when the file names one."""

    text: str
    format: DocumentFormat
    pages: int | None
    title: str | None


def parse(
    data: bytes,
    filename: str,
    declared_mime: str | None = None,
    limits: ParseLimits = DEFAULT_LIMITS,
) -> ParsedDocument:
    """``data`` (uploaded as ``filename``, declared ``declared_mime``) as plain text.

    Raises :class:`UnsupportedFormat`, :class:`DocumentTooLarge` or
    :class:`UnparsableDocument`, all :class:`DocumentRefused` with a ``reason``.
    """
    if len(data) > limits.max_bytes:
        raise DocumentTooLarge(
            "too_large",
            f"the file is {len(data)} bytes, over the limit of {limits.max_bytes}: split it "
            "into smaller files",
        )
    kind = detect_format(data, filename, declared_mime)
    pages: int | None = None
    if kind == "pdf":
        text, pages, title = _read_pdf(data, limits)
    elif kind == "docx":
        text, title = _read_docx(data, limits)
    elif kind == "html":
        text, title = markup.html_text(markup.decode_html(data))
    else:
        text = formats.decode_text(data)
        title = _markdown_title(text) if kind == "markdown" else None
    text = formats.normalize_text(text)
    _check_chars(len(text), limits)
    if not text:
        raise formats.no_text(f"the {kind} file holds no text")
    return ParsedDocument(text=text, format=kind, pages=pages, title=title)


def _check_chars(count: int, limits: ParseLimits) -> None:
    if count > limits.max_chars:
        raise DocumentTooLarge(
            "too_large",
            f"the document's text passes {limits.max_chars} characters: split it into smaller "
            "documents",
        )


def _read_pdf(data: bytes, limits: ParseLimits) -> tuple[str, int, str | None]:
    if b"%%EOF" not in data[-1024:]:
        # A PDF ends with %%EOF (readers look for it in the last 1024 bytes). pypdf would
        # rebuild a truncated file from what is left and return part of its text as if whole.
        raise formats.corrupt("PDF")
    with _pdf_errors():
        reader = _open_pdf(data)
        count = len(reader.pages)
        if count < _declared_pages(reader):
            # pypdf skips page objects it cannot find in a damaged body; their text is lost.
            raise formats.corrupt("PDF")
        if count > limits.max_pages:
            raise DocumentTooLarge(
                "too_many_pages",
                f"the PDF has {count} pages, over the limit of {limits.max_pages}: split it "
                "into smaller files",
            )
        texts: list[str] = []
        total = 0
        for page in reader.pages:
            texts.append(formats.normalize_text(page.extract_text()))
            total += len(texts[-1]) + 2
            _check_chars(total - 2, limits)  # before extracting more of a huge document
        title = _clean_title(reader.metadata.title if reader.metadata else None)
    text = "\n\n".join(page for page in texts if page)
    if not text:
        raise UnparsableDocument(
            "no_text",
            "the PDF has no text layer (scanned?): run it through OCR, or export it with its "
            "text, and upload it again",
        )
    return text, count, title


@contextlib.contextmanager
def _pdf_errors() -> Iterator[None]:
    try:
        yield
    except DocumentRefused:
        raise
    except pypdf.errors.FileNotDecryptedError as exc:
        raise _encrypted() from exc
    except pypdf.errors.LimitReachedError as exc:
        raise DocumentTooLarge(
            "too_large", "the PDF inflates past the reader's limits: split it into smaller files"
        ) from exc
    except _PDF_DAMAGE as exc:
        raise formats.corrupt("PDF") from exc


def _open_pdf(data: bytes) -> pypdf.PdfReader:
    # A PDF with an owner password only opens with the empty user password in every viewer:
    # it is read. One that asks for a password, or uses a security handler pypdf does not
    # have (a certificate: NotImplementedError; AES without its library: DependencyError),
    # is refused as encrypted rather than as damaged.
    try:
        reader = pypdf.PdfReader(io.BytesIO(data))
        if reader.is_encrypted and reader.decrypt("") == pypdf.PasswordType.NOT_DECRYPTED:
            raise _encrypted()
    except (NotImplementedError, pypdf.errors.DependencyError) as exc:
        if b"/Encrypt" in data:
            raise _encrypted() from exc
        raise
    return reader


def _encrypted() -> UnparsableDocument:
    return UnparsableDocument(
        "encrypted", "the PDF is password-protected: remove the password and upload it again"
    )


def _declared_pages(reader: pypdf.PdfReader) -> int:
    # The page tree's /Count. Producers get it wrong now and then, which is why pypdf counts
    # the pages it finds; fewer found than declared is what damage looks like.
    tree = reader.root_object.get("/Pages")
    declared = tree.get_object().get("/Count") if tree is not None else None
    return declared if isinstance(declared, int) else 0


def _read_docx(data: bytes, limits: ParseLimits) -> tuple[str, str | None]:
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            unpacked = sum(member.file_size for member in archive.infolist())
    except formats.ZIP_DAMAGE as exc:
        raise formats.corrupt("DOCX") from exc
    if unpacked > limits.max_unpacked_bytes:
        raise DocumentTooLarge(
            "too_large",
            f"the DOCX unpacks to {unpacked} bytes, over the limit of "
            f"{limits.max_unpacked_bytes}: remove embedded media or split it",
        )
    try:
        document = docx.Document(io.BytesIO(data))
        blocks: list[str] = []
        total = 0
        for block in _docx_blocks(document.element.body):
            blocks.append(formats.normalize_text(block))
            total += len(blocks[-1]) + 2
            _check_chars(total - 2, limits)
        title = _clean_title(document.core_properties.title) or _docx_title(document.element.body)
    except DocumentRefused:
        raise
    except _DOCX_DAMAGE as exc:
        raise formats.corrupt("DOCX") from exc
    return "\n\n".join(block for block in blocks if block), title


def _docx_blocks(body: BaseOxmlElement) -> Iterator[str]:
    # The XML rather than python-docx's Paragraph and Table objects: one pass, the blocks in
    # content controls too, and every cell once (Table.rows repeats merged cells).
    for element in cast("list[BaseOxmlElement]", body.xpath(_DOCX_BLOCKS)):
        if isinstance(element, CT_P):
            yield element.text
        else:
            rows = cast("list[BaseOxmlElement]", element.xpath("./w:tr"))
            yield "\n".join(_docx_row(row) for row in rows)


def _docx_row(row: BaseOxmlElement) -> str:
    # A cell's paragraphs, nested tables' included, make one cell; cells are tab-separated.
    cells = cast("list[BaseOxmlElement]", row.xpath("./w:tc"))
    paragraphs = (cast("list[CT_P]", cell.xpath(".//w:p")) for cell in cells)
    return "\t".join(" ".join(p.text for p in cell if p.text.strip()) for cell in paragraphs)


def _docx_title(body: BaseOxmlElement) -> str | None:
    for p in cast("list[CT_P]", body.xpath("./w:p[w:pPr/w:pStyle/@w:val='Title']")):
        return _clean_title(p.text)
    return None


def _markdown_title(text: str) -> str | None:
    match = _ATX_TITLE.search(text)
    return _clean_title(match.group(1)) if match else None


def _clean_title(title: object) -> str | None:
    if not isinstance(title, str):  # a PDF's /Title may be any object: a number, an array…
        return None
    return " ".join(formats.normalize_text(title).split()) or None
