"""The worker's client of the transcoder's gRPC service (``ProcessVideo``), the only code
that speaks its protocol.

One channel per process, reused by every call (HTTP/2 multiplexes them). Status codes become
the backbone's error kinds: a transcoder that is down, overloaded, past the deadline or that
cut the stream is :class:`TranscoderUnavailable` (retryable: the worker's retry path takes
it), a request or source it refuses is :class:`TranscodeRefused` (permanent).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Final

import grpc

from aigc_hub.core.errors import PermanentError, RetryableError

from ..transcoder import transcoder_pb2 as pb
from ..transcoder import transcoder_pb2_grpc as pb_grpc
from ..transcoder.server import OPTIONS

OnProgress = Callable[[str, float], Awaitable[None]]
#: Calls spread over every address the target resolves to (a DNS name of several
#: transcoders, or ``ipv4:host:port,host:port``), not pinned to the first one.
ROUND_ROBIN: Final = json.dumps({"loadBalancingConfig": [{"round_robin": {}}]})
_REFUSED = {
    grpc.StatusCode.INVALID_ARGUMENT: "invalid_request",
    grpc.StatusCode.NOT_FOUND: "source_missing",
    grpc.StatusCode.FAILED_PRECONDITION: "media_refused",
}


class TranscoderUnavailable(RetryableError):
    """The transcoder could not finish the call now (down, full, too slow, cut off)."""


class TranscodeRefused(PermanentError):
    """The transcoder refused the request or its source: retrying cannot help."""

    def __init__(self, code: str, reason: str) -> None:
        self.code, self.reason = code, reason
        super().__init__(f"{code}: {reason}")


@dataclass(frozen=True)
class Rendition:
    """One video rendition of the manifest."""

    name: str
    width: int
    height: int
    bandwidth_bps: int


@dataclass(frozen=True)
class TranscodeResult:
    """What a finished ProcessVideo answered."""

    duration_ms: int
    manifest_key: str
    cover_key: str
    renditions: tuple[Rendition, ...]
    segment_count: int
    bytes_uploaded: int


class TranscoderClient:
    """Calls ``ProcessVideo`` at ``target``: ``host:port``, or any gRPC name that resolves
    to several transcoders (``dns:///transcoders:50051``, ``ipv4:10.0.0.1:50051,10.0.0.2:50051``),
    which the calls take in turn."""

    def __init__(self, target: str) -> None:
        self.target = target
        options = (*OPTIONS, ("grpc.service_config", ROUND_ROBIN))
        self._channel = grpc.aio.insecure_channel(target, options=options)
        self._stub = pb_grpc.TranscoderStub(self._channel)

    async def close(self) -> None:
        await self._channel.close(None)

    async def process(
        self,
        *,
        video_id: str,
        tenant_id: str,
        source_key: str,
        output_prefix: str,
        cover_key: str,
        heights: Sequence[int] = (),
        request_id: str = "",
        deadline_s: float,
        on_progress: OnProgress | None = None,
    ) -> TranscodeResult:
        """Transcode one video; its progress to ``on_progress`` as it comes."""
        request = pb.ProcessVideoRequest(
            video_id=video_id,
            tenant_id=tenant_id,
            source_key=source_key,
            output_prefix=output_prefix,
            cover_key=cover_key,
            heights=list(heights),
            request_id=request_id,
        )
        try:
            call = self._stub.ProcessVideo(request, timeout=deadline_s)
            async for update in call:
                if update.HasField("result"):
                    return _result(update.result)
                if on_progress is not None:
                    await on_progress(update.progress.stage, update.progress.fraction)
        except grpc.aio.AioRpcError as exc:
            code = _REFUSED.get(exc.code())
            if code is not None:
                raise TranscodeRefused(code, exc.details() or exc.code().name) from None
            raise TranscoderUnavailable(
                f"transcoder at {self.target}: {exc.code().name}: {exc.details()}"
            ) from None
        raise TranscoderUnavailable(f"transcoder at {self.target} ended the call without a result")


def _result(result: pb.Result) -> TranscodeResult:
    return TranscodeResult(
        duration_ms=result.duration_ms,
        manifest_key=result.manifest_key,
        cover_key=result.cover_key,
        renditions=tuple(
            Rendition(r.name, r.width, r.height, r.bandwidth_bps) for r in result.renditions
        ),
        segment_count=result.segment_count,
        bytes_uploaded=result.bytes_uploaded,
    )
