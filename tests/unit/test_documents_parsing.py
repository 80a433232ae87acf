"""Parsing an upload to plain text: every format from real files made here (PDF by fpdf2,
DOCX by python-docx, HTML, Markdown and text as strings), every limit, every refusal.

A refusal is always a ``DocumentRefused`` (an ``InvalidInput``, so a ``PermanentError``) with
its reason and a one-line message; a damaged PDF or DOCX never leaks the library's own error.
"""

from __future__ import annotations

import io
import logging
import random
import struct
import warnings
import zipfile
import zlib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import docx
import pypdf
import pytest
from docx.document import Document as DocxDocument
from docx.enum.text import WD_BREAK
from docx.oxml import parse_xml
from docx.oxml.ns import nsdecls
from fpdf import FPDF
from PIL import Image

from aigc_hub.core import errors
from aigc_hub.pipelines.documents import formats
from aigc_hub.pipelines.documents.parsing import (
    DocumentRefused,
    DocumentTooLarge,
    ParsedDocument,
    ParseLimits,
    UnparsableDocument,
    UnsupportedFormat,
    detect_format,
    parse,
)

MiB = 1 << 20
PAGES = [
    "The first page speaks of rivers and their long patient work on stone.",
    "The second page is about bridges, built where the river lets them stand.",
    "The third page ends with the sea, where every river forgets its name.",
]


def make_pdf(pages: list[str], *, title: str | None = None) -> bytes:
    pdf = FPDF()
    if title:
        pdf.set_title(title)
    pdf.set_font("helvetica", size=12)
    for text in pages:
        pdf.add_page()
        pdf.multi_cell(0, 6, text=text)
    return bytes(pdf.output())


def make_docx(build: Callable[[DocxDocument], object], *, title: str = "") -> bytes:
    document = docx.Document()
    document.core_properties.title = title
    build(document)
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def png_bytes() -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (64, 32), (200, 30, 30)).save(out, format="PNG")
    return out.getvalue()


def refusal(reason: str, call: Callable[[], object]) -> DocumentRefused:
    with pytest.raises(DocumentRefused) as caught:
        call()
    error = caught.value
    assert error.reason == reason, error.message
    assert isinstance(error, errors.PermanentError) and isinstance(error, errors.InvalidInput)
    assert error.field == "file"
    assert error.message and "\n" not in error.message
    return error


# --- formats ------------------------------------------------------------------------------


def test_a_pdf_is_its_pages_text_joined_by_blank_lines_with_its_title_and_page_count() -> None:
    parsed = parse(make_pdf(PAGES, title="Rivers"), "rivers.pdf", "application/pdf")

    assert parsed == ParsedDocument(text="\n\n".join(PAGES), format="pdf", pages=3, title="Rivers")


def test_a_pdf_locked_by_an_owner_password_only_opens_like_in_any_viewer() -> None:
    writer = pypdf.PdfWriter(clone_from=pypdf.PdfReader(io.BytesIO(make_pdf(PAGES[:1]))))
    writer.encrypt(user_password="", owner_password="owner", algorithm="AES-256")
    out = io.BytesIO()
    writer.write(out)

    assert parse(out.getvalue(), "restricted.pdf").text == PAGES[0]


def test_a_docx_is_its_paragraphs_headings_and_table_cells_in_order() -> None:
    def build(document: DocxDocument) -> None:
        document.add_heading("Field notes", level=1)
        document.add_paragraph("Rivers carve stone slowly.")
        table = document.add_table(rows=2, cols=3)
        rows = [("Name", "Length", "Sea"), ("Nile", "6650 km", "")]
        for row, values in zip(table.rows, rows, strict=True):
            for cell, value in zip(row.cells, values, strict=True):
                cell.text = value
        table.cell(0, 1).merge(table.cell(0, 2))  # a merged cell is read once
        broken = document.add_paragraph("Line one")
        broken.add_run().add_break(WD_BREAK.LINE)
        broken.add_run("line two\tafter a tab")
        document.add_paragraph("")  # empty paragraphs leave no blank lines behind

    parsed = parse(make_docx(build, title="Notes"), "notes.docx")

    assert parsed.format == "docx" and parsed.pages is None and parsed.title == "Notes"
    assert parsed.text == (
        "Field notes\n\nRivers carve stone slowly.\n\n"
        "Name\tLength Sea\nNile\t6650 km\n\nLine one\nline two\tafter a tab"
    )


def test_a_docx_paragraph_inside_a_content_control_is_read_in_its_place() -> None:
    # Word wraps cover pages, dates and form fields in block content controls (w:sdt), which
    # python-docx's paragraph list skips.
    def build(document: DocxDocument) -> None:
        document.add_paragraph("Before the control.")
        after = document.add_paragraph("After the control.")
        control = parse_xml(
            f"<w:sdt {nsdecls('w')}><w:sdtContent><w:p><w:r><w:t>Inside the control.</w:t>"
            "</w:r></w:p></w:sdtContent></w:sdt>"
        )
        after._p.addprevious(control)

    parsed = parse(make_docx(build), "form.docx")

    assert parsed.text == "Before the control.\n\nInside the control.\n\nAfter the control."


def test_a_docx_without_a_core_title_takes_its_title_paragraph() -> None:
    def build(document: DocxDocument) -> None:
        document.add_heading("The Title Style", level=0)
        document.add_paragraph("Body text.")

    parsed = parse(make_docx(build), "titled.docx")

    assert parsed.title == "The Title Style"
    assert parsed.text == "The Title Style\n\nBody text."


HTML_PAGE = """<!doctype html>
<html><head><title>  River   guide </title><style>p { color: red }</style>
<script>var tracker = "do not index";</script></head>
<body>
  <h1>Rivers</h1>
  <p>Water <b>always</b> finds
     its way&nbsp;&amp; wears the stone.</p>
  <noscript>Enable scripts</noscript><template><p>template text</p></template>
  <ul><li>Nile</li><li>Amazon <a href="/amazon">basin</a></li></ul>
  <table><tr><th>River</th><th>Sea</th></tr><tr><td>Rhine</td><td>North</td></tr></table>
  <pre>keep
  this</pre>
  <div><div>nested</div></div>tail<br>after a break
  <script>document.write("nor this")</script>
</body></html>"""


def test_html_drops_code_and_turns_blocks_into_lines() -> None:
    parsed = parse(HTML_PAGE.encode(), "guide.html", "text/html")

    assert parsed.format == "html" and parsed.title == "River guide"
    assert parsed.text == (
        "Rivers\n\nWater always finds its way & wears the stone.\n\n"
        "Nile\nAmazon basin\n\nRiver\tSea\nRhine\tNorth\n\nkeep\nthis\n\nnested\ntail\n"
        "after a break"
    )


def test_html_nested_ten_thousand_deep_is_read_without_recursion() -> None:
    page = "<div>" * 10_000 + "deep text" + "</div>" * 10_000

    assert parse(page.encode(), "deep.htm").text == "deep text"


@pytest.mark.parametrize(
    ("charset", "encoding"), [("windows-1252", "cp1252"), ("GBK", "gbk"), ("shift_jis", "sjis")]
)
def test_html_declaring_its_charset_in_a_meta_is_decoded_by_it(charset: str, encoding: str) -> None:
    samples = {"cp1252": "Café “naïve” – déjà vu", "gbk": "河流与海洋", "sjis": "川と海の物語"}
    words = samples[encoding]
    page = f'<html><head><meta charset="{charset}"></head><body><p>{words}</p></body></html>'

    assert parse(page.encode(encoding), "page.html").text == words


@pytest.mark.parametrize(
    ("data", "text"),
    [
        ('<meta charset="x-unknown"><p>café</p>'.encode(), "café"),  # unknown: as text
        # declared windows-1252 but UTF-8: ” ends in 0x9D, a byte windows-1252 leaves undefined
        ('<meta charset="windows-1252"><p>“café”</p>'.encode(), "“café”"),
        ('<meta charset="iso-8859-1"><p>“café”</p>'.encode("cp1252"), "“café”"),  # as browsers
        (b'\xef\xbb\xbf<meta charset="latin-1"><p>caf\xc3\xa9</p>', "café"),  # the BOM wins
        ('<meta charset="utf-16"><p>café</p>'.encode(), "café"),  # a meta cannot mean it
    ],
    ids=["unknown", "wrong", "latin-1-label", "bom", "utf-16-label"],
)
def test_html_whose_meta_charset_cannot_apply_is_decoded_as_text(data: bytes, text: str) -> None:
    assert parse(data, "page.html").text == text


def test_a_frameset_page_has_no_body_and_no_text() -> None:
    page = b"<html><head><title>Frames</title></head><frameset><frame src=a></frameset></html>"

    refusal("no_text", lambda: parse(page, "frames.html"))


def test_markdown_is_kept_as_written_with_its_first_heading_as_title() -> None:
    source = "Intro line\n\n# Rivers of the world #\n\n* **Nile**: long\n* [Amazon](x)\n"

    parsed = parse(source.encode(), "README", "text/markdown; charset=utf-8")

    assert parsed == ParsedDocument(
        text=source.strip(), format="markdown", pages=None, title="Rivers of the world"
    )


def test_text_newlines_control_characters_and_blank_runs_are_normalised() -> None:
    raw = (
        "one\r\ntwo\rthree\x00\x07\x1b[0m\tfour  \n\n\n\n\n\nfive\x0csix\u2028seven\x85eight "
        "and a sentence long enough for three control characters to be rare in it"
    )

    parsed = parse(raw.encode(), "notes.txt")

    assert parsed.format == "text" and parsed.title is None
    assert parsed.text == (
        "one\ntwo\nthree[0m\tfour\n\n\nfive\nsix\nseven\neight and a sentence long enough for "
        "three control characters to be rare in it"
    )


@pytest.mark.parametrize(
    ("data", "text"),
    [
        ("plain UTF-8 é 中文".encode(), "plain UTF-8 é 中文"),
        (b"\xef\xbb\xbfwith a BOM", "with a BOM"),
        ("UTF-16 little-endian 河流".encode("utf-16"), "UTF-16 little-endian 河流"),
        (b"\xfe\xff" + "UTF-16 big-endian 河流".encode("utf-16-be"), "UTF-16 big-endian 河流"),
        (
            "简体中文：河流穿过山谷，最终汇入大海。".encode("gb18030"),
            "简体中文：河流穿过山谷，最终汇入大海。",
        ),
    ],
    ids=["utf-8", "utf-8-bom", "utf-16-le-bom", "utf-16-be-bom", "gb18030"],
)
def test_text_decodes_utf8_utf16_with_bom_and_gb18030(data: bytes, text: str) -> None:
    assert parse(data, "notes.txt").text == text


def test_parsing_in_threads_gives_each_caller_its_own_result() -> None:
    files = [(make_pdf([page]), f"{i}.pdf") for i, page in enumerate(PAGES)]
    files += [(HTML_PAGE.encode(), "guide.html"), (b"plain", "a.txt")] * 3

    with ThreadPoolExecutor(max_workers=6) as pool:
        together = list(pool.map(lambda file: parse(*file), files))

    assert together == [parse(*file) for file in files]


# --- detection ----------------------------------------------------------------------------

DOCX = make_docx(lambda d: d.add_paragraph("hello"))


def zipped(members: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return out.getvalue()


@pytest.mark.parametrize(
    ("data", "filename", "mime", "kind"),
    [
        (b"%PDF-1.7\n...", "report.txt", "text/plain", "pdf"),  # magic bytes win over names
        (DOCX, "letter.bin", None, "docx"),
        (DOCX[: len(DOCX) // 2], "letter.docx", None, "docx"),  # truncated: parse says corrupt
        (DOCX[: len(DOCX) // 2], "upload.bin", None, "docx"),  # ...known by its local headers
        (b"# Title", "notes.md", None, "markdown"),
        (b"# Title", "NOTES.MARKDOWN", None, "markdown"),
        (b"<p>x</p>", "page.HTM", None, "html"),
        (b"hello", "a.txt", None, "text"),
        (b"hello", "noext", "text/plain; charset=utf-8", "text"),
        (b"<p>x</p>", "noext", "TEXT/HTML", "html"),
        (b"hello", "notes.md", "text/html", "markdown"),  # the name before the declared type
        (
            b"MZ is how this text starts, and it is not a program at all." * 2,
            "mz.txt",
            None,
            "text",
        ),
    ],
    ids=[
        "pdf-named-txt",
        "docx-named-bin",
        "truncated-docx",
        "truncated-docx-named-bin",
        "md",
        "markdown-upper",
        "htm-upper",
        "txt",
        "mime-plain",
        "mime-html",
        "name-over-mime",
        "text-starting-mz",
    ],
)
def test_detect_format_reads_magic_bytes_then_the_name_then_the_declared_type(
    data: bytes, filename: str, mime: str | None, kind: str
) -> None:
    assert detect_format(data, filename, mime) == kind


ELF = b"\x7fELF\x02\x01\x01" + bytes(9)
PE = b"MZ" + bytes(0x3A) + struct.pack("<I", 0x40) + b"PE\x00\x00" + bytes(16)


@pytest.mark.parametrize(
    ("data", "filename", "mime", "named"),
    [
        (png_bytes(), "photo.txt", "text/plain", "the file is a PNG image, not a document"),
        (b"\xff\xd8\xff\xe0\x00\x10JFIF\x00", "scan.md", None, "the file is a JPEG image"),
        (b"RIFF\x24\x00\x00\x00WEBPVP8 ", "a.html", None, "the file is a WebP image"),
        (b"\x00\x00\x00\x20ftypisom", "clip.txt", None, "the file is a video or a HEIF image"),
        (ELF, "tool.txt", None, "the file is an executable (ELF)"),
        (PE, "setup.txt", None, "the file is an executable (Windows PE)"),
        (b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + bytes(8), "old.doc", None, "the file is a legacy"),
        (zipped({"data.csv": b"a,b\n"}), "data.docx", None, "the file is a zip archive without"),
        (b"PK\x03\x04" + bytes(40), "x.zip", None, "the file is a damaged zip archive"),
        (b"\x1f\x8b\x08\x00" + bytes(10), "notes.txt", None, "the file is a gzip archive"),
        (zlib.compress(b"x"), "notes.txt.gz", None, "the file is a .gz file, not a supported"),
        (b"<html>", "page.pdf", None, "the file is named .pdf but is not PDF"),
        (b"text", "letter.docx", formats.DOCX_MIME, "the file is named .docx but is not DOCX"),
        (b"a,b\n1,2\n", "table.csv", "text/csv", "the file is a .csv file (declared text/csv)"),
        (b"hello", "noext", None, "the file is a file without an extension, not a supported"),
    ],
    ids=[
        "png",
        "jpeg",
        "webp",
        "mp4",
        "elf",
        "pe",
        "ole2",
        "zip-not-docx",
        "damaged-zip",
        "gzip",
        "unknown-extension",
        "named-pdf",
        "named-docx",
        "csv",
        "no-extension",
    ],
)
def test_detect_format_refuses_what_is_no_document(
    data: bytes, filename: str, mime: str | None, named: str
) -> None:
    error = refusal("unsupported_format", lambda: detect_format(data, filename, mime))

    assert isinstance(error, UnsupportedFormat)
    assert error.message.startswith(named), error.message
    assert error.message.endswith(": upload plain text, Markdown, HTML, PDF or DOCX")


# --- limits -------------------------------------------------------------------------------


def test_a_file_over_max_bytes_is_refused_before_it_is_read() -> None:
    limits = ParseLimits(max_bytes=1000)

    error = refusal("too_large", lambda: parse(png_bytes() + bytes(1000), "big.png", None, limits))

    assert isinstance(error, DocumentTooLarge) and "over the limit of 1000" in error.message
    assert parse(b"x" * 1000, "exact.txt", None, limits).text == "x" * 1000


def test_a_pdf_over_max_pages_is_refused() -> None:
    data = make_pdf(PAGES)

    refusal("too_many_pages", lambda: parse(data, "long.pdf", None, ParseLimits(max_pages=2)))
    assert parse(data, "long.pdf", None, ParseLimits(max_pages=3)).pages == 3


@pytest.mark.parametrize(
    ("data", "filename"),
    [
        (make_pdf(PAGES), "long.pdf"),
        (make_docx(lambda d: [d.add_paragraph(page) for page in PAGES]), "long.docx"),
        ("\n\n".join(PAGES).encode(), "long.txt"),
        ("".join(f"<p>{page}</p>" for page in PAGES).encode(), "long.html"),
    ],
    ids=["pdf", "docx", "text", "html"],
)
def test_text_over_max_chars_is_refused(data: bytes, filename: str) -> None:
    size = len("\n\n".join(PAGES))

    refusal("too_large", lambda: parse(data, filename, None, ParseLimits(max_chars=size - 1)))
    assert len(parse(data, filename, None, ParseLimits(max_chars=size)).text) == size


def docx_bomb(unpacked: int, *, garble: bool = False) -> bytes:
    """A real DOCX whose main part, word/document.xml, is padded with ``unpacked`` bytes of
    trailing spaces (still valid XML): ~1000:1 once deflated."""
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(DOCX)) as source, zipfile.ZipFile(out, "w") as bomb:
        for member in source.infolist():
            if member.filename != "word/document.xml":
                bomb.writestr(member, source.read(member))
        info = zipfile.ZipInfo("word/document.xml")
        info.compress_type = zipfile.ZIP_DEFLATED
        with bomb.open(info, "w", force_zip64=True) as sink:
            sink.write(source.read("word/document.xml"))
            for _ in range(unpacked // MiB):
                sink.write(b" " * MiB)
    data = bytearray(out.getvalue())
    if garble:
        # Garble the deflated padding, leaving the directory intact: a reader that inflated
        # the part would fail as "corrupt", so "too_large" proves nothing was inflated.
        at = data.rindex(b"word/document.xml", 0, len(data) // 2) + 2000
        data[at : at + 64] = bytes(range(64))
    return bytes(data)


def test_a_docx_zip_bomb_is_refused_from_its_directory_without_inflating_it() -> None:
    bomb = docx_bomb(101 * MiB, garble=True)
    assert len(bomb) < MiB  # what was uploaded is small

    error = refusal("too_large", lambda: parse(bomb, "bomb.docx"))

    assert isinstance(error, DocumentTooLarge) and "unpacks to" in error.message
    # Allowed in, the same bytes are inflated, and the garbling shows:
    roomy = ParseLimits(max_unpacked_bytes=200 * MiB)
    refusal("corrupt", lambda: parse(bomb, "bomb.docx", None, roomy))


def test_a_docx_under_max_unpacked_bytes_is_read() -> None:
    limits = ParseLimits(max_unpacked_bytes=2 * MiB)

    assert parse(docx_bomb(MiB), "ok.docx", None, limits).text == "hello"
    refusal("too_large", lambda: parse(docx_bomb(2 * MiB), "big.docx", None, limits))


def test_a_pdf_whose_page_inflates_past_pypdfs_limit_is_refused_as_too_large() -> None:
    # A real page whose content stream is 76 MB of blanks deflated to ~75 kB: pypdf stops
    # inflating at its limit (75 MB) and says so; the parse names it too large.
    writer = pypdf.PdfWriter(clone_from=pypdf.PdfReader(io.BytesIO(make_pdf(PAGES[:1]))))
    blanks = pypdf.generic.DecodedStreamObject()
    blanks.set_data(b" " * 76_000_000)
    writer.pages[0].replace_contents(blanks.flate_encode(level=9))
    out = io.BytesIO()
    writer.write(out)
    assert len(out.getvalue()) < MiB

    error = refusal("too_large", lambda: parse(out.getvalue(), "inflating.pdf"))

    assert isinstance(error.__cause__, pypdf.errors.LimitReachedError)


# --- refusals -----------------------------------------------------------------------------


def test_a_pdf_truncated_in_the_middle_is_corrupt() -> None:
    data = make_pdf(PAGES)

    error = refusal("corrupt", lambda: parse(data[: len(data) // 2], "cut.pdf"))

    assert isinstance(error, UnparsableDocument) and "damaged or truncated" in error.message


def test_a_pdf_garbled_in_the_middle_is_corrupt_not_read_in_part() -> None:
    # pypdf rebuilds what it can from the rest and would return the first page alone.
    data = bytearray(make_pdf(PAGES))
    data[len(data) // 3 : len(data) // 2] = bytes(len(data) // 2 - len(data) // 3)

    refusal("corrupt", lambda: parse(bytes(data), "garbled.pdf"))


def test_a_pdf_pypdf_cannot_read_is_corrupt_with_the_pypdf_error_as_its_cause() -> None:
    data = b"%PDF-1.7\n" + b"no objects here, only words\n" * 20 + b"%%EOF\n"

    error = refusal("corrupt", lambda: parse(data, "hollow.pdf"))

    assert isinstance(error.__cause__, pypdf.errors.PyPdfError)


def test_a_pdf_that_needs_a_password_is_refused_as_encrypted() -> None:
    writer = pypdf.PdfWriter(clone_from=pypdf.PdfReader(io.BytesIO(make_pdf(PAGES))))
    writer.encrypt(user_password="secret", owner_password="owner", algorithm="AES-256")
    out = io.BytesIO()
    writer.write(out)

    error = refusal("encrypted", lambda: parse(out.getvalue(), "locked.pdf"))

    assert "remove the password" in error.message


def test_a_pdf_encrypted_for_a_certificate_is_refused_as_encrypted_not_corrupt() -> None:
    # The public-key security handler: pypdf implements only the standard (password) one.
    data = make_pdf(PAGES).replace(
        b"/Root 2 0 R", b"/Root 2 0 R /Encrypt << /Filter /Adobe.PubSec /V 4 /R 4 >>", 1
    )

    error = refusal("encrypted", lambda: parse(data, "for-someone.pdf"))

    assert isinstance(error.__cause__, NotImplementedError)


def test_a_pdf_title_that_is_not_a_string_is_dropped_and_the_text_kept() -> None:
    original = make_pdf(PAGES[:1], title="Rivers")
    data = original.replace(b"/Title (Rivers)", b"/Title 5".ljust(15))  # offsets unchanged
    assert len(data) == len(original) and data != original

    parsed = parse(data, "numbered.pdf")

    assert (parsed.title, parsed.text) == (None, PAGES[0])


def test_a_scanned_pdf_without_a_text_layer_is_refused_as_no_text() -> None:
    pdf = FPDF()
    pdf.add_page()
    pdf.image(Image.new("L", (200, 280), 255), x=10, y=10, w=190)

    error = refusal("no_text", lambda: parse(bytes(pdf.output()), "scan.pdf"))

    assert "no text layer (scanned?)" in error.message


@pytest.mark.parametrize(
    ("data", "filename"),
    [
        (DOCX[: len(DOCX) // 2], "cut.docx"),
        (
            zipped({"[Content_Types].xml": b"<Types/>", "word/document.xml": b"<w:document"}),
            "x.docx",
        ),
    ],
    ids=["truncated", "broken-xml"],
)
def test_a_damaged_docx_is_corrupt(data: bytes, filename: str) -> None:
    refusal("corrupt", lambda: parse(data, filename))


@pytest.mark.parametrize(
    ("data", "filename"),
    [
        (b"", "empty.txt"),
        (b"  \r\n\t\n \n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\x00", "blank.md"),
        (b"<html><head><title>Only a title</title></head><body> </body></html>", "a.html"),
        (b"<script>only code</script>", "code.html"),
        (make_docx(lambda d: d.add_paragraph("   ")), "blank.docx"),
    ],
    ids=["empty", "blank", "title-only", "script-only", "blank-docx"],
)
def test_a_document_without_text_is_refused_as_no_text(data: bytes, filename: str) -> None:
    refusal("no_text", lambda: parse(data, filename))


@pytest.mark.parametrize(
    ("data", "filename"),
    [
        ("café au lait".encode("latin-1"), "latin1.txt"),  # neither UTF-8 nor clean GB18030
        ("utf-16 without a byte order mark".encode("utf-16-le"), "wide.txt"),
        (random.Random(3).randbytes(4096), "random.md"),
        (b"\x00\x01\x02\x03binary\x00\x00" * 50, "blob.html"),
        (b'<meta charset="latin-1">' + b"\x00\x01\x02\x03binary\x00\x00" * 50, "meta.html"),
    ],
    ids=["latin-1", "utf-16-no-bom", "random-bytes", "binary-decodable", "binary-declared"],
)
def test_bytes_that_are_not_text_are_refused_as_not_text(data: bytes, filename: str) -> None:
    error = refusal("not_text", lambda: parse(data, filename))

    assert "save it as UTF-8" in error.message


def test_pypdf_repair_notes_neither_warn_nor_reach_the_logs(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # A wrong startxref offset: pypdf repairs it (by scanning the file) and logs that it did.
    data = make_pdf(PAGES)
    at = data.rindex(b"startxref") + len(b"startxref\n")
    damaged = data[:at] + b"9" + data[at:]
    with pytest.raises(pypdf.errors.PdfReadError):
        pypdf.PdfReader(io.BytesIO(damaged), strict=True).pages[0]  # it does need repair
    caplog.set_level(logging.DEBUG)

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        parsed = parse(damaged, "repaired.pdf")

    assert parsed.text == "\n\n".join(PAGES)
    assert [r for r in caplog.records if r.name.startswith("pypdf")] == []


@pytest.mark.parametrize("kind", ["pdf", "docx"])
def test_randomly_damaged_files_only_ever_parse_or_are_refused(kind: str) -> None:
    # Byte flips, cuts, deletions and insertions anywhere: whatever the libraries raise inside,
    # what comes out is text or a DocumentRefused (the corrupt ones wrap the library's error).
    base = make_pdf(PAGES) if kind == "pdf" else make_docx(lambda d: d.add_paragraph(PAGES[0]))
    rng = random.Random(2024)
    outcomes: set[str] = set()
    for _ in range(150):
        data = bytearray(base)
        at = rng.randrange(len(data))
        match rng.randrange(3):
            case 0:
                data[at : at + rng.randrange(1, 8)] = rng.randbytes(rng.randrange(1, 8))
            case 1:
                del data[at : at + rng.randrange(1, 200)]
            case _:
                data[at:at] = rng.randbytes(rng.randrange(1, 40))
        try:
            parse(bytes(data), f"fuzzed.{kind}")
            outcomes.add("parsed")
        except DocumentRefused as refused:
            outcomes.add(refused.reason)

    assert "corrupt" in outcomes
    assert outcomes <= {"parsed", "corrupt", "no_text", "unsupported_format", "too_large"}
