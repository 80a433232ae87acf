"""Blobs as files under one folder, with HMAC-signed, expiring URLs that the hub's API serves.

Layout under ``root`` (default ``./var/blobs``)::

    objects/<key>            the bytes
    meta/<key>.json          size, etag, content type, sha256: the object exists iff this does
    uploads/<id>/upload.json a multipart upload in progress, with parts ``part-00001``...
    tmp/                     files being written; renamed into place when complete

Writes go to ``tmp/`` and are renamed over the target (``os.replace``, same file system), data
first and metadata last, so a reader sees the old object or the new one, never a torn one.

Signed URLs are ``<base_url>/<key>?op=get|put|part&exp=<epoch s>&...&sig=<hex>``, where
``sig`` is HMAC-SHA256 over the key and every other query parameter; the key is a secret of
the deployment (:func:`load_or_create_secret`). The API route calls :meth:`check_url`, then
streams; :meth:`apply_signed_put` and :meth:`read_signed` do exactly what the route does.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import hmac
import json
import os
import secrets
import shutil
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import IO
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit

from aigc_hub.blobs import base, keys
from aigc_hub.blobs.base import (
    CHUNK_SIZE,
    DEFAULT_CONTENT_TYPE,
    BlobInfo,
    BlobNotFound,
    Data,
    Features,
    Parts,
    PresignedPut,
    SignatureExpired,
    SignatureInvalid,
    UploadRejected,
)
from aigc_hub.core.clock import Clock, SystemClock
from aigc_hub.core.errors import ConfigurationError

DEFAULT_ROOT = Path("var/blobs")
_SIGNED = "aigc-hub-blob-v1"


@dataclasses.dataclass(frozen=True)
class Grant:
    """What a verified signed URL allows: one operation on one key until ``expires_at``."""

    op: str
    key: str
    expires_at: int
    content_type: str | None = None
    size: int | None = None
    sha256: str | None = None
    upload_id: str | None = None
    part_no: int | None = None


def load_or_create_secret(root: str | Path) -> bytes:
    """The signing key kept in ``<root>/signing.key`` (32 random bytes, mode 0600), made once."""
    path = Path(root) / "signing.key"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        draft = path.with_name(f".signing.key.{secrets.token_hex(4)}")
        fd = os.open(draft, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_hex(32))
        # link() publishes a complete file or fails: two processes starting together agree
        with contextlib.suppress(FileExistsError):
            os.link(draft, path)
        draft.unlink()
    return bytes.fromhex(path.read_text().strip())


class _Spool:
    """A file in ``tmp/`` that hashes what is written; ``commit`` renames it into place."""

    def __init__(self, tmp: Path, limit: int | None) -> None:
        tmp.mkdir(parents=True, exist_ok=True)
        self.path = tmp / f"w-{secrets.token_hex(8)}"
        self.file: IO[bytes] = open(self.path, "xb")  # noqa: SIM115 (closed by commit/discard)
        self.sha256 = hashlib.sha256()
        self.md5 = hashlib.md5(usedforsecurity=False)
        self.size = 0
        self.limit = limit

    def write(self, chunk: bytes) -> None:
        self.size += len(chunk)
        if self.limit is not None and self.size > self.limit:
            raise UploadRejected(f"body is larger than the signed {self.limit} bytes")
        self.file.write(chunk)
        self.sha256.update(chunk)
        self.md5.update(chunk)

    def commit(self, dest: Path, fsync: bool) -> None:
        self.file.flush()
        if fsync:
            os.fsync(self.file.fileno())
        self.file.close()
        try:
            dest.parent.mkdir(parents=True, exist_ok=True)
            os.replace(self.path, dest)
        except (NotADirectoryError, IsADirectoryError, FileExistsError) as exc:
            raise ValueError(f"{dest} clashes with another key's folder: {exc}") from None

    def discard(self) -> None:
        self.file.close()
        self.path.unlink(missing_ok=True)


class LocalBlobStore:
    """Blobs in a local folder; presigned URLs are served by the hub API (one machine)."""

    def __init__(
        self,
        root: str | Path = DEFAULT_ROOT,
        *,
        secret: bytes | str,
        base_url: str = "/blobs",
        clock: Clock | None = None,
        min_part_size: int = 5 * base.MiB,
        fsync: bool = True,
    ) -> None:
        self.root = Path(root)
        self._secret = secret.encode() if isinstance(secret, str) else bytes(secret)
        if len(self._secret) < 16:
            raise ConfigurationError("the blob signing secret must be at least 16 bytes")
        self.base_url = base_url.rstrip("/")
        self.clock: Clock = clock or SystemClock()
        self.fsync = fsync
        self.features = Features(
            urls_served_by_hub=True, sha256_after_multipart=True, min_part_size=min_part_size
        )

    # -- objects ---------------------------------------------------------------------------

    async def put(self, key: str, data: Data, content_type: str = DEFAULT_CONTENT_TYPE) -> BlobInfo:
        """Store ``data`` atomically under ``key`` with its sha256; replaces an existing object."""
        return await self._put(keys.check_key(key), data, base.check_content_type(content_type))

    async def get(self, key: str) -> bytes:
        """The whole object; :class:`BlobNotFound` when absent."""
        return await asyncio.to_thread(self._read, keys.check_key(key))

    async def stream(
        self, key: str, chunk_size: int = CHUNK_SIZE, *, start: int = 0, end: int | None = None
    ) -> AsyncIterator[bytes]:
        """The object (or bytes ``start`` to ``end``) in chunks; a concurrent replace does not
        change what this read sees."""
        base.check_range(start, end)
        f = await asyncio.to_thread(self._open, keys.check_key(key))
        try:
            if start:
                await asyncio.to_thread(f.seek, start)
            left = None if end is None else end - start
            while left is None or left > 0:
                want = chunk_size if left is None else min(chunk_size, left)
                chunk = await asyncio.to_thread(f.read, want)
                if not chunk:
                    break
                if left is not None:
                    left -= len(chunk)
                yield chunk
        finally:
            f.close()

    async def head(self, key: str) -> BlobInfo | None:
        """The object's recorded size, etag, content type and sha256, or None."""
        return await asyncio.to_thread(self._head, keys.check_key(key))

    async def delete(self, key: str) -> None:
        """Remove the object (metadata first, so it vanishes at once); absent is fine."""
        await asyncio.to_thread(self._delete, keys.check_key(key))

    # -- signed URLs -----------------------------------------------------------------------

    async def presign_get(self, key: str, expires_s: int) -> str:
        """``<base_url>/<key>?op=get&exp=..&sig=..``, valid for ``expires_s`` seconds."""
        return self._sign_url("get", keys.check_key(key), self._expiry(expires_s), {})

    async def presign_put(
        self,
        key: str,
        expires_s: int,
        content_type: str = DEFAULT_CONTENT_TYPE,
        *,
        size: int | None = None,
        sha256: str | None = None,
    ) -> PresignedPut:
        """A signed PUT bound to the content type and, when given, the exact size and sha256."""
        ct = base.check_content_type(content_type)
        extra = {"ct": ct}
        if size is not None:
            extra["len"] = str(base.check_size(size))
        if sha256 is not None:
            extra["sha"] = base.check_sha256(sha256)
        exp = self._expiry(expires_s)
        url = self._sign_url("put", keys.check_key(key), exp, extra)
        return PresignedPut(url=url, headers={"Content-Type": ct}, expires_at=exp)

    def verify(
        self, op: str, key: str, query: Mapping[str, str], *, now_ms: int | None = None
    ) -> Grant:
        """The grant of a signed URL's ``query`` for ``op`` on ``key``.

        Raises :class:`SignatureInvalid` when any parameter or the key was changed (checked
        in constant time) or the URL is for another operation, and :class:`SignatureExpired`
        when it is genuine but its expiry has passed on this store's clock.
        """
        params = {k: v for k, v in query.items() if k != "sig"}
        sig = query.get("sig", "")
        expected = self._signature(key, params).encode()
        if not hmac.compare_digest(expected, sig.encode("utf-8", "replace")):
            raise SignatureInvalid()
        if params.get("op") != op:
            raise SignatureInvalid(f"the URL is signed for {params.get('op')!r}, not {op!r}")
        try:
            grant = Grant(
                op=op,
                key=key,
                expires_at=int(params["exp"]),
                content_type=params.get("ct"),
                size=int(params["len"]) if "len" in params else None,
                sha256=params.get("sha"),
                upload_id=params.get("upload"),
                part_no=int(params["part"]) if "part" in params else None,
            )
        except (KeyError, ValueError):
            raise SignatureInvalid("the signed URL lacks a valid expiry or part") from None
        now = self.clock.now_ms() if now_ms is None else now_ms
        if now >= grant.expires_at * 1000:
            raise SignatureExpired()
        return grant

    def check_url(self, url: str, *ops: str) -> Grant:
        """Parse a signed URL (absolute, or path and query) and verify it for one of ``ops``."""
        parts = urlsplit(url)
        prefix = urlsplit(self.base_url).path + "/"
        if not parts.path.startswith(prefix):
            raise SignatureInvalid(f"the URL is not under {prefix!r}")
        pairs = parse_qsl(parts.query, keep_blank_values=True)
        query = dict(pairs)
        if len(query) != len(pairs):
            raise SignatureInvalid("a query parameter is repeated")
        try:
            key = keys.check_key(unquote(parts.path[len(prefix) :]))
        except ValueError:
            raise SignatureInvalid("the URL's key is not a valid key") from None
        grant = self.verify(query.get("op", ""), key, query)
        if grant.op not in ops:
            raise SignatureInvalid(f"the URL is signed for {grant.op!r}, not one of {ops}")
        return grant

    async def read_signed(self, url: str) -> bytes:
        """What ``GET <url>`` serves: the object, after the signature and expiry check."""
        return await self.get(self.check_url(url, "get").key)

    async def apply_signed_put(
        self, url: str, body: Data, headers: Mapping[str, str] | None = None
    ) -> str:
        """What ``PUT <url>`` does: verify, check the signed constraints, store; returns etag.

        A presigned object PUT must send the signed ``Content-Type`` (else
        :class:`SignatureInvalid`) and match the signed size and sha256 (else
        :class:`UploadRejected`, nothing stored). A part PUT stores one part of its upload.
        """
        grant = self.check_url(url, "put", "part")
        if grant.op == "part":
            return await self._put_part(grant, body)
        sent = {k.lower(): v for k, v in (headers or {}).items()}.get("content-type")
        if sent != grant.content_type:
            raise SignatureInvalid(
                f"Content-Type {sent!r} is not the signed {grant.content_type!r}"
            )
        info = await self._put(
            grant.key, body, grant.content_type or DEFAULT_CONTENT_TYPE, grant.size, grant.sha256
        )
        return info.etag

    # -- multipart -------------------------------------------------------------------------

    async def create_multipart(self, key: str, content_type: str = DEFAULT_CONTENT_TYPE) -> str:
        """Start an upload to ``key``; its parts arrive through :meth:`presign_part` URLs."""
        record = {"key": keys.check_key(key), "content_type": base.check_content_type(content_type)}
        upload_id = secrets.token_hex(16)
        folder = self.root / "uploads" / upload_id
        await asyncio.to_thread(folder.mkdir, parents=True)
        await asyncio.to_thread((folder / "upload.json").write_text, json.dumps(record))
        return upload_id

    async def presign_part(self, key: str, upload_id: str, part_no: int, expires_s: int) -> str:
        """A signed URL to PUT one part; only checks arguments, not that the upload exists."""
        base.check_part_no(part_no, self.features)
        extra = {"upload": _upload_id(upload_id), "part": str(part_no)}
        return self._sign_url("part", keys.check_key(key), self._expiry(expires_s), extra)

    async def complete_multipart(self, key: str, upload_id: str, parts: Parts) -> BlobInfo:
        """Concatenate ``parts`` in order into the object (sha256 included); drop the upload."""
        ordered = base.check_parts(parts, self.features)
        record = await asyncio.to_thread(self._upload, keys.check_key(key), upload_id)
        info = await asyncio.to_thread(self._join, key, upload_id, record, ordered)
        await self.abort_multipart(key, upload_id)
        return info

    async def abort_multipart(self, key: str, upload_id: str) -> None:
        """Remove the upload and its parts; unknown uploads are ignored."""
        try:
            await asyncio.to_thread(self._upload, keys.check_key(key), upload_id)
        except BlobNotFound:
            return
        await asyncio.to_thread(shutil.rmtree, self.root / "uploads" / upload_id, True)

    async def close(self) -> None:
        """Nothing to release; present so every engine closes the same way."""

    # -- internals -------------------------------------------------------------------------

    def _data_path(self, key: str) -> Path:
        return self.root / "objects" / key

    def _meta_path(self, key: str) -> Path:
        return self.root / "meta" / f"{key}.json"

    def _signature(self, key: str, params: Mapping[str, str]) -> str:
        message = json.dumps([_SIGNED, key, sorted(params.items())], separators=(",", ":"))
        return hmac.new(self._secret, message.encode(), hashlib.sha256).hexdigest()

    def _expiry(self, expires_s: int) -> int:
        return self.clock.now_ms() // 1000 + base.check_expires(expires_s)

    def _sign_url(self, op: str, key: str, exp: int, extra: dict[str, str]) -> str:
        params = {"op": op, "exp": str(exp), **extra}
        params["sig"] = self._signature(key, params)
        return f"{self.base_url}/{quote(key, safe='/')}?{urlencode(params)}"

    async def _spool(self, data: Data, limit: int | None) -> _Spool:
        spool = await asyncio.to_thread(_Spool, self.root / "tmp", limit)
        try:
            if isinstance(data, bytes | bytearray | memoryview):
                await asyncio.to_thread(spool.write, bytes(data))
            else:
                async for chunk in data:
                    await asyncio.to_thread(spool.write, chunk)
        except BaseException:
            await asyncio.to_thread(spool.discard)
            raise
        return spool

    async def _put(
        self,
        key: str,
        data: Data,
        content_type: str,
        size: int | None = None,
        sha256: str | None = None,
    ) -> BlobInfo:
        spool = await self._spool(data, size)
        info = BlobInfo(
            key, spool.size, spool.md5.hexdigest(), content_type, spool.sha256.hexdigest()
        )
        try:
            if size is not None and info.size != size:
                raise UploadRejected(f"body has {info.size} bytes, the URL is signed for {size}")
            if sha256 is not None and info.sha256 != sha256:
                raise UploadRejected("body sha256 differs from the signed sha256")
            await asyncio.to_thread(spool.commit, self._data_path(key), self.fsync)
        except BaseException:
            await asyncio.to_thread(spool.discard)
            raise
        await asyncio.to_thread(self._write_meta, info)
        return info

    def _write_meta(self, info: BlobInfo) -> None:
        spool = _Spool(self.root / "tmp", None)
        try:
            spool.write(json.dumps(dataclasses.asdict(info)).encode())
            spool.commit(self._meta_path(info.key), self.fsync)
        except BaseException:
            spool.discard()
            raise

    def _delete(self, key: str) -> None:
        for path in (self._meta_path(key), self._data_path(key)):
            # a key that is only another key's folder has nothing to delete
            with contextlib.suppress(FileNotFoundError, NotADirectoryError, IsADirectoryError):
                path.unlink()

    def _head(self, key: str) -> BlobInfo | None:
        try:
            return BlobInfo(**json.loads(self._meta_path(key).read_bytes()))
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            return None

    def _open(self, key: str) -> IO[bytes]:
        if self._head(key) is None:
            raise BlobNotFound(f"no blob under {key!r}")
        try:
            return open(self._data_path(key), "rb")
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            raise BlobNotFound(f"no blob under {key!r}") from None

    def _read(self, key: str) -> bytes:
        with self._open(key) as f:
            return f.read()

    def _upload(self, key: str, upload_id: str) -> dict[str, str]:
        path = self.root / "uploads" / _upload_id(upload_id) / "upload.json"
        try:
            record: dict[str, str] = json.loads(path.read_text())
        except (FileNotFoundError, NotADirectoryError):
            raise BlobNotFound(f"no multipart upload {upload_id!r}") from None
        if record["key"] != key:
            raise BlobNotFound(f"multipart upload {upload_id!r} is not for {key!r}")
        return record

    async def _put_part(self, grant: Grant, body: Data) -> str:
        assert grant.upload_id is not None and grant.part_no is not None
        await asyncio.to_thread(self._upload, grant.key, grant.upload_id)
        spool = await self._spool(body, None)
        dest = self.root / "uploads" / grant.upload_id / f"part-{grant.part_no:05d}"
        try:
            await asyncio.to_thread(spool.commit, dest, self.fsync)
        except BaseException:
            await asyncio.to_thread(spool.discard)
            raise
        return spool.md5.hexdigest()

    def _join(
        self, key: str, upload_id: str, record: dict[str, str], parts: list[tuple[int, str]]
    ) -> BlobInfo:
        folder = self.root / "uploads" / upload_id
        spool = _Spool(self.root / "tmp", None)
        md5s = b""
        try:
            for i, (part_no, etag) in enumerate(parts):
                path = folder / f"part-{part_no:05d}"
                if not path.is_file():
                    raise UploadRejected(f"part {part_no} was never uploaded")
                if i < len(parts) - 1 and path.stat().st_size < self.features.min_part_size:
                    raise UploadRejected(f"part {part_no} is below {self.features.min_part_size} B")
                digest = hashlib.md5(usedforsecurity=False)
                with open(path, "rb") as f:
                    while chunk := f.read(CHUNK_SIZE):
                        digest.update(chunk)
                        spool.write(chunk)
                if digest.hexdigest() != etag:
                    raise UploadRejected(f"part {part_no}'s etag is not {etag!r}")
                md5s += digest.digest()
            spool.commit(self._data_path(key), self.fsync)
        except BaseException:
            spool.discard()
            raise
        etag = f"{hashlib.md5(md5s, usedforsecurity=False).hexdigest()}-{len(parts)}"
        info = BlobInfo(key, spool.size, etag, record["content_type"], spool.sha256.hexdigest())
        self._write_meta(info)
        return info


def _upload_id(value: str) -> str:
    if (
        not isinstance(value, str)
        or len(value) != 32
        or not all(c in "0123456789abcdef" for c in value)
    ):
        raise BlobNotFound(f"no multipart upload {value!r}")
    return value
