"""The documents pipeline's physical limit: how many ~200-token chunks a second the bare
all-MiniLM-L6-v2 embeds on this machine's CPU, by batch size and torch threads.

The chunks are real text cut the pipeline's way: paragraphs of the licence, README and
METADATA files of the installed packages, split by ``TokenSplitter`` (200 tokens, 30 of
overlap) with the MiniLM tokenizer, the first ``--chunks`` of at least 150 tokens. Each
configuration embeds them in arrival order, ``--batches`` at a time (one ``encode`` call
per batch, as the embedding worker makes them: sentence-transformers sorts by length inside
a call only), after one warm-up batch. The figure is chunks per wall second; beside it, chunks
per CPU second of this process, which a machine busy with other work changes less (with one
thread it is the rate on a core of one's own; two threads buy wall time with CPU). No adapter, no
event loop, no queue: the pipeline's rate is compared against this one.

The model is the one the backbone shares (``semantic.shared_model``); torch's intra-op
threads are set on this thread before each configuration.

    python bench/documents_embedders.py
    python bench/documents_embedders.py --chunks 500 --batches 1,32 --threads 1
"""

from __future__ import annotations

import argparse
import statistics
import sys
import sysconfig
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from loopback import machine_load

from aigc_hub.moderation import semantic
from aigc_hub.pipelines.documents.splitting import TokenSplitter, minilm_token_counter

SITE = Path(sysconfig.get_paths()["purelib"])
PATTERNS = ("*.dist-info/LICENSE*", "*.dist-info/licenses/*", "*.dist-info/METADATA", "**/*.md")


def corpus_chunks(count: int, min_tokens: int = 150) -> list[str]:
    """``count`` chunks of real text, as the splitter cuts them, each ``min_tokens`` or more."""
    counter = minilm_token_counter()
    splitter = TokenSplitter(counter, 200, 30)
    chunks: list[str] = []
    seen: set[str] = set()
    for pattern in PATTERNS:
        for path in sorted(SITE.glob(pattern)):
            if not path.is_file() or path.stat().st_size > 2_000_000:
                continue
            text = path.read_text(errors="replace")
            if text in seen:  # the same licence ships in many packages
                continue
            seen.add(text)
            chunks.extend(c.text for c in splitter.split(text) if c.tokens >= min_tokens)
            if len(chunks) >= count:
                return chunks[:count]
    raise SystemExit(f"only {len(chunks)} chunks of {min_tokens}+ tokens in {SITE}")


def run(model: object, chunks: list[str], batch: int, threads: int) -> tuple[float, float]:
    """``(chunks per second, CPU seconds)`` of embedding ``chunks`` ``batch`` at a time."""
    import torch
    from sentence_transformers import SentenceTransformer

    assert isinstance(model, SentenceTransformer)
    torch.set_num_threads(threads)

    def encode(part: list[str]) -> None:
        model.encode(
            part,
            batch_size=batch,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )

    encode(chunks[:batch])  # warm-up: the first call of a shape allocates
    cpu, wall = time.process_time(), time.perf_counter()
    for start in range(0, len(chunks), batch):
        encode(chunks[start : start + batch])
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return len(chunks) / wall, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=2000)
    parser.add_argument("--batches", default="1,8,32,64", help="comma-separated batch sizes")
    parser.add_argument("--threads", default="1,2", help="comma-separated torch thread counts")
    args = parser.parse_args()
    batches = [int(b) for b in args.batches.split(",")]
    threads = [int(t) for t in args.threads.split(",")]

    chunks = corpus_chunks(args.chunks)
    counter = minilm_token_counter()
    tokens = [counter(c) for c in chunks]
    print(
        f"{len(chunks)} chunks from {SITE}: tokens median {statistics.median(tokens):.0f}, "
        f"mean {statistics.mean(tokens):.0f}, min {min(tokens)}, max {max(tokens)}"
    )
    loader = semantic.sentence_transformer_class()
    started = time.perf_counter()
    model, version = semantic.shared_model(semantic.shipped_model_dir(), loader, 1)
    print(f"{version} loaded in {time.perf_counter() - started:.1f} s; {machine_load()}")
    print(f"{'threads':>7} {'batch':>5} {'chunks/s':>9} {'tokens/s':>9} {'chunks/CPU s':>12}  load")
    for thread_count in threads:
        for batch in batches:
            rate, cpu = run(model, chunks, batch, thread_count)
            print(
                f"{thread_count:>7} {batch:>5} {rate:>9.1f} {rate * statistics.mean(tokens):>9.0f}"
                f" {len(chunks) / cpu:>12.1f}  {machine_load()}",
                flush=True,
            )


if __name__ == "__main__":
    main()
