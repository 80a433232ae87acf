"""Test doubles shipped with the package: the in-memory broker with a deterministic ``drain()``,
and a scriptable generation provider with a probe that needs no FFmpeg."""

from __future__ import annotations

from aigc_hub.messaging.memory import MemoryBroker, MemoryConsumer
from aigc_hub.testing.generation import FAKE_MODEL, FakeProvider
from aigc_hub.testing.media import FakeProbe, fake_video
from aigc_hub.testing.scripts import Call, Cancel, FakeJob, JobScript, Step, Submit

__all__ = [
    "FAKE_MODEL",
    "Call",
    "Cancel",
    "FakeJob",
    "FakeProbe",
    "FakeProvider",
    "JobScript",
    "MemoryBroker",
    "MemoryConsumer",
    "Step",
    "Submit",
    "fake_video",
]
