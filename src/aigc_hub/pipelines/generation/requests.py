"""From a task row to the provider-neutral :class:`GenerationRequest`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from aigc_hub.pipelines.generation.adapters.base import GenerationRequest


def request_of(
    task: Mapping[str, Any], *, request_key: str = "", callback_url: str | None = None
) -> GenerationRequest:
    params = task["normalized_params"]
    return GenerationRequest(
        task_id=task["id"],
        request_key=request_key or f"probe-{task['id']}",
        mode=task["mode"],
        model=task["requested_model"],
        prompt=params["prompt"],
        duration_s=int(params["duration_s"]),
        width=int(params["width"]),
        height=int(params["height"]),
        callback_url=callback_url,
    )
