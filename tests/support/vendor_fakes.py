"""Loopback fakes of Replicate, fal and Runway serving recorded responses.

One :class:`VendorFake` per vendor: a ``ThreadingHTTPServer`` in a thread whose routes
(``tests/support/vendor_routes.py``) answer with the JSON under
``tests/fixtures/vendors/<vendor>/``, placeholders filled. A job walks its vendor's recorded
sequence on the fake's clock (one step per ``step_s``; the running step lasts
``render_seconds`` longer when that fault is set). Outputs are real H.264 MP4s rendered once
per (width, height, duration) with FFmpeg. Faults, as the contract suite names them:
``rate_limit_next`` (+``retry_after_s``), ``server_error_next``, ``accept_then_timeout_next``
(+``hang_s``), ``expire_outputs``, ``render_seconds``.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from string import Template
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx

from aigc_hub.media import tools as media_tools
from aigc_hub.reliability import webhooks

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "vendors"
DEFAULT_FAULTS: dict[str, Any] = {
    "rate_limit_next": 0,
    "retry_after_s": 1,
    "server_error_next": 0,
    "accept_then_timeout_next": 0,
    "hang_s": 0.0,
    "expire_outputs": False,
    "render_seconds": 0.0,
}


def fill(template: Any, values: dict[str, Any]) -> Any:
    """The fixture with ``${name}`` placeholders filled; a whole-string one keeps its type."""
    if isinstance(template, str):
        if template.startswith("${") and template.endswith("}") and template[2:-1] in values:
            return values[template[2:-1]]
        return Template(template).safe_substitute(values)
    if isinstance(template, list):
        return [fill(t, values) for t in template]
    if isinstance(template, dict):
        return {k: fill(v, values) for k, v in template.items()}
    return template


def iso(epoch_s: float) -> str:
    return dt.datetime.fromtimestamp(epoch_s, dt.UTC).isoformat(timespec="milliseconds")[:-6] + "Z"


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: Any


@dataclass
class Reply:
    status: int
    body: Any = None  # JSON-able, or bytes for a file
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class FakeJob:
    """One job at the fake vendor: its input, size and place in the recorded sequence."""

    id: str
    model: str
    body: dict[str, Any]
    size: tuple[int, int, int]  # width, height, seconds
    created: float = field(default_factory=time.time)
    hold_s: float = 0.0
    canceled_at: float | None = None
    webhook: str | None = None
    request_key: str | None = None
    last_sent: str | None = None  # the state of the last webhook sent


class VendorFake:
    """A recorded vendor on loopback; ``route`` is the vendor's request → reply function."""

    def __init__(
        self,
        vendor: str,
        route: Callable[[VendorFake, Request], Reply],
        tmp: Path,
        *,
        sequence: tuple[str, ...],
        canceled: str,
        step_s: float = 0.1,
        secret: str = "",
    ) -> None:
        self.vendor, self.route, self.tmp = vendor, route, tmp
        self.sequence, self.canceled, self.step_s, self.secret = sequence, canceled, step_s, secret
        self.jobs: dict[str, FakeJob] = {}
        self.lock = threading.RLock()
        self.switches = dict(DEFAULT_FAULTS)
        self.base_url = ""

    # -- test controls ---------------------------------------------------------------------

    def inject(self, **faults: Any) -> dict[str, Any]:
        with self.lock:
            self.switches.update(faults)
            return dict(self.switches)

    def reset(self) -> None:
        with self.lock:
            self.switches = dict(DEFAULT_FAULTS)

    def count_jobs(self, request_key: str) -> int:
        with self.lock:
            return sum(1 for j in self.jobs.values() if j.request_key == request_key)

    def take(self, switch: str) -> bool:
        """Use up one of a ``*_next`` counter; True when it was set."""
        with self.lock:
            if self.switches[switch] > 0:
                self.switches[switch] -= 1
                return True
            return False

    # -- jobs ------------------------------------------------------------------------------

    def fixture(self, name: str, **values: Any) -> Any:
        data = json.loads((FIXTURES / self.vendor / f"{name}.json").read_text())
        return fill(data, {"base": self.base_url, **values})

    def add(self, job: FakeJob) -> FakeJob:
        job.hold_s = float(self.switches["render_seconds"])
        with self.lock:
            self.jobs[job.id] = job
        return job

    def step(self, job: FakeJob, now: float | None = None) -> str:
        """The job's recorded state now: one step per ``step_s``, the running one held longer."""
        now = time.time() if now is None else now
        if job.canceled_at is not None:
            return self.canceled
        elapsed, index = now - job.created, 0
        for index in range(len(self.sequence) - 1):
            elapsed -= self.step_s + (job.hold_s if index == 1 else 0.0)
            if elapsed < 0:
                return self.sequence[index]
        return self.sequence[-1]

    def times(self, job: FakeJob) -> dict[str, str]:
        started = job.created + self.step_s
        ended = job.canceled_at or started + self.step_s + job.hold_s
        return {
            "created_at": iso(job.created),
            "started_at": iso(started),
            "completed_at": iso(ended),
        }

    def output_url(self, job: FakeJob) -> str:
        return f"{self.base_url}/outputs/{job.id}.mp4"

    def render(self, size: tuple[int, int, int]) -> Path:
        """The MP4 for a frame size and length, rendered on first use."""
        width, height, seconds = size
        out = self.tmp / f"clip-{width}x{height}-{seconds}s.mp4"
        with self.lock:
            if not out.exists():
                source = f"testsrc2=size={width}x{height}:rate=25"
                ffmpeg = media_tools.executable("ffmpeg")
                subprocess.run(
                    [ffmpeg, "-v", "error", "-y", "-f", "lavfi", "-i", source, "-t", str(seconds),
                     "-pix_fmt", "yuv420p", "-c:v", "libx264", "-preset", "ultrafast",
                     "-movflags", "+faststart", str(out)],
                    check=True, timeout=60,
                )  # fmt: skip
        return out

    def serve_output(self, job_id: str) -> Reply:
        with self.lock:
            job = self.jobs.get(job_id)
        if job is None:
            return Reply(404, b"not found", {"content-type": "text/plain"})
        if self.switches["expire_outputs"]:
            return Reply(410, b"expired", {"content-type": "text/plain"})
        return Reply(200, self.render(job.size).read_bytes(), {"content-type": "video/mp4"})

    # -- webhooks (Replicate only: sent from a ticker thread as jobs move) -----------------

    def send_webhooks(self, body_of: Callable[[FakeJob, str], Any]) -> None:
        with self.lock:
            pending = [j for j in self.jobs.values() if j.webhook]
        for job in pending:
            state = self.step(job)
            if state == job.last_sent:
                continue
            # one webhook per state seen, as Replicate's start/logs/completed events
            job.last_sent = state
            body = json.dumps(body_of(job, state)).encode()
            headers = webhooks.sign_headers(
                self.secret, f"msg_{job.id}_{state}", int(time.time()), body
            )
            with contextlib.suppress(httpx.HTTPError):
                httpx.post(str(job.webhook), content=body, headers=headers, timeout=2.0)


def new_id() -> str:
    return uuid.uuid4().hex[:26]


@contextlib.contextmanager
def running(fake: VendorFake, tick: Callable[[], None] | None = None) -> Iterator[VendorFake]:
    """Serve ``fake`` on a free loopback port (and run ``tick`` every 20 ms) until exit."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _handle(self) -> None:
            parts = urlsplit(self.path)
            length = int(self.headers.get("content-length") or 0)
            raw = self.rfile.read(length) if length else b""
            body = json.loads(raw) if raw else None
            headers = {k.lower(): v for k, v in self.headers.items()}
            reply = fake.route(fake, Request(self.command, parts.path, parse_qs(parts.query),
                                             headers, body))  # fmt: skip
            data = reply.body if isinstance(reply.body, bytes) else b""
            if reply.body is not None and not isinstance(reply.body, bytes):
                data = json.dumps(reply.body).encode()
                reply.headers.setdefault("content-type", "application/json")
            # a client that gave up (timeout, max_bytes) closes first: not the fake's error
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                self.send_response(reply.status)
                for name, value in reply.headers.items():
                    self.send_header(name, value)
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        do_GET = do_POST = do_PUT = do_DELETE = _handle

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    fake.base_url = f"http://127.0.0.1:{server.server_address[1]}"
    stop = threading.Event()
    threads = [threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})]
    if tick is not None:

        def ticker() -> None:
            while not stop.wait(0.02):
                tick()

        threads.append(threading.Thread(target=ticker))
    for thread in threads:
        thread.start()
    try:
        yield fake
    finally:
        stop.set()
        server.shutdown()
        server.server_close()
        for thread in threads:
            thread.join(5)
