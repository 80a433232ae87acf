"""Parse throughput per format on the test corpus (tests/support/documents_corpus.py).

Every document of the corpus (500 by default: 200 text, 75 each of Markdown, HTML, PDF and
DOCX) is parsed ``--repeat`` times in this one thread, as a worker thread parses them; the
best round per format is kept. Prints, per format, the documents, their bytes, documents/s
and MB/s (MB = 10^6 bytes of input), by the wall clock and by this process's CPU time
(the CPU figure holds on a busy machine, where the wall clock also counts other work).

    PYTHONPATH=src:. python bench/documents_parsing.py
    PYTHONPATH=src:. python bench/documents_parsing.py --documents 200 --repeat 5
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src"), str(ROOT)]

from tests.support.documents_corpus import CorpusDocument, corpus  # noqa: E402

from aigc_hub.pipelines.documents.parsing import parse  # noqa: E402

ORDER = ("txt", "md", "html", "pdf", "docx")


def _args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--documents", type=int, default=500, help="corpus size")
    parser.add_argument("--seed", type=int, default=0, help="corpus seed")
    parser.add_argument("--repeat", type=int, default=3, help="rounds (best kept)")
    return parser.parse_args(argv)


def _round(documents: list[CorpusDocument]) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    for document in documents:
        parse(document.data, document.name, document.mime)
    return time.perf_counter() - wall, time.process_time() - cpu


def main(argv: list[str] | None = None) -> None:
    args = _args(argv)
    started = time.perf_counter(), time.process_time()
    documents = corpus(args.documents, args.seed)
    built = time.perf_counter() - started[0], time.process_time() - started[1]
    by_kind: dict[str, list[CorpusDocument]] = defaultdict(list)
    for document in documents:
        by_kind[document.name.rsplit(".", 1)[1]].append(document)
    print(f"corpus: {len(documents)} documents built in {built[0]:.2f} s ({built[1]:.2f} s CPU)")
    print(f"{'format':<6} {'docs':>5} {'MB':>7} {'docs/s':>9} {'MB/s':>7} {'docs/s CPU':>11} "
          f"{'MB/s CPU':>9}")  # fmt: skip
    for kind in ORDER:
        group = by_kind.get(kind, [])
        if not group:
            continue
        rounds = [_round(group) for _ in range(args.repeat)]
        wall = min(r[0] for r in rounds)
        cpu = min(r[1] for r in rounds)
        size = sum(len(d.data) for d in group) / 1e6
        print(
            f"{kind:<6} {len(group):>5} {size:>7.2f} {len(group) / wall:>9.0f} "
            f"{size / wall:>7.2f} {len(group) / cpu:>11.0f} {size / cpu:>9.2f}"
        )


if __name__ == "__main__":
    main()
