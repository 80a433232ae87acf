"""Throwaway C2PA certificate authorities for the tests: the platform's own maker
(``aigc_hub.pipelines.avcc.credentials``)."""

from __future__ import annotations

from aigc_hub.pipelines.avcc.credentials import PlatformCA, make_ca

__all__ = ["PlatformCA", "make_ca"]
