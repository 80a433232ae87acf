"""A real ``aigc-hub provider serve --faults`` process and a loopback webhook receiver."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx

from aigc_hub.media import tools as media_tools
from aigc_hub.providers.local.faults import Faults
from aigc_hub.reliability import webhooks

SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"


def require_ffmpeg() -> None:
    """Skip (fail under CI) when FFmpeg is missing: neither the system's nor the wheel's."""
    from tests.conftest import service_missing

    for problem in media_tools.missing():
        service_missing(problem.name, str(problem))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def wait_until(check: Callable[[], Any], timeout_s: float = 15.0, what: str = "condition") -> Any:
    """Poll ``check`` (bounded) until it returns something truthy; that value is returned."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


@dataclass
class ProviderServer:
    """A running provider: where it is, its webhook secret, and its fault/stat routes."""

    base_url: str
    secret: str
    proc: subprocess.Popen[bytes]
    data_dir: Path

    def http(self) -> httpx.Client:
        return httpx.Client(base_url=self.base_url, trust_env=False, timeout=5.0)

    def faults(self, **switches: Any) -> dict[str, Any]:
        with self.http() as client:
            response = client.post("/_faults", json=switches)
            response.raise_for_status()
            result: dict[str, Any] = response.json()
            return result

    def reset_faults(self) -> None:
        self.faults(**Faults().model_dump())

    def stats(self) -> dict[str, Any]:
        with self.http() as client:
            result: dict[str, Any] = client.get("/_stats").raise_for_status().json()
            return result


@contextlib.contextmanager
def provider_server(data_dir: Path, *extra: str) -> Iterator[ProviderServer]:
    """Start ``python -m aigc_hub provider serve --faults`` on a free port; stop it after."""
    port = free_port()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    args = [sys.executable, "-m", "aigc_hub", "provider", "serve", "--faults"]
    args += ["--port", str(port), "--data-dir", str(data_dir), "--webhook-secret", SECRET]
    log = open(data_dir.parent / f"provider-{port}.log", "wb")  # noqa: SIM115
    proc = subprocess.Popen([*args, *extra], env=env, stdout=log, stderr=subprocess.STDOUT)
    server = ProviderServer(f"http://127.0.0.1:{port}", SECRET, proc, data_dir)
    try:

        def healthy() -> bool:
            if proc.poll() is not None:
                raise AssertionError(f"provider exited: {proc.returncode}")
            try:
                with server.http() as client:
                    return client.get("/healthz").status_code == 200
            except httpx.HTTPError:
                return False

        wait_until(healthy, 20.0, "the provider to listen")
        yield server
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
        log.close()


@dataclass
class Received:
    headers: dict[str, str]
    body: bytes

    @property
    def event(self) -> dict[str, Any]:
        result: dict[str, Any] = json.loads(self.body)
        return result

    @property
    def job(self) -> dict[str, Any]:
        job: dict[str, Any] = self.event["data"]
        return job


def local_job(received: Received) -> dict[str, Any]:
    """The job in a local provider webhook (``{"type": "job.updated", "data": job}``)."""
    return received.job


FINAL_STATUSES = frozenset({"succeeded", "failed", "canceled"})


@dataclass
class WebhookReceiver:
    """Records every POST; answers ``fail_first`` of them with 500, the rest with 204.

    ``job_of`` finds the job (with ``id`` and a lower-case ``status``) in a delivery: the
    local provider wraps it in an event, Replicate's body is the prediction itself."""

    url: str = ""
    job_of: Callable[[Received], dict[str, Any]] = local_job
    received: list[Received] = field(default_factory=list)
    fail_first: int = 0
    requests: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def for_job(self, job_id: str) -> list[Received]:
        with self.lock:
            return [r for r in self.received if self.job_of(r).get("id") == job_id]

    def final_for(self, job_id: str, timeout_s: float = 15.0) -> Received:
        def final() -> Received | None:
            done = [r for r in self.for_job(job_id) if self.job_of(r)["status"] in FINAL_STATUSES]
            return done[0] if done else None

        found: Received = wait_until(final, timeout_s, f"a final webhook for {job_id}")
        return found

    def verify(self, received: Received, secret: str = SECRET) -> webhooks.VerifiedWebhook:
        return webhooks.verify([secret], received.headers, received.body, time.time())


@contextlib.contextmanager
def webhook_receiver(
    job_of: Callable[[Received], dict[str, Any]] = local_job,
) -> Iterator[WebhookReceiver]:
    receiver = WebhookReceiver(job_of=job_of)

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("content-length", "0"))
            body = self.rfile.read(length)
            with receiver.lock:
                receiver.requests += 1
                failing = receiver.requests <= receiver.fail_first
                if not failing:
                    headers = {k.lower(): v for k, v in self.headers.items()}
                    receiver.received.append(Received(headers, body))
            self.send_response(500 if failing else 204)
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    receiver.url = f"http://127.0.0.1:{server.server_address[1]}/hooks"
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield receiver
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def ffprobe(path: Path) -> dict[str, Any]:
    """codec, size and duration of the first video stream."""
    entries = "stream=codec_name,width,height,duration,pix_fmt"
    ffprobe = media_tools.executable("ffprobe")
    args = [ffprobe, "-v", "error", "-select_streams", "v:0", "-show_entries", entries]
    out = subprocess.run(
        [*args, "-of", "json", str(path)],
        capture_output=True,
        check=True,
        timeout=20,
    ).stdout
    stream: dict[str, Any] = json.loads(out)["streams"][0]
    return stream
