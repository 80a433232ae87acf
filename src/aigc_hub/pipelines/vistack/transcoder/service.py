"""The ``ProcessVideo`` servicer: download, transcode to DASH, upload, answer.

One call is one video: the source is streamed from the object store into a private scratch
directory, probed (the media toolkit refuses what it will not process), made into the
``dash`` variant (the rendition ladder, one sandboxed FFmpeg run) and a ``poster`` (the
cover), and every file is uploaded under the request's ``output_prefix``. Progress streams
as stages (downloading, transcoding, uploading) with a fraction that never decreases; the
last message is the Result. A client that goes away (the worker died, its deadline passed)
cancels the call, which stops FFmpeg and removes the scratch files.

At most ``concurrency`` videos are transcoded at once; up to ``queue`` more calls wait for a
slot and any beyond answer RESOURCE_EXHAUSTED, so the worker's retry path takes them later.
"""

from __future__ import annotations

import asyncio
import logging
import time
import xml.etree.ElementTree as ET
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Final

import grpc

from aigc_hub.blobs import keys
from aigc_hub.blobs.base import BlobNotFound, BlobStore, ObjectTooLarge, download, file_chunks
from aigc_hub.core import errors
from aigc_hub.media import ladder, sandbox
from aigc_hub.media.probe import probe
from aigc_hub.media.sandbox import MediaLimits, MediaRefused

from . import transcoder_pb2 as pb
from . import transcoder_pb2_grpc as pb_grpc
from .metrics import CALLS, SECONDS

log = logging.getLogger(__name__)
#: Content types of what the DASH muxer writes.
CONTENT_TYPES: Final = {".mpd": "application/dash+xml", ".m4s": "video/iso.segment"}
DEFAULT_HEIGHTS: Final = (360, 720)


class Refusal(errors.HubError):
    """A call answered with a status code and a reason (the servicer's own control flow:
    it never leaves the service)."""

    def __init__(self, code: grpc.StatusCode, reason: str, outcome: str) -> None:
        super().__init__(reason)
        self.code, self.reason, self.outcome = code, reason, outcome


def _progress(stage: str, fraction: float) -> pb.ProcessVideoUpdate:
    return pb.ProcessVideoUpdate(progress=pb.Progress(stage=stage, fraction=fraction))


def _check(request: pb.ProcessVideoRequest) -> list[int]:
    """The ladder's heights; Refusal(INVALID_ARGUMENT) for a malformed request."""
    if not request.video_id or not request.tenant_id:
        raise Refusal(
            grpc.StatusCode.INVALID_ARGUMENT, "video_id and tenant_id are required", "invalid"
        )
    try:
        # Every key under the request's tenant: a caller naming another tenant's objects
        # (by mistake or not) reads and writes nothing of theirs.
        for key in (request.source_key, request.cover_key, request.output_prefix + "x"):
            if keys.tenant_of(key) != request.tenant_id:
                raise ValueError(f"key {key!r} is not under tenant {request.tenant_id!r}")
    except ValueError as exc:
        raise Refusal(grpc.StatusCode.INVALID_ARGUMENT, str(exc), "invalid") from None
    if not request.output_prefix.endswith("/"):
        raise Refusal(
            grpc.StatusCode.INVALID_ARGUMENT, "output_prefix must end with '/'", "invalid"
        )
    heights = list(request.heights) or list(DEFAULT_HEIGHTS)
    if len(heights) > 6 or any(h < 64 or h > 4320 for h in heights):
        raise Refusal(grpc.StatusCode.INVALID_ARGUMENT, "1-6 heights of 64-4320 pixels", "invalid")
    return heights


class TranscoderService(pb_grpc.TranscoderServicer):
    """The transcoder: a bounded number of videos at once over one blob store."""

    def __init__(
        self,
        store: BlobStore,
        *,
        concurrency: int = 2,
        queue: int = 8,
        limits: MediaLimits = sandbox.DEFAULT_LIMITS,
        max_source_bytes: int = 2 << 30,
        scratch_root: Path | None = None,
    ) -> None:
        self.store = store
        self.limits = limits
        self.max_source_bytes = max_source_bytes
        self.scratch_root = scratch_root
        self.queue = queue
        self._slots = asyncio.Semaphore(concurrency)
        self._waiting = 0
        #: ProcessVideo calls answered, by outcome (what the metric counts, per instance).
        self.calls: dict[str, int] = {}

    async def ProcessVideo(
        self,
        request: pb.ProcessVideoRequest,
        context: grpc.aio.ServicerContext[pb.ProcessVideoRequest, pb.ProcessVideoUpdate],
    ) -> AsyncIterator[pb.ProcessVideoUpdate]:
        started = time.monotonic()
        outcome = "error"
        try:
            heights = _check(request)
            if self._waiting >= self.queue and self._slots.locked():
                raise Refusal(
                    grpc.StatusCode.RESOURCE_EXHAUSTED, "the transcoder is full", "exhausted"
                )
            self._waiting += 1
            try:
                await self._slots.acquire()
            finally:
                self._waiting -= 1
            try:
                async for update in self._process(request, heights):
                    yield update
                outcome = "published"
            finally:
                self._slots.release()
        except Refusal as refusal:
            outcome = refusal.outcome
            await context.abort(refusal.code, refusal.reason)
        except asyncio.CancelledError:
            outcome = "cancelled"
            raise
        except Exception:
            log.exception("ProcessVideo %s failed", request.request_id or request.video_id)
            await context.abort(grpc.StatusCode.INTERNAL, "the transcoder failed; see its log")
        finally:
            self.calls[outcome] = self.calls.get(outcome, 0) + 1
            CALLS.labels(outcome).inc()
            SECONDS.observe(time.monotonic() - started)

    async def _process(
        self, request: pb.ProcessVideoRequest, heights: list[int]
    ) -> AsyncIterator[pb.ProcessVideoUpdate]:
        async with sandbox.scratch_dir(self.scratch_root) as job:
            yield _progress("downloading", 0.0)
            source = job / "source"
            try:
                await download(
                    self.store, request.source_key, source, max_bytes=self.max_source_bytes
                )
            except BlobNotFound:
                raise Refusal(
                    grpc.StatusCode.NOT_FOUND, f"no source object {request.source_key}", "not_found"
                ) from None
            except ObjectTooLarge as exc:
                raise Refusal(
                    grpc.StatusCode.FAILED_PRECONDITION, f"too_large: {exc}", "refused"
                ) from None
            yield _progress("transcoding", 0.1)
            try:
                info = await probe(source, self.limits, scratch_root=job)
                if info.kind != "video":
                    raise MediaRefused("not_video", f"the source is {info.kind}, not a video")
                dash = await ladder.make_variant(
                    "dash", source, info, job, limits=self.limits, ladder=ladder.ladder_of(heights)
                )
                yield _progress("transcoding", 0.75)
                cover = await ladder.make_variant("poster", source, info, job, limits=self.limits)
            except MediaRefused as exc:
                raise Refusal(
                    grpc.StatusCode.FAILED_PRECONDITION, f"{exc.code}: {exc}", "refused"
                ) from None
            yield _progress("uploading", 0.8)
            files = sorted(p for p in dash.directory.rglob("*") if p.is_file())
            uploaded = 0
            for n, path in enumerate(files, start=1):
                name = path.relative_to(dash.directory).as_posix()
                kind = CONTENT_TYPES.get(path.suffix, "application/octet-stream")
                info_up = await self.store.put(
                    request.output_prefix + name, file_chunks(path), kind
                )
                uploaded += info_up.size
                if n % 8 == 0:
                    yield _progress("uploading", 0.8 + 0.19 * n / len(files))
            cover_info = await self.store.put(
                request.cover_key, file_chunks(cover.directory / cover.main), "image/jpeg"
            )
            uploaded += cover_info.size
            manifest = await asyncio.to_thread((dash.directory / dash.main).read_text)
            yield pb.ProcessVideoUpdate(
                result=pb.Result(
                    duration_ms=info.duration_ms,
                    manifest_key=request.output_prefix + dash.main,
                    cover_key=request.cover_key,
                    renditions=_renditions(manifest),
                    segment_count=sum(1 for f in files if f.name.startswith("chunk-")),
                    bytes_uploaded=uploaded,
                )
            )


def _renditions(manifest: str) -> list[pb.Rendition]:
    """The video representations of the MPD, lowest first."""
    ns = {"mpd": "urn:mpeg:dash:schema:mpd:2011"}
    root = ET.fromstring(manifest)
    found = []
    for adaptation in root.iterfind("mpd:Period/mpd:AdaptationSet", ns):
        if adaptation.get("contentType") != "video":
            continue
        for rep in adaptation.findall("mpd:Representation", ns):
            height = int(rep.get("height", "0"))
            found.append(
                pb.Rendition(
                    name=f"{height}p",
                    width=int(rep.get("width", "0")),
                    height=height,
                    bandwidth_bps=int(rep.get("bandwidth", "0")),
                )
            )
    return sorted(found, key=lambda r: r.height)
