"""The blob contract: one suite, run unchanged on the local folder engine and on S3 (SeaweedFS).

Signed URLs are used the way clients use them: over HTTP (loopback only) against S3, and,
for the local engine, through the helpers the hub's API route is built on
(``read_signed`` / ``apply_signed_put``), with their typed errors mapped to the statuses the
route will answer (403 refused signature, 400 rejected body, 404 missing). Tests read
``store.features``, never the engine's class. Each test writes under its own tenant, so the
engines with a shared server need no clean-up between tests.

SeaweedFS starts once per session (``aigc_hub.testing.seaweed``); when it cannot, the S3
half skips locally and fails under CI=true.
"""

from __future__ import annotations

import asyncio
import calendar
import hashlib
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import pytest

from aigc_hub.blobs import keys
from aigc_hub.blobs.base import (
    BlobInfo,
    BlobNotFound,
    BlobStore,
    MultipartUploads,
    SignatureError,
    SignatureExpired,
    SignatureInvalid,
    UploadRejected,
)
from aigc_hub.blobs.local import LocalBlobStore, load_or_create_secret
from aigc_hub.core.clock import ManualClock
from aigc_hub.core.errors import ConfigurationError
from aigc_hub.testing.seaweed import S3Endpoint

BUCKET = "aigc-hub-contract"
SIGNATURE_PARAMS = ("sig", "X-Amz-Signature")
EXPIRY_PARAMS = ("exp", "X-Amz-Expires")
MiB = 1 << 20


class Store(BlobStore, MultipartUploads, Protocol):
    """Both protocols: every engine in this suite implements them."""


@dataclass(frozen=True)
class Response:
    """What a client saw: HTTP status, body, and the ETag header (part uploads need it)."""

    status: int
    body: bytes = b""
    etag: str | None = None


class Engine:
    """One engine under test plus the client side of its signed URLs."""

    store: Store

    async def http(
        self, method: str, url: str, body: bytes = b"", headers: dict[str, str] | None = None
    ) -> Response:
        """Send one request to a signed URL as a client would."""
        raise NotImplementedError

    async def wait_expired(self, url: str) -> None:
        """Return once ``url`` is past its expiry for the engine."""
        raise NotImplementedError

    async def aclose(self) -> None:
        """Release the store."""


class LocalEngine(Engine):
    """Files in tmp_path, a ManualClock, and the API route's helpers instead of HTTP."""

    def __init__(self, root: Path) -> None:
        self.clock = ManualClock()
        self.local = LocalBlobStore(
            root, secret="contract-secret-0123456789", clock=self.clock, fsync=False
        )
        self.store = self.local

    async def http(
        self, method: str, url: str, body: bytes = b"", headers: dict[str, str] | None = None
    ) -> Response:
        try:
            if method == "GET":
                return Response(200, await self.local.read_signed(url))
            return Response(200, etag=await self.local.apply_signed_put(url, body, headers))
        except SignatureError:
            return Response(403)
        except UploadRejected:
            return Response(400)
        except BlobNotFound:
            return Response(404)

    async def wait_expired(self, url: str) -> None:
        exp = int(dict(parse_qsl(urlsplit(url).query))["exp"])
        await self.clock.advance(exp - self.clock.now_ms() / 1000)


class S3Engine(Engine):
    """The S3 engine on the session's SeaweedFS; signed URLs go over real HTTP."""

    _direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    def __init__(self, s3: S3Endpoint) -> None:
        from aigc_hub.blobs.s3 import S3BlobStore

        self.s3 = S3BlobStore.from_url(
            f"s3://{BUCKET}",
            endpoint=s3.endpoint,
            access_key=s3.access_key,
            secret_key=s3.secret_key,
            region=s3.region,
        )
        self.store = self.s3

    def _send(self, request: urllib.request.Request) -> Response:
        assert urlsplit(request.full_url).hostname == "127.0.0.1", "loopback only"
        try:
            with self._direct.open(request, timeout=30) as r:
                return Response(r.status, r.read(), r.headers.get("ETag"))
        except urllib.error.HTTPError as exc:
            with exc:
                return Response(exc.code, exc.read())

    async def http(
        self, method: str, url: str, body: bytes = b"", headers: dict[str, str] | None = None
    ) -> Response:
        data = body if method == "PUT" else None
        request = urllib.request.Request(url, data=data, method=method, headers=headers or {})
        return await asyncio.to_thread(self._send, request)

    async def wait_expired(self, url: str) -> None:
        query = dict(parse_qsl(urlsplit(url).query))
        signed_at = calendar.timegm(time.strptime(query["X-Amz-Date"], "%Y%m%dT%H%M%SZ"))
        await asyncio.sleep(max(0.0, signed_at + int(query["X-Amz-Expires"]) + 0.3 - time.time()))

    async def aclose(self) -> None:
        await self.s3.close()


@pytest.fixture(params=["local", "s3"])
async def engine(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Engine]:
    """The same contract test once per engine."""
    if request.param == "local":
        eng: Engine = LocalEngine(tmp_path / "blobs")
    else:
        s3 = S3Engine(request.getfixturevalue("seaweed"))
        await s3.s3.ensure_bucket()
        eng = s3
    yield eng
    await eng.aclose()


@pytest.fixture
def tenant() -> str:
    """A tenant no other test writes under."""
    return uuid.uuid4().hex


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def tamper(url: str, *, param: tuple[str, ...] = (), path: str | None = None) -> str:
    """``url`` with one signed thing changed: a query parameter's last character, or the path."""
    parts = urlsplit(url)
    query = []
    for name, value in parse_qsl(parts.query):
        if name in param:
            value = value[:-1] + ("0" if value[-1] != "0" else "1")
        query.append((name, value))
    return urlunsplit(parts._replace(path=path or parts.path, query=urlencode(query)))


# -- objects ------------------------------------------------------------------------------


async def test_put_get_head_delete_round_trip(engine: Engine, tenant: str) -> None:
    store, data = engine.store, b"frame data \x00\xff" * 1000
    key = keys.object_key(tenant, "asset", uuid.uuid4(), "clip.mp4")

    info = await store.put(key, data, "video/mp4")
    assert info == BlobInfo(key, len(data), info.etag, "video/mp4", sha(data))
    assert await store.head(key) == info
    assert await store.get(key) == data
    chunks = [c async for c in store.stream(key, chunk_size=4096)]
    assert b"".join(chunks) == data and max(map(len, chunks)) == 4096

    await store.delete(key)
    assert await store.head(key) is None
    with pytest.raises(BlobNotFound):
        await store.get(key)
    await store.delete(key)  # absent: still fine


async def test_stream_reads_only_the_byte_range_asked(engine: Engine, tenant: str) -> None:
    store, data = engine.store, bytes(range(256)) * 40
    key = keys.object_key(tenant, "asset", uuid.uuid4(), "ranged.bin")
    await store.put(key, data, "application/x-test")

    async def read(start: int = 0, end: int | None = None, chunk: int = 1000) -> bytes:
        return b"".join([c async for c in store.stream(key, chunk, start=start, end=end)])

    assert await read(0, 64) == data[:64]
    assert await read(5000, 7001, chunk=300) == data[5000:7001]
    assert await read(10_000) == data[10_000:]
    assert await read(17, 17) == b""
    assert await read(len(data) + 10) == b""  # past the end: nothing, not an error
    assert await read(len(data) - 3, len(data) + 50) == data[-3:]
    with pytest.raises(ValueError):
        await read(10, 5)


async def test_streamed_put_records_size_and_sha256(engine: Engine, tenant: str) -> None:
    chunks = [bytes([i]) * 70_000 for i in range(5)]

    async def body() -> AsyncIterator[bytes]:
        for chunk in chunks:
            yield chunk

    key = keys.object_key(tenant, "render", "r1", "out.bin")
    info = await engine.store.put(key, body(), "application/x-test")
    whole = b"".join(chunks)
    assert (info.size, info.sha256) == (len(whole), sha(whole))
    head = await engine.store.head(key)
    assert head is not None and (head.size, head.sha256) == (len(whole), sha(whole))
    assert await engine.store.get(key) == whole


async def test_put_replaces_the_object(engine: Engine, tenant: str) -> None:
    key = keys.object_key(tenant, "asset", "a1", "v.bin")
    await engine.store.put(key, b"old", "application/x-test")
    info = await engine.store.put(key, b"newer", "application/x-test")
    assert await engine.store.head(key) == info
    assert await engine.store.get(key) == b"newer"


async def test_list_objects_gives_the_keys_under_a_prefix_in_order(
    engine: Engine, tenant: str
) -> None:
    store = engine.store
    prefix = f"t/{tenant}/asset/"
    made = [keys.object_key(tenant, "asset", f"a{i}", "v.bin") for i in (3, 1, 2)]
    other = keys.object_key(tenant, "render", "r1", "v.bin")
    for n, key in enumerate([*made, other]):
        await store.put(key, b"x" * (n + 1), "application/x-test")
    await store.delete(made[0])
    listed = [item async for item in store.list_objects(prefix)]
    assert [(item.key, item.size) for item in listed] == [(made[1], 2), (made[2], 3)]
    assert all(item.modified_ms > 0 for item in listed)
    assert [item async for item in store.list_objects(f"t/{tenant}/nothing/")] == []


async def test_missing_key_is_blob_not_found(engine: Engine, tenant: str) -> None:
    key = keys.object_key(tenant, "asset", "nope", "missing.bin")
    assert await engine.store.head(key) is None
    with pytest.raises(BlobNotFound):
        await engine.store.get(key)
    with pytest.raises(BlobNotFound):
        async for _ in engine.store.stream(key):
            pass


@pytest.mark.parametrize(
    "bad", ["../etc/passwd", "t/a/../../x", "/abs", "t//x", "t/.hidden", "t/a\\b", "t/ä"]
)
async def test_stores_refuse_unsafe_keys(engine: Engine, bad: str) -> None:
    with pytest.raises(ValueError):
        await engine.store.put(bad, b"x")
    with pytest.raises(ValueError):
        await engine.store.presign_get(bad, 60)


# -- presigned URLs -----------------------------------------------------------------------


async def test_presigned_put_then_presigned_get(engine: Engine, tenant: str) -> None:
    data = b"uploaded straight to storage" * 100
    key = keys.object_key(tenant, "asset", uuid.uuid4(), "upload.png")
    put = await engine.store.presign_put(key, 300, "image/png", size=len(data), sha256=sha(data))
    assert put.expires_at > 0

    assert (await engine.http("PUT", put.url, data, dict(put.headers))).status == 200
    head = await engine.store.head(key)
    assert head is not None
    assert (head.size, head.sha256, head.content_type) == (len(data), sha(data), "image/png")

    got = await engine.http("GET", await engine.store.presign_get(key, 300))
    assert (got.status, got.body) == (200, data)


async def test_presigned_put_refuses_a_body_it_was_not_signed_for(
    engine: Engine, tenant: str
) -> None:
    data = b"exactly this"
    key = keys.object_key(tenant, "asset", "a1", "doc.txt")
    sized = await engine.store.presign_put(key, 300, "text/plain", size=len(data))
    hashed = await engine.store.presign_put(key, 300, "text/plain", sha256=sha(data))

    assert (await engine.http("PUT", sized.url, data + b"!", dict(sized.headers))).status >= 400
    assert (
        await engine.http("PUT", hashed.url, b"exactly that", dict(hashed.headers))
    ).status >= 400
    html = {**sized.headers, "Content-Type": "text/html"}
    assert (await engine.http("PUT", sized.url, data, html)).status == 403
    assert await engine.store.head(key) is None
    # the same URLs take the body they were signed for
    assert (await engine.http("PUT", sized.url, data, dict(sized.headers))).status == 200
    assert (await engine.http("PUT", hashed.url, data, dict(hashed.headers))).status == 200
    assert await engine.store.get(key) == data


async def test_tampered_urls_are_refused(engine: Engine, tenant: str) -> None:
    mine = keys.object_key(tenant, "asset", "a1", "mine.bin")
    theirs = keys.object_key(tenant, "asset", "a2", "theirs.bin")
    await engine.store.put(mine, b"mine", "application/x-test")
    await engine.store.put(theirs, b"theirs", "application/x-test")
    url = await engine.store.presign_get(mine, 300)
    assert (await engine.http("GET", url)).body == b"mine"

    other_path = urlsplit(url).path.replace(mine, theirs)
    for forged in (
        tamper(url, param=SIGNATURE_PARAMS),
        tamper(url, param=EXPIRY_PARAMS),
        tamper(url, path=other_path),
    ):
        assert (await engine.http("GET", forged)).status == 403, forged
    # a GET grant does not allow a PUT
    assert (await engine.http("PUT", url, b"overwrite", {})).status == 403
    assert await engine.store.get(mine) == b"mine"


async def test_expired_urls_are_refused(engine: Engine, tenant: str) -> None:
    key = keys.object_key(tenant, "asset", "a1", "short.bin")
    await engine.store.put(key, b"brief", "application/x-test")
    # S3 signs with a whole-second X-Amz-Date: a URL for n s is good for n-1 to n s, so 3 s
    # leave a loaded machine 2 s to use it.
    get_url = await engine.store.presign_get(key, 3)
    put = await engine.store.presign_put(key, 3, "application/x-test")
    assert (await engine.http("GET", get_url)).status == 200

    await engine.wait_expired(get_url)
    await engine.wait_expired(put.url)
    assert (await engine.http("GET", get_url)).status == 403
    assert (await engine.http("PUT", put.url, b"late", dict(put.headers))).status == 403
    assert await engine.store.get(key) == b"brief"


# -- multipart ------------------------------------------------------------------------------


async def test_presigned_multipart_upload(engine: Engine, tenant: str) -> None:
    store = engine.store
    first = bytes(range(256)) * (store.features.min_part_size // 256)
    last = b"tail of the file"
    key = keys.object_key(tenant, "asset", uuid.uuid4(), "big.mov")
    upload_id = await store.create_multipart(key, "video/quicktime")

    etags = []
    for part_no, part in ((1, first), (2, last)):
        url = await store.presign_part(key, upload_id, part_no, 300)
        response = await engine.http("PUT", url, part)
        assert response.status == 200 and response.etag
        etags.append((part_no, response.etag))

    info = await store.complete_multipart(key, upload_id, etags)
    whole = first + last
    assert (info.key, info.size, info.content_type) == (key, len(whole), "video/quicktime")
    assert await store.get(key) == whole
    head = await store.head(key)
    assert head is not None and head.size == len(whole)
    if store.features.sha256_after_multipart:
        assert head.sha256 == sha(whole)


async def test_multipart_refuses_bad_parts_and_forgets_aborted_uploads(
    engine: Engine, tenant: str
) -> None:
    store = engine.store
    key = keys.object_key(tenant, "asset", "a1", "parts.bin")
    upload_id = await store.create_multipart(key)
    etags = []
    for part_no in (1, 2):
        response = await engine.http(
            "PUT", await store.presign_part(key, upload_id, part_no, 60), b"tiny"
        )
        etags.append((part_no, response.etag or ""))

    with pytest.raises(UploadRejected):  # part 1 is below min_part_size
        await store.complete_multipart(key, upload_id, etags)
    with pytest.raises(UploadRejected):  # etag of another body
        await store.complete_multipart(key, upload_id, [(2, hashlib.md5(b"x").hexdigest())])

    await store.abort_multipart(key, upload_id)
    await store.abort_multipart(key, upload_id)  # twice is fine
    with pytest.raises(BlobNotFound):
        await store.complete_multipart(key, upload_id, etags[1:])
    assert await store.head(key) is None


# -- keys -------------------------------------------------------------------------------------


def test_object_keys_are_deterministic_and_tenant_scoped() -> None:
    tenant, asset = uuid.UUID(int=7), uuid.UUID(int=9)
    key = keys.object_key(tenant, "asset", asset, "clip.mp4")
    assert key == f"t/{tenant}/asset/{asset}/clip.mp4"
    assert key == keys.object_key(str(tenant), "asset", str(asset), "clip.mp4")
    assert key.startswith(f"t/{tenant}/")
    assert keys.tenant_of(key) == str(tenant)
    assert keys.check_key(key) == key
    with pytest.raises(ValueError, match="tenant-scoped"):
        keys.tenant_of("exports/report.csv")


@pytest.mark.parametrize(
    ("tenant", "kind", "object_id", "filename"),
    [
        ("..", "asset", "a1", "f.mp4"),
        ("t1/../t2", "asset", "a1", "f.mp4"),
        ("t1", "../asset", "a1", "f.mp4"),
        ("t1", "asset", "a1/..", "f.mp4"),
        ("t1", "asset", "a1", "../../etc/passwd"),
        ("t1", "asset", "a1", "..mp4"),
        ("t1", "asset", "a1", ".hidden"),
        ("t1", "asset", "a1", "a\\b.mp4"),
        ("t1", "asset", "a1", "a b.mp4"),
        ("t1", "asset", "a1", "视频.mp4"),
        ("t1", "asset", "a1", ""),
        ("", "asset", "a1", "f.mp4"),
    ],
)
def test_object_key_refuses_traversal_and_unsafe_characters(
    tenant: str, kind: str, object_id: str, filename: str
) -> None:
    with pytest.raises(ValueError, match=r"not (a )?safe"):
        keys.object_key(tenant, kind, object_id, filename)


@pytest.mark.parametrize(
    ("given", "safe"),
    [
        ("clip.mp4", "clip.mp4"),
        ("../../etc/passwd", "passwd"),
        ("C:\\Users\\me\\My Video.MOV", "My_Video.MOV"),
        ("视频.mp4", "file.mp4"),
        ("Café Übersicht.png", "Cafe_Ubersicht.png"),
        (".bashrc", "file.bashrc"),
        ("...", "file"),
    ],
)
def test_safe_filename_gives_an_acceptable_name(given: str, safe: str) -> None:
    assert keys.safe_filename(given) == safe
    keys.object_key("t1", "asset", "a1", keys.safe_filename(given))


# -- the local engine's signatures, checked directly ---------------------------------------


async def test_local_verify_raises_typed_errors(tmp_path: Path) -> None:
    clock = ManualClock()
    store = LocalBlobStore(
        tmp_path, secret=b"k" * 32, clock=clock, base_url="https://hub.example/blobs"
    )
    url = await store.presign_get("t/t1/asset/a1/f.bin", 60)
    assert url.startswith("https://hub.example/blobs/t/t1/asset/a1/f.bin?op=get&exp=")
    query = dict(parse_qsl(urlsplit(url).query))
    key = "t/t1/asset/a1/f.bin"

    assert store.verify("get", key, query).expires_at == clock.now_ms() // 1000 + 60
    with pytest.raises(SignatureInvalid):
        store.verify("get", "t/t1/asset/a1/g.bin", query)
    with pytest.raises(SignatureInvalid):
        store.verify("get", key, {**query, "exp": str(int(query["exp"]) + 3600)})
    with pytest.raises(SignatureInvalid):
        store.verify("put", key, query)
    with pytest.raises(SignatureInvalid):
        LocalBlobStore(tmp_path, secret=b"x" * 32, clock=clock).verify("get", key, query)
    with pytest.raises(SignatureExpired):
        store.verify("get", key, query, now_ms=(int(query["exp"])) * 1000)
    with pytest.raises(SignatureInvalid):
        store.check_url(url.replace("/blobs/", "/other/"), "get")


def test_local_signing_secret_is_made_once_and_must_be_long(tmp_path: Path) -> None:
    secret = load_or_create_secret(tmp_path)
    assert len(secret) == 32 and load_or_create_secret(tmp_path) == secret
    assert (tmp_path / "signing.key").stat().st_mode & 0o777 == 0o600
    with pytest.raises(ConfigurationError):
        LocalBlobStore(tmp_path, secret="short")
