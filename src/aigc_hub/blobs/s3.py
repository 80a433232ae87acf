"""Blobs in an S3-compatible bucket (AWS S3, SeaweedFS, MinIO) through boto3.

Clients move bytes with SigV4-presigned URLs; the store only signs, checks and completes.
Addressing is path-style (``<endpoint>/<bucket>/<key>``), which every S3-compatible server
answers. boto3 blocks, so each call runs in a worker thread (``asyncio.to_thread``); one
client is shared (boto3 clients are thread-safe).

Every put records the body's sha256 twice: as ``ChecksumSHA256`` (the server verifies the
body against it) and as user metadata ``x-amz-meta-sha256`` (returned by every server's HEAD).
An object completed from multipart parts has no whole-object sha256 (S3 keeps only a checksum
of part checksums), so ``Features.sha256_after_multipart`` is False here.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from typing import Any, TypeVar
from urllib.parse import urlsplit

try:
    import boto3  # type: ignore[import-untyped]
    from botocore.config import Config  # type: ignore[import-untyped]
    from botocore.exceptions import ClientError  # type: ignore[import-untyped]
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ImportError(
        f"the S3 blob store needs boto3 ({exc}); install it with: pip install 'aigc-hub[s3]'"
    ) from exc

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
    UploadRejected,
)

T = TypeVar("T")

#: Bodies streamed into :meth:`S3BlobStore.put` stay in memory up to this size, then spill.
SPOOL_IN_MEMORY = 8 * base.MiB
_NOT_FOUND = {"404", "NoSuchKey", "NotFound", "NoSuchBucket"}
_REJECTED = {"InvalidPart", "InvalidPartOrder", "EntityTooSmall", "BadDigest", "InvalidDigest"}


def _code(exc: Any) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def _b64(hex_digest: str) -> str:
    return base64.b64encode(bytes.fromhex(hex_digest)).decode()


class S3BlobStore:
    """Blobs in one S3 bucket; presigned URLs go straight to the S3 endpoint."""

    features = Features(urls_served_by_hub=False, sha256_after_multipart=False)

    def __init__(
        self,
        bucket: str,
        *,
        endpoint: str | None = None,
        access_key: str | None = None,
        secret_key: str | None = None,
        region: str = "us-east-1",
        connect_timeout: float = 5.0,
        read_timeout: float = 60.0,
        max_attempts: int = 3,
    ) -> None:
        self.bucket = bucket
        self.endpoint = endpoint
        self.region = region
        config = Config(
            signature_version="s3v4",
            s3={"addressing_style": "path"},
            # botocore >= 1.36 adds CRC32 checksums to every request by default, which some
            # S3-compatible servers refuse; we send our own ChecksumSHA256 where it matters.
            request_checksum_calculation="when_required",
            response_checksum_validation="when_required",
            connect_timeout=connect_timeout,
            read_timeout=read_timeout,
            retries={"max_attempts": max_attempts, "mode": "standard"},
        )
        self._client: Any = boto3.session.Session().client(
            "s3",
            endpoint_url=endpoint,
            aws_access_key_id=access_key,
            aws_secret_access_key=secret_key,
            region_name=region,
            config=config,
        )

    @classmethod
    def from_url(cls, url: str, **options: Any) -> S3BlobStore:
        """``S3BlobStore.from_url("s3://bucket", endpoint=..., access_key=..., ...)``."""
        parts = urlsplit(url)
        if parts.scheme != "s3" or not parts.netloc or parts.path.strip("/"):
            raise ValueError(f"blob URL {url!r} is not 's3://<bucket>'")
        return cls(parts.netloc, **options)

    async def _call(self, fn: Callable[..., T], **kwargs: Any) -> T:
        return await asyncio.to_thread(fn, Bucket=self.bucket, **kwargs)

    async def ensure_bucket(self) -> None:
        """Create the bucket unless it exists (safe to call from several processes)."""
        try:
            await self._call(self._client.head_bucket)
            return
        except ClientError as exc:
            if _code(exc) not in _NOT_FOUND:
                raise
        where = {} if self.region == "us-east-1" else {"LocationConstraint": self.region}
        try:
            if where:
                await self._call(self._client.create_bucket, CreateBucketConfiguration=where)
            else:
                await self._call(self._client.create_bucket)
        except ClientError as exc:
            if _code(exc) not in {"BucketAlreadyOwnedByYou", "BucketAlreadyExists"}:
                raise

    # -- objects ---------------------------------------------------------------------------

    async def put(self, key: str, data: Data, content_type: str = DEFAULT_CONTENT_TYPE) -> BlobInfo:
        """One PUT (up to S3's 5 GiB); the server checks the body against our sha256."""
        keys.check_key(key)
        content_type = base.check_content_type(content_type)
        if isinstance(data, bytes | bytearray | memoryview):
            body = bytes(data)
            sha256 = hashlib.sha256(body).hexdigest()
            return await self._put_body(key, body, len(body), sha256, content_type)
        with tempfile.SpooledTemporaryFile(max_size=SPOOL_IN_MEMORY) as spool:
            digest, size = hashlib.sha256(), 0
            async for chunk in data:
                digest.update(chunk)
                size += len(chunk)
                await asyncio.to_thread(spool.write, chunk)
            spool.seek(0)
            return await self._put_body(key, spool, size, digest.hexdigest(), content_type)

    async def _put_body(
        self, key: str, body: Any, size: int, sha256: str, content_type: str
    ) -> BlobInfo:
        response = await self._call(
            self._client.put_object,
            Key=key,
            Body=body,
            ContentType=content_type,
            ChecksumSHA256=_b64(sha256),
            Metadata={"sha256": sha256},
        )
        return BlobInfo(key, size, base.plain_etag(response["ETag"]), content_type, sha256)

    async def _get_object(self, key: str, **params: Any) -> Any:
        try:
            return await self._call(self._client.get_object, Key=keys.check_key(key), **params)
        except ClientError as exc:
            if _code(exc) in _NOT_FOUND:
                raise BlobNotFound(f"no blob under {key!r}") from None
            raise

    async def get(self, key: str) -> bytes:
        """The whole object; :class:`BlobNotFound` when absent."""
        body = (await self._get_object(key))["Body"]
        try:
            return bytes(await asyncio.to_thread(body.read))
        finally:
            body.close()

    async def stream(
        self, key: str, chunk_size: int = CHUNK_SIZE, *, start: int = 0, end: int | None = None
    ) -> AsyncIterator[bytes]:
        """The object (or bytes ``start`` to ``end``, one ranged GET) in chunks."""
        base.check_range(start, end)
        if end == start:
            return
        params: dict[str, Any] = {}
        if start or end is not None:
            params["Range"] = f"bytes={start}-{'' if end is None else end - 1}"
        try:
            body = (await self._get_object(key, **params))["Body"]
        except ClientError as exc:
            if _code(exc) == "InvalidRange":  # starts past the end: nothing there
                return
            raise
        chunks = body.iter_chunks(chunk_size)
        try:
            while chunk := await asyncio.to_thread(next, chunks, b""):
                yield chunk
        finally:
            body.close()

    async def head(self, key: str) -> BlobInfo | None:
        """Size, etag, content type and sha256 (from our metadata or the stored checksum)."""
        try:
            r = await self._call(
                self._client.head_object, Key=keys.check_key(key), ChecksumMode="ENABLED"
            )
        except ClientError as exc:
            if _code(exc) in _NOT_FOUND:
                return None
            raise
        sha256 = r.get("Metadata", {}).get("sha256")
        checksum = r.get("ChecksumSHA256")
        if sha256 is None and checksum and "-" not in checksum:
            sha256 = base64.b64decode(checksum).hex()
        return BlobInfo(
            key=key,
            size=int(r["ContentLength"]),
            etag=base.plain_etag(r["ETag"]),
            content_type=r.get("ContentType", DEFAULT_CONTENT_TYPE),
            sha256=sha256,
        )

    async def delete(self, key: str) -> None:
        """Remove the object; S3 deletes of absent keys succeed."""
        await self._call(self._client.delete_object, Key=keys.check_key(key))

    # -- presigned URLs (signed locally, no request) -------------------------------------

    def _presign(self, operation: str, expires_s: int, **params: Any) -> str:
        return str(
            self._client.generate_presigned_url(
                operation,
                Params={"Bucket": self.bucket, **params},
                ExpiresIn=base.check_expires(expires_s),
            )
        )

    async def presign_get(self, key: str, expires_s: int) -> str:
        """A SigV4 query-signed GET URL valid for ``expires_s`` seconds."""
        return self._presign("get_object", expires_s, Key=keys.check_key(key))

    async def presign_put(
        self,
        key: str,
        expires_s: int,
        content_type: str = DEFAULT_CONTENT_TYPE,
        *,
        size: int | None = None,
        sha256: str | None = None,
    ) -> PresignedPut:
        """A SigV4 PUT URL; content type, and when given Content-Length and the sha256
        (``x-amz-checksum-sha256`` and ``x-amz-meta-sha256``), are signed headers."""
        content_type = base.check_content_type(content_type)
        params: dict[str, Any] = {"Key": keys.check_key(key), "ContentType": content_type}
        headers = {"Content-Type": content_type}
        if size is not None:
            params["ContentLength"] = base.check_size(size)
        if sha256 is not None:
            params["ChecksumSHA256"] = headers["x-amz-checksum-sha256"] = _b64(
                base.check_sha256(sha256)
            )
            params["Metadata"] = {"sha256": sha256}
            headers["x-amz-meta-sha256"] = sha256
        expires_at = int(time.time()) + expires_s
        return PresignedPut(self._presign("put_object", expires_s, **params), headers, expires_at)

    # -- multipart -------------------------------------------------------------------------

    async def create_multipart(self, key: str, content_type: str = DEFAULT_CONTENT_TYPE) -> str:
        """Start an S3 multipart upload; returns the upload id."""
        r = await self._call(
            self._client.create_multipart_upload,
            Key=keys.check_key(key),
            ContentType=base.check_content_type(content_type),
        )
        return str(r["UploadId"])

    async def presign_part(self, key: str, upload_id: str, part_no: int, expires_s: int) -> str:
        """A SigV4 URL to PUT one part; S3 returns the part's ETag in the response."""
        base.check_part_no(part_no, self.features)
        return self._presign(
            "upload_part",
            expires_s,
            Key=keys.check_key(key),
            UploadId=upload_id,
            PartNumber=part_no,
        )

    async def complete_multipart(self, key: str, upload_id: str, parts: Parts) -> BlobInfo:
        """Complete the upload (S3 checks etags and part sizes) and HEAD the result."""
        ordered = base.check_parts(parts, self.features)
        try:
            await self._call(
                self._client.complete_multipart_upload,
                Key=keys.check_key(key),
                UploadId=upload_id,
                MultipartUpload={"Parts": [{"PartNumber": n, "ETag": e} for n, e in ordered]},
            )
        except ClientError as exc:
            if _code(exc) == "NoSuchUpload":
                raise BlobNotFound(f"no multipart upload {upload_id!r} for {key!r}") from None
            if _code(exc) in _REJECTED:
                raise UploadRejected(f"S3 refused the parts: {_code(exc)}") from None
            raise
        info = await self.head(key)
        if info is None:  # pragma: no cover - the server lost what it just completed
            raise BlobNotFound(f"{key!r} vanished right after its upload completed")
        return info

    async def abort_multipart(self, key: str, upload_id: str) -> None:
        """Abort the upload and free its parts; unknown uploads are ignored."""
        try:
            await self._call(
                self._client.abort_multipart_upload, Key=keys.check_key(key), UploadId=upload_id
            )
        except ClientError as exc:
            if _code(exc) != "NoSuchUpload":
                raise

    async def close(self) -> None:
        """Close the client's connection pool."""
        await asyncio.to_thread(self._client.close)
