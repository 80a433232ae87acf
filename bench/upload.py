"""Upload throughput through presigned multipart parts: local blobs (the parts go through the
hub's ``/blobs`` route) and S3 on SeaweedFS (straight to the store; the API only signs).

One ``aigc-hub api`` process per engine on a scratch data dir (SQLite); the client runs here,
reading each part from a file of random bytes and PUTting ``--parallel`` parts at once, as
``tests/support/uploads.py`` does for the tests. Timed: from the first part to the last
ETag (start and complete are excluded: they are one request each). Each figure is the best
of ``--repeat`` runs. Loopback only.

    python bench/upload.py                          # 200 MiB, 8 MiB parts, 1/4/8 in parallel
    python bench/upload.py --engines s3 --size-mib 500 --parallel 16
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the tests' upload client is the one measured

from tests.support import uploads  # noqa: E402
from tests.support.served import free_port  # noqa: E402

from aigc_hub import tenancy  # noqa: E402
from aigc_hub.blobs.s3 import S3BlobStore  # noqa: E402
from aigc_hub.bootstrap import Hub  # noqa: E402
from aigc_hub.hub_config import HubConfig  # noqa: E402
from aigc_hub.messaging.memory import MemoryBroker  # noqa: E402
from aigc_hub.store import engine as store_engine  # noqa: E402
from aigc_hub.store import migrate  # noqa: E402
from aigc_hub.testing.seaweed import SeaweedServer  # noqa: E402

MiB = 1 << 20
BUCKET = "aigc-hub-bench"


def _args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--engines", default="local,s3", help="local, s3, or both (comma)")
    parser.add_argument("--size-mib", type=int, default=200, help="file size (MiB)")
    parser.add_argument("--part-mib", type=int, default=8, help="part size (MiB, >= 5)")
    parser.add_argument("--parallel", default="1,4,8", help="parts in flight, comma separated")
    parser.add_argument("--repeat", type=int, default=2, help="runs per setting (best kept)")
    return parser.parse_args(argv)


@contextlib.contextmanager
def _api(data: Path, env_extra: dict[str, str]) -> Iterator[str]:
    port = free_port()
    env = {
        **os.environ,
        "AIGC_HUB_DATA_DIR": str(data),
        "AIGC_HUB_PIPELINES": "generation",
        "AIGC_HUB_GEN_RUN_LOCAL_PROVIDER": "false",
        "AIGC_HUB_API_RATE_PER_S": "10000",
        "AIGC_HUB_API_BURST": "10000",
        "AIGC_HUB_LOG_LEVEL": "WARNING",
        "PYTHONPATH": str(ROOT / "src"),
        **env_extra,
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "aigc_hub", "api", "--port", str(port)],
        cwd=data,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None:
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(f"{base}/readyz", timeout=2, trust_env=False).is_success:
                    break
            time.sleep(0.2)
        else:
            raise RuntimeError("aigc-hub api did not start")
        yield base
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=30)


async def _key(url: str) -> str:
    hub = Hub(HubConfig(engine=store_engine.create_engine(url), broker=MemoryBroker()))
    try:
        _tenant, key = await tenancy.create_tenant(hub.engine, "bench")
    finally:
        await hub.close()
    return key


async def _runs(
    base: str, key: str, path: Path, part: int, parallels: list[int], repeat: int
) -> dict[int, float]:
    best: dict[int, float] = {}
    headers = {"Authorization": f"Bearer {key}"}
    async with httpx.AsyncClient(
        base_url=base, headers=headers, trust_env=False, timeout=120
    ) as api:
        sha = uploads.sha256_of(path)
        size_mib = uploads.size_of(path) / MiB
        for parallel in parallels:
            for _ in range(repeat):
                done = await uploads.upload(
                    api, path, part_size=part, parallel=parallel, sha256=sha
                )
                seconds = done.seconds
                best[parallel] = max(best.get(parallel, 0.0), size_mib / seconds)
                # not completed: scratch uploads, dropped with the data dir
    return best


def _engine(name: str, work: Path, args: argparse.Namespace, path: Path) -> dict[int, float]:
    data = work / name
    data.mkdir()
    url = f"sqlite:///{data / 'hub.db'}"
    migrate.upgrade(url)
    key = asyncio.run(_key(url))
    limits = {
        "AIGC_HUB_GEN_ASSET_MAX_COUNT": "100000",
        "AIGC_HUB_GEN_ASSET_MAX_TOTAL_BYTES": str(1 << 50),
    }
    parallels = [int(p) for p in args.parallel.split(",")]
    with contextlib.ExitStack() as stack:
        env = dict(limits)
        if name == "s3":
            s3 = stack.enter_context(SeaweedServer(work / "weed"))
            store = S3BlobStore(BUCKET, endpoint=s3.endpoint, access_key=s3.access_key,
                                secret_key=s3.secret_key)  # fmt: skip
            asyncio.run(store.ensure_bucket())
            env |= {
                "AIGC_HUB_BLOB_URL": f"s3://{BUCKET}",
                "AIGC_HUB_S3_ENDPOINT": s3.endpoint,
                "AIGC_HUB_S3_ACCESS_KEY": s3.access_key,
                "AIGC_HUB_S3_SECRET_KEY": s3.secret_key,
            }
        base = stack.enter_context(_api(data, env))
        return asyncio.run(_runs(base, key, path, args.part_mib * MiB, parallels, args.repeat))


def main(argv: list[str] | None = None) -> None:
    args = _args(argv)
    with tempfile.TemporaryDirectory(prefix="aigc-bench-upload-") as tmp:
        work = Path(tmp)
        path = work / "payload.bin"
        with path.open("wb") as f:
            for _ in range(args.size_mib):
                f.write(os.urandom(MiB))
        print(f"{args.size_mib} MiB in {args.part_mib} MiB parts, best of {args.repeat}")
        for name in args.engines.split(","):
            for parallel, rate in _engine(name.strip(), work, args, path).items():
                print(f"{name:5s} parallel={parallel:<3d} {rate:8.1f} MiB/s")


if __name__ == "__main__":
    main()
