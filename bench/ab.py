"""Run one benchmark script from two checkouts of the repo, in alternating rounds.

Before/after comparisons on a shared 2-core machine drift with whatever else runs; running
A, B, A, B… in one go spreads that drift over both sides. Each checkout runs its own copy of
the script with its own virtualenv (``<checkout>/.venv``), so the code measured is that
checkout's. The figures are printed as each script prints them, each block labelled.

    git worktree add ../before <commit> && (cd ../before && python3 -m venv .venv \\
        && .venv/bin/pip install -e '.[dev]')
    python bench/ab.py --before ../before --after . --rounds 2 -- generation.py --tasks 500
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path


def run(checkout: Path, script: str, args: list[str], timeout_s: float) -> tuple[int, str, float]:
    """Run ``checkout``'s ``bench/<script>`` with its own interpreter; exit code, output, s."""
    python = checkout / ".venv" / "bin" / "python"
    if not python.exists():
        raise SystemExit(f"error: {python} not found: create {checkout}/.venv first (see --help)")
    started = time.monotonic()
    done = subprocess.run(
        [str(python), str(checkout / "bench" / script), *args],
        cwd=checkout,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
    return done.returncode, done.stdout + done.stderr, time.monotonic() - started


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        epilog="Everything after -- is the script and its arguments.",
    )
    ap.add_argument("--before", type=Path, required=True, help="checkout measured first")
    ap.add_argument("--after", type=Path, required=True, help="checkout measured second")
    ap.add_argument("--rounds", type=int, default=2, help="before/after pairs (default 2)")
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds per run, at most")
    ap.add_argument("command", nargs=argparse.REMAINDER, help="-- script.py [args…]")
    ns = ap.parse_args()
    command = [c for c in ns.command if c != "--"]
    if not command:
        ap.error("name the script after --, e.g. -- roundtrip.py --tasks 5000")
    script, args = command[0], command[1:]
    for round_no in range(1, ns.rounds + 1):
        for label, checkout in (("before", ns.before), ("after", ns.after)):
            code, output, took = run(checkout.resolve(), script, args, ns.timeout)
            print(
                f"===== round {round_no} · {label} · {script} {' '.join(args)} "
                f"· exit {code} · {took:.0f} s",
                flush=True,
            )
            print(output.rstrip(), flush=True)
            if code != 0:
                sys.exit(f"error: the {label} run exited {code}; see its output above")


if __name__ == "__main__":
    main()
