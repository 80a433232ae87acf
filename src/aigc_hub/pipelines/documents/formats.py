"""What an uploaded file is, and the text-level rules every format shares (seed 003 §3.4).

- :func:`detect_format` names the format from the bytes first (``%PDF-``; a zip holding
  ``word/document.xml`` is a DOCX) and only then from the name or the declared type, for the
  text kinds that have no magic number. Anything else is refused: an image, another archive,
  an executable named ``notes.txt`` stays what its first bytes say it is.
- :func:`decode_text` turns the bytes of a text kind into ``str`` by fixed rules, with no
  guessing: UTF-8 (with or without BOM), UTF-16 with its BOM, else GB18030 when the bytes
  decode cleanly as that, else the file is not text.
- :func:`normalize_text` is the one shape all extracted text ends in.
- The refusals (:class:`DocumentRefused` and its three kinds) carry a machine-readable
  ``reason`` and a one-line message that tells the user what to do. They are
  :class:`~aigc_hub.core.errors.InvalidInput` (so ``PermanentError``): bad data is never worth
  a retry (seed 003 FAQ Q6), an HTTP route answers 422, a handler dead-letters at once.

Pure functions over bytes and ``str``; no I/O.
"""

from __future__ import annotations

import io
import re
import zipfile
from typing import Final, Literal

from aigc_hub.core import errors

DocumentFormat = Literal["text", "markdown", "html", "pdf", "docx"]
RefusalReason = Literal[
    "unsupported_format", "too_large", "too_many_pages", "encrypted", "corrupt", "no_text",
    "not_text",
]  # fmt: skip

#: What the refusal messages offer instead.
ACCEPTED: Final = "plain text, Markdown, HTML, PDF or DOCX"

DOCX_MIME: Final = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
_DOCX_MAIN: Final = "word/document.xml"
_ZIP: Final = b"PK\x03\x04"
#: What zipfile raises for a damaged archive (NotImplementedError: a garbled version or
#: compression method field).
ZIP_DAMAGE: Final = (zipfile.BadZipFile, ValueError, EOFError, NotImplementedError)

_BY_EXTENSION: Final[dict[str, DocumentFormat]] = {
    ".txt": "text", ".text": "text", ".md": "markdown", ".markdown": "markdown",
    ".html": "html", ".htm": "html",
}  # fmt: skip
_BY_MIME: Final[dict[str, DocumentFormat]] = {
    "text/plain": "text", "text/markdown": "markdown", "text/x-markdown": "markdown",
    "text/html": "html",
}  # fmt: skip

#: Leading bytes of what a user may bring by mistake, named in the refusal. Only signatures
#: that no text file starts with: a text kind is told by its decoding, not by a prefix.
_SIGNATURES: Final = (
    (b"\x89PNG\r\n\x1a\n", "a PNG image"),
    (b"\xff\xd8\xff", "a JPEG image"),
    (b"GIF87a", "a GIF image"),
    (b"GIF89a", "a GIF image"),
    (b"II*\x00", "a TIFF image"),
    (b"MM\x00*", "a TIFF image"),
    (b"\x7fELF", "an executable (ELF)"),
    (b"\xcf\xfa\xed\xfe", "an executable (Mach-O)"),
    (b"\xca\xfe\xba\xbe", "an executable (Mach-O or Java class)"),
    (b"\x00asm", "a WebAssembly module"),
    (b"PK\x05\x06", "an empty zip archive"),
    (b"\x1f\x8b", "a gzip archive"),
    (b"\xfd7zXZ\x00", "an xz archive"),
    (b"7z\xbc\xaf\x27\x1c", "a 7-Zip archive"),
    (b"Rar!\x1a\x07", "a RAR archive"),
    (b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1", "a legacy Office file (.doc, .xls…)"),
    (b"SQLite format 3\x00", "an SQLite database"),
)

#: More than one character in this many being a control character means binary, not text.
_CONTROL_SHARE: Final = 20
#: Control characters that no text holds (whitespace ones such as CR and FF are allowed).
_BINARY: Final = re.compile(r"[\x00-\x08\x0e-\x1f\x7f-\x84\x86-\x9f]")
_CONTROLS: Final = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
#: Line breaks other than LF and CR: vertical tab, form feed, NEL, line and paragraph
#: separators.
_OTHER_BREAKS: Final = ("\x0b", "\x0c", "\x85", "\u2028", "\u2029")
_LINE_BREAKS: Final = re.compile("[\x0b\x0c\x85\u2028\u2029]")
_BLANK_RUNS: Final = re.compile(r"\n{4,}")


class DocumentRefused(errors.InvalidInput):
    """The uploaded document cannot be taken; ``reason`` says why, for programs."""

    def __init__(self, reason: RefusalReason, message: str) -> None:
        super().__init__("file", message)
        self.reason: RefusalReason = reason


class UnsupportedFormat(DocumentRefused):
    """The file is none of the formats the knowledge base takes."""

    def __init__(self, what: str) -> None:
        super().__init__("unsupported_format", f"{what}: upload {ACCEPTED}")


class DocumentTooLarge(DocumentRefused):
    """The file, its pages, its unpacked parts or its text pass a limit."""


class UnparsableDocument(DocumentRefused):
    """The file claims a supported format but yields no readable text."""


def detect_format(data: bytes, filename: str, declared_mime: str | None) -> DocumentFormat:
    """The format of ``data``: its magic bytes first, then ``filename``'s extension, then
    ``declared_mime``. Raises :class:`UnsupportedFormat` for anything else."""
    if data.startswith(b"%PDF-"):
        return "pdf"
    if data.startswith(_ZIP):
        return _zip_format(data, filename, declared_mime)
    if data.startswith(b"RIFF") and data[8:12] == b"WEBP":
        raise UnsupportedFormat("the file is a WebP image, not a document")
    if data[4:8] == b"ftyp":
        raise UnsupportedFormat("the file is a video or a HEIF image, not a document")
    if data.startswith(b"MZ") and len(data) > 0x40:
        # A PE file's DOS stub points at the "PE\0\0" header; "MZ" alone may start a text.
        at = int.from_bytes(data[0x3C:0x40], "little")
        if data[at : at + 4] == b"PE\x00\x00":
            raise UnsupportedFormat("the file is an executable (Windows PE), not a document")
    for signature, what in _SIGNATURES:
        if data.startswith(signature):
            raise UnsupportedFormat(f"the file is {what}, not a document")
    extension = _extension(filename)
    if extension in _BY_EXTENSION:
        return _BY_EXTENSION[extension]
    mime = _mime(declared_mime)
    if mime in _BY_MIME:
        return _BY_MIME[mime]
    if extension in (".pdf", ".docx"):
        raise UnsupportedFormat(f"the file is named {extension} but is not {extension[1:].upper()}")
    named = f"a {extension} file" if extension else "a file without an extension"
    declared = f" (declared {mime})" if mime else ""
    raise UnsupportedFormat(f"the file is {named}{declared}, not a supported document")


def _zip_format(data: bytes, filename: str, declared_mime: str | None) -> DocumentFormat:
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            names = set(archive.namelist())
    except ZIP_DAMAGE:
        # A truncated DOCX has lost its central directory (at the end) but still starts
        # with local headers naming its parts; it is a DOCX, and parsing calls it corrupt.
        named = _extension(filename) == ".docx" or _mime(declared_mime) == DOCX_MIME
        if named or _DOCX_MAIN.encode() in data:
            return "docx"
        raise UnsupportedFormat("the file is a damaged zip archive, not a DOCX") from None
    if _DOCX_MAIN in names:
        return "docx"
    raise UnsupportedFormat("the file is a zip archive without word/document.xml, not a DOCX")


def _extension(filename: str) -> str:
    name = filename.replace("\\", "/").rsplit("/", 1)[-1].lower()
    return "." + name.rsplit(".", 1)[1] if "." in name.strip(".") else ""


def _mime(declared_mime: str | None) -> str:
    return (declared_mime or "").split(";", 1)[0].strip().lower()


def decode_text(data: bytes) -> str:
    """``data`` as text: UTF-8 with or without BOM, UTF-16 with BOM, else GB18030 if it
    decodes cleanly. Raises :class:`UnparsableDocument` (``not_text``) otherwise, and for
    bytes that decode but are mostly control characters (binary, or UTF-16 without BOM)."""
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        candidates: tuple[str, ...] = ("utf-16",)
    else:
        candidates = ("utf-8-sig", "gb18030")
    for encoding in candidates:
        try:
            text = data.decode(encoding)
        except UnicodeDecodeError:
            continue
        if looks_binary(text):
            break
        return text
    raise not_text()


def looks_binary(text: str) -> bool:
    """Whether more than 1 character in 20 of ``text`` is a control character no text
    holds (CR, FF and the other whitespace controls are allowed)."""
    return len(_BINARY.findall(text)) * _CONTROL_SHARE > len(text)


def not_text() -> UnparsableDocument:
    """The refusal for bytes that are no text in the encodings the parser reads."""
    return UnparsableDocument(
        "not_text", "the file is not text in UTF-8, UTF-16 (with BOM) or GB18030: save it as "
        "UTF-8 and upload it again",
    )  # fmt: skip


def normalize_text(text: str) -> str:
    """``text`` with ``\\n`` newlines, no control characters but ``\\n`` and ``\\t``, no
    trailing blanks on a line, at most two blank lines in a row, and no blank ends."""
    # Each rule runs only when a plain substring search (memchr-fast) says it has work: a
    # regex over every position of a 10 MB text costs ~0.5 s per rule, most texts need none.
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    if any(mark in text for mark in _OTHER_BREAKS):
        text = _LINE_BREAKS.sub("\n", text)
    text = _CONTROLS.sub("", text)
    if " \n" in text or "\t\n" in text:
        text = "\n".join(line.rstrip(" \t") for line in text.split("\n"))
    if "\n\n\n\n" in text:
        text = _BLANK_RUNS.sub("\n\n\n", text)
    return text.strip()


def no_text(what: str) -> UnparsableDocument:
    """The refusal for a document that parsed but holds no text at all."""
    return UnparsableDocument("no_text", f"{what}: upload a document that contains text")


def corrupt(what: str) -> UnparsableDocument:
    """The refusal for a damaged file of a supported format."""
    return UnparsableDocument(
        "corrupt", f"the {what} is damaged or truncated: save or export it again and re-upload it"
    )
