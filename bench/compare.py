"""Ours against the baselines, in alternating rounds, each run in a process of its own.

Embedded profile (the default): bench/roundtrip.py (SQLite + embedded log, exactly-once
effects) against bench/baseline_huey.py (Huey's SqliteHuey) and bench/baseline_dramatiq.py
(Dramatiq on Redis, 127.0.0.1:6379 database 11). Scale profile: roundtrip.py --profile scale
--baseline none (Kafka on Tansu + PostgreSQL) against bench/handwritten_kafka.py --mode batched
(confluent-kafka + psycopg, one transaction and one offset commit per batch of up to 500);
each run starts its own Tansu.

Every round runs each contender once, in the same order, so drift of a shared machine spreads
over all of them. The table gives each figure's median over the rounds and the ratio ours /
baseline (higher is better for rates; lower for latency and RSS). Any failed run or missing
figure stops the comparison with a one-line error.

    python bench/compare.py                             # 3 rounds, each script's 20,000 tasks
    python bench/compare.py --rounds 5 --tasks 5000 --seconds 5
    python bench/compare.py --profile scale --tasks 20000
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

BENCH = Path(__file__).resolve().parent
NUMBER = r"([\d,]+(?:\.\d+)?)"
GRACE_S = 10.0

Parser = Callable[[str], dict[str, float]]


@dataclass(frozen=True)
class Contender:
    """One side of the comparison: a script's command line and how to read its output."""

    name: str
    argv: list[str]
    parse: Parser


@dataclass(frozen=True)
class Figure:
    """A row of the table."""

    key: str
    label: str
    lower_is_better: bool = False


FIGURES = (
    Figure("enqueue", "enqueue (service calls/s)"),
    Figure("drain", "drain end to end (tasks/s)"),
    Figure("publish", "to Kafka (events/s; ours: relay from the outbox)"),
    Figure("consume", "consume only (tasks/s; records already in Kafka)"),
    Figure("p50", "latency p50 at the fixed rate (ms)", lower_is_better=True),
    Figure("p99", "latency p99 at the fixed rate (ms)", lower_is_better=True),
    Figure("rss", "peak RSS (MiB)", lower_is_better=True),
)

# The lines each script prints, one number captured per figure.
EMBEDDED_LINES = {
    "enqueue": rf"^enqueue:\s+{NUMBER} service calls/s",
    "drain": rf"^drain:\s+{NUMBER} tasks/s",
    "rss": rf"^peak RSS:\s+{NUMBER} MiB",
}
LATENCY_LINES = {
    "p50": rf"^latency:\s+p50\s+{NUMBER} ms",
    "p99": rf"^latency:.*\bp99\s+{NUMBER} ms",
}
SPLIT_LINES = {
    "publish": rf"^relay only:\s+{NUMBER} events/s",
    "consume": rf"^consume only:\s+{NUMBER} tasks/s",
}
HANDWRITTEN_LINES = {
    "publish": rf"^hand-written: produce {NUMBER}/s",
    "consume": rf"^hand-written: .*\bdrain {NUMBER} tasks/s",
    "rss": rf"^peak RSS:\s+{NUMBER} MiB",
}


class UnreadableOutput(Exception):
    """A contender's output lacks a figure its parser expects."""


def line_parser(patterns: dict[str, str]) -> Parser:
    """A parser requiring every pattern's line; each pattern captures one number."""
    compiled = {key: re.compile(pattern, re.MULTILINE) for key, pattern in patterns.items()}

    def parse(output: str) -> dict[str, float]:
        figures: dict[str, float] = {}
        for key, pattern in compiled.items():
            match = pattern.search(output)
            if match is None:
                raise UnreadableOutput(f"no {key!r} figure")
            figures[key] = float(match.group(1).replace(",", ""))
        return figures

    return parse


def script(name: str, *args: str) -> list[str]:
    """The command line running ``bench/<name>`` with this interpreter."""
    return [sys.executable, str(BENCH / name), *args]


def optional(flag: str, value: object) -> list[str]:
    """``[flag, value]`` when the value was given, else nothing (the script's default)."""
    return [] if value is None else [flag, str(value)]


def embedded_contenders(args: argparse.Namespace) -> list[Contender]:
    """Ours on SQLite + embedded log against Huey and Dramatiq doing the same work."""
    tasks = optional("--tasks", args.tasks)
    ours = script("roundtrip.py", *tasks, *optional("--seconds", args.seconds))
    return [
        Contender("ours", ours, line_parser(EMBEDDED_LINES | LATENCY_LINES)),
        Contender("huey", script("baseline_huey.py", *tasks), line_parser(EMBEDDED_LINES)),
        Contender("dramatiq", script("baseline_dramatiq.py", *tasks), line_parser(EMBEDDED_LINES)),
    ]


def scale_contenders(args: argparse.Namespace) -> list[Contender]:
    """Ours on Kafka + PostgreSQL against the batched hand-written consumer."""
    common = optional("--tasks", args.tasks) + optional("--database-url", args.database_url)
    seconds = optional("--seconds", args.seconds)
    ours = script("roundtrip.py", "--profile", "scale", "--baseline", "none", *common, *seconds)
    hand = script("handwritten_kafka.py", "--mode", "batched", *common)
    patterns = EMBEDDED_LINES | LATENCY_LINES | SPLIT_LINES
    return [
        Contender("ours", ours, line_parser(patterns)),
        Contender("hand-written", hand, line_parser(HANDWRITTEN_LINES)),
    ]


PROFILES: dict[str, Callable[[argparse.Namespace], list[Contender]]] = {
    "embedded": embedded_contenders,
    "scale": scale_contenders,
}


def last_line(text: str) -> str:
    """The last non-blank line of ``text``, shortened for a one-line error."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:200] if lines else "(no output)"


def run_bounded(argv: list[str], timeout_s: float) -> subprocess.CompletedProcess[str] | None:
    """Run ``argv`` capturing its output; None when it ran past ``timeout_s``.

    The child leads a process group of its own, stopped as a whole on timeout or Ctrl-C, so a
    broker it started (Tansu) does not outlive it.
    """
    proc = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, process_group=0
    )
    try:
        stdout, stderr = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        stop_group(proc)
        return None
    except BaseException:
        stop_group(proc)
        raise
    return subprocess.CompletedProcess(argv, proc.returncode, stdout, stderr)


def stop_group(proc: subprocess.Popen[str]) -> None:
    """SIGTERM the child's process group, then SIGKILL what is left after a grace period."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.communicate(timeout=GRACE_S)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()


def measure(contender: Contender, timeout_s: float) -> tuple[dict[str, float], float]:
    """Run the contender once; its figures and the seconds it took. Exits on any failure."""
    rerun = " ".join(["python", *contender.argv[1:]])
    started = time.monotonic()
    done = run_bounded(contender.argv, timeout_s)
    if done is None:
        sys.exit(f"error: {contender.name} ran past --timeout {timeout_s:g} s ({rerun})")
    took = time.monotonic() - started
    if done.returncode != 0:
        sys.exit(
            f"error: {contender.name} exited {done.returncode}: "
            f"{last_line(done.stderr or done.stdout)} ({rerun})"
        )
    try:
        return contender.parse(done.stdout), took
    except UnreadableOutput as missing:
        sys.exit(
            f"error: {contender.name} printed {missing}; last line: "
            f"{last_line(done.stdout)} ({rerun})"
        )


def show(value: float | None) -> str:
    """A figure for the table: thousands grouped, one decimal below 100, a dash when absent."""
    if value is None:
        return "—"
    return f"{value:,.0f}" if abs(value) >= 100 or value.is_integer() else f"{value:.1f}"


def summary(figures: dict[str, float]) -> str:
    """One run's figures on one line."""
    return "  ".join(f"{key} {show(value)}" for key, value in figures.items())


def run_rounds(
    contenders: Sequence[Contender], rounds: int, timeout_s: float
) -> dict[str, list[dict[str, float]]]:
    """Every contender once per round, in order; each one's figures, round by round."""
    runs: dict[str, list[dict[str, float]]] = {c.name: [] for c in contenders}
    for round_no in range(1, rounds + 1):
        for contender in contenders:
            figures, took = measure(contender, timeout_s)
            runs[contender.name].append(figures)
            print(
                f"round {round_no}/{rounds}  {contender.name:<12} {took:5.0f} s  "
                f"{summary(figures)}",
                flush=True,
            )
    return runs


def median(runs: list[dict[str, float]], key: str) -> float | None:
    """The median of one figure over the rounds; None when the contender never printed it."""
    values = [figures[key] for figures in runs if key in figures]
    return statistics.median(values) if values else None


def table(runs: dict[str, list[dict[str, float]]]) -> list[str]:
    """A Markdown table: each figure's median per contender and ours / each baseline."""
    ours, *baselines = runs
    header = ["figure (median)", ours]
    for name in baselines:
        header += [name, f"{ours} / {name}"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for figure in FIGURES:
        medians = {name: median(r, figure.key) for name, r in runs.items()}
        if all(value is None for value in medians.values()):
            continue
        mine = medians[ours]
        label = figure.label + (", lower is better" if figure.lower_is_better else "")
        cells = [label, show(mine)]
        for name in baselines:
            theirs = medians[name]
            ratio = f"{mine / theirs:.2f}×" if mine is not None and theirs else "—"
            cells += [show(theirs), ratio]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def machine_load() -> str:
    """Load averages beside the figures: a busy machine makes them indicative only."""
    one, five, fifteen = os.getloadavg()
    return f"load {one:.2f} / {five:.2f} / {fifteen:.2f} on {os.cpu_count()} cores"


def parse() -> argparse.Namespace:
    """The command line; --tasks and --seconds stay None unless given (each script's default)."""
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--profile",
        choices=sorted(PROFILES),
        default="embedded",
        help="embedded: ours vs Huey and Dramatiq; scale: ours vs hand-written Kafka",
    )
    ap.add_argument("--rounds", type=int, default=3, help="runs of each contender (default 3)")
    ap.add_argument("--tasks", type=int, default=None, help="passed to every contender")
    ap.add_argument("--seconds", type=float, default=None, help="ours: length of the latency phase")
    ap.add_argument(
        "--database-url", default=None, help="scale: PostgreSQL for both (default: the local one)"
    )
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds per run, at most")
    args = ap.parse_args()
    if args.rounds < 1:
        ap.error("--rounds must be at least 1")
    return args


def exit_on_sigterm(signum: int, frame: object) -> None:
    """SIGTERM (make, timeout, CI) unwinds like Ctrl-C, so the running child is stopped too."""
    sys.exit(f"error: stopped by signal {signum}")


def main() -> None:
    args = parse()
    signal.signal(signal.SIGTERM, exit_on_sigterm)
    contenders = PROFILES[args.profile](args)
    print(f"{args.profile} profile, {args.rounds} rounds; {machine_load()}", flush=True)
    runs = run_rounds(contenders, args.rounds, args.timeout)
    print(f"\nafter the rounds: {machine_load()}\n")
    print("\n".join(table(runs)))


if __name__ == "__main__":
    main()
