"""The test corpus holds 500 real documents in the asked mix, each probe is a sentence of its
own document that no other document holds, and the parser reads every generated PDF, DOCX
and HTML file back to text holding its probe: the corpus and the parser agree."""

from __future__ import annotations

import collections

import pytest
from tests.support import documents_corpus
from tests.support.documents_corpus import CorpusDocument, corpus, normalized
from tests.support.documents_render import MIMES, SCRIPT_MARKER

from aigc_hub.pipelines.documents.parsing import parse

FORMATS = {"txt": "text", "md": "markdown", "html": "html", "pdf": "pdf", "docx": "docx"}


@pytest.fixture(scope="module")
def documents() -> list[CorpusDocument]:
    return corpus()


def extension(document: CorpusDocument) -> str:
    return document.name.rsplit(".", 1)[1]


def test_the_corpus_holds_500_documents_in_the_asked_mix(documents: list[CorpusDocument]) -> None:
    kinds = collections.Counter(extension(d) for d in documents)

    assert len(documents) == 500
    assert kinds == {"txt": 200, "md": 75, "html": 75, "pdf": 75, "docx": 75}
    assert len({d.name for d in documents}) == 500
    assert all(d.mime == MIMES[extension(d)] for d in documents)
    words = sorted(len(d.text.split()) for d in documents)
    assert words[0] >= 300 and words[-1] <= 12_000, (words[0], words[-1])


def test_every_probe_is_a_sentence_of_its_document_that_no_other_holds(
    documents: list[CorpusDocument],
) -> None:
    texts = [normalized(d.text) for d in documents]
    everything = "\x00".join(texts)  # no probe spans two documents: none holds a NUL
    for document, text in zip(documents, texts, strict=True):
        probe = normalized(document.probe)
        assert 8 <= len(probe.split()) <= 30 and probe[-1] in ".!?", document.probe
        assert probe in text, document.name
        # Every occurrence in the whole corpus is one in its own document.
        assert everything.count(probe) == text.count(probe), document.name


def test_parse_reads_each_document_back_to_text_holding_its_probe(
    documents: list[CorpusDocument],
) -> None:
    for document in documents:
        parsed = parse(document.data, document.name, document.mime)

        assert parsed.format == FORMATS[extension(document)], document.name
        assert normalized(document.probe) in normalized(parsed.text), document.name
        if parsed.format in ("text", "markdown"):
            assert parsed.text == document.text, document.name
        if parsed.format == "html":
            assert SCRIPT_MARKER in document.data.decode()
            assert SCRIPT_MARKER not in parsed.text, document.name
        if parsed.format == "pdf":
            assert parsed.pages is not None and parsed.pages >= 1


def test_the_first_documents_of_a_corpus_do_not_depend_on_its_size(
    documents: list[CorpusDocument],
) -> None:
    assert corpus(10) == documents[:10]


def test_a_seed_always_builds_the_same_bytes_and_another_seed_other_documents(
    documents: list[CorpusDocument],
) -> None:
    rebuilt = documents_corpus._corpus.__wrapped__(20, 0)  # past the cache: built again

    assert list(rebuilt) == documents[:20]  # the PDFs' and DOCXs' bytes included
    other = corpus(20, seed=1)
    assert {d.probe for d in other} != {d.probe for d in documents[:20]}


def test_asking_for_more_documents_than_exist_is_refused() -> None:
    available = sum(bool(c) for c in documents_corpus.probe_candidates())

    with pytest.raises(ValueError, match=f"only {available} documents with a unique probe"):
        corpus(available + 1)
