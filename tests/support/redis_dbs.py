"""Private Redis databases for tests whose hubs hold leases and timers in Redis.

Two hubs sharing a database would share their scanner leader leases, so a test that starts
one gets a database of its own, emptied first. Tests run in parallel workers (pytest-xdist),
so each worker owns its own band of databases: worker ``gwN`` gets ``1 + N * PER_WORKER`` to
``N * PER_WORKER + PER_WORKER``; database 0 stays for tests that use key prefixes.
"""

from __future__ import annotations

import os

from tests.conftest import service_missing

REDIS_URL = os.environ.get("AIGC_HUB_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
#: What a test needs a private database for; each purpose has its own in every worker.
PURPOSES = ("scanner-leases", "scale-hub", "avcc-stack")
PER_WORKER = len(PURPOSES)
#: Redis's default ``databases 16``.
DATABASES = 16


def _worker_number() -> int:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    return int(worker.removeprefix("gw"))


def private_redis_url(purpose: str) -> str:
    """A Redis URL on this worker's database for ``purpose``, emptied now."""
    from redis import Redis

    index = 1 + _worker_number() * PER_WORKER + PURPOSES.index(purpose)
    if index >= DATABASES:
        raise RuntimeError(
            f"Redis database {index} does not exist: run at most "
            f"{(DATABASES - 1) // PER_WORKER} test workers"
        )
    url = f"{REDIS_URL.rsplit('/', 1)[0]}/{index}"
    try:
        with Redis.from_url(url) as client:
            client.flushdb()
    except Exception as exc:
        service_missing("Redis", f"{url}: {exc.__class__.__name__}")
    return url
