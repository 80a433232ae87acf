"""Generation tasks in the client: create (Idempotency-Key per logical call), read, list,
cancel, credits, and ``wait`` — SSE notifications as hints, the snapshot as the fact, polling
when the stream is unavailable."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any, TypeVar

from aigc_hub.client import _models as m
from aigc_hub.client._core import IDEMPOTENCY_HEADER, Call, model

T = TypeVar("T")
BASE = "/v1/generation-tasks"


def create_task_call(body: dict[str, Any], idempotency_key: str | None) -> Call[m.GenerationTask]:
    key = idempotency_key or str(uuid.uuid4())  # once per logical call, reused by retries
    return Call("POST", BASE, model(m.GenerationTask), json=body, headers={IDEMPOTENCY_HEADER: key})


def task_body(
    *,
    model_name: str,
    prompt: str,
    duration_s: int,
    resolution: str,
    mode: str,
    priority: int,
    project_id: str | None,
    reference_asset_ids: list[str] | None,
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "mode": mode,
        "model": model_name,
        "prompt": prompt,
        "duration_s": duration_s,
        "resolution": resolution,
        "priority": priority,
    }
    if project_id is not None:
        body["project_id"] = project_id
    if reference_asset_ids:
        body["reference_asset_ids"] = list(reference_asset_ids)
    return body


def get_task_call(task_id: str) -> Call[m.GenerationTask]:
    return Call("GET", f"{BASE}/{_segment(task_id)}", model(m.GenerationTask))


def list_tasks_call(
    status: str | None, limit: int | None, cursor: str | None
) -> Call[m.GenerationTaskPage]:
    params = {k: v for k, v in {"status": status, "limit": limit, "cursor": cursor}.items() if v}
    return Call("GET", BASE, model(m.GenerationTaskPage), params=params)


def cancel_task_call(task_id: str) -> Call[m.GenerationTask]:
    # Cancel is repeatable by design (a second cancel answers the same state): safe to retry.
    return Call("POST", f"{BASE}/{_segment(task_id)}/cancel", model(m.GenerationTask), safe=True)


def credits_call() -> Call[m.Credits]:
    return Call("GET", "/v1/credits", model(m.Credits))


def may_have_finished(note: m.Notification) -> bool:
    """Whether a task's notification is worth a snapshot read for ``wait`` (progress steps and
    non-terminal moves are not: every terminal move has its own notification)."""
    return note.status is None or note.status in m.TERMINAL_TASK_STATUSES


def _segment(value: str) -> str:
    from urllib.parse import quote

    return quote(value, safe="")


class SyncTasks:
    """Generation task calls of :class:`~aigc_hub.client.HubClient`."""

    execute: Callable[[Call[Any]], Any]
    wait_for: Callable[..., Any]

    def create_task(
        self,
        *,
        model: str,
        prompt: str,
        duration_s: int,
        resolution: str,
        mode: str = "text_to_video",
        priority: int = 50,
        project_id: str | None = None,
        reference_asset_ids: list[str] | None = None,
        idempotency_key: str | None = None,
    ) -> m.GenerationTask:
        """Create a task (status QUEUED); retried safely under one Idempotency-Key."""
        body = task_body(
            model_name=model,
            prompt=prompt,
            duration_s=duration_s,
            resolution=resolution,
            mode=mode,
            priority=priority,
            project_id=project_id,
            reference_asset_ids=reference_asset_ids,
        )
        task: m.GenerationTask = self.execute(create_task_call(body, idempotency_key))
        return task

    def get_task(self, task_id: str) -> m.GenerationTask:
        task: m.GenerationTask = self.execute(get_task_call(task_id))
        return task

    def list_tasks(
        self, *, status: str | None = None, limit: int | None = None, cursor: str | None = None
    ) -> m.GenerationTaskPage:
        page: m.GenerationTaskPage = self.execute(list_tasks_call(status, limit, cursor))
        return page

    def iter_tasks(
        self, *, status: str | None = None, limit: int = 100
    ) -> Iterator[m.GenerationTask]:
        """Every task, newest first, page by page."""
        cursor: str | None = None
        while True:
            page = self.list_tasks(status=status, limit=limit, cursor=cursor)
            yield from page.items
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    def cancel_task(self, task_id: str) -> m.GenerationTask:
        """Ask to cancel; the answer is the task's state now (it may still succeed)."""
        task: m.GenerationTask = self.execute(cancel_task_call(task_id))
        return task

    def credits(self) -> m.Credits:
        found: m.Credits = self.execute(credits_call())
        return found

    def wait(
        self, task_id: str, timeout: float = 600.0, poll_interval: float = 1.0
    ) -> m.GenerationTask:
        """The task once terminal; WaitTimeout (with the last snapshot) after ``timeout``."""
        task: m.GenerationTask = self.wait_for(
            task_id,
            lambda: self.get_task(task_id),
            lambda t: t.done,
            timeout,
            poll_interval,
            may_have_finished,
        )
        return task


class AsyncTasks:
    """Generation task calls of :class:`~aigc_hub.client.AsyncHubClient`."""

    execute: Callable[[Call[Any]], Any]
    wait_for: Callable[..., Any]

    async def create_task(
        self,
        *,
        model: str,
        prompt: str,
        duration_s: int,
        resolution: str,
        mode: str = "text_to_video",
        priority: int = 50,
        project_id: str | None = None,
        reference_asset_ids: list[str] | None = None,
        idempotency_key: str | None = None,
    ) -> m.GenerationTask:
        """Create a task (status QUEUED); retried safely under one Idempotency-Key."""
        body = task_body(
            model_name=model,
            prompt=prompt,
            duration_s=duration_s,
            resolution=resolution,
            mode=mode,
            priority=priority,
            project_id=project_id,
            reference_asset_ids=reference_asset_ids,
        )
        task: m.GenerationTask = await self.execute(create_task_call(body, idempotency_key))
        return task

    async def get_task(self, task_id: str) -> m.GenerationTask:
        task: m.GenerationTask = await self.execute(get_task_call(task_id))
        return task

    async def list_tasks(
        self, *, status: str | None = None, limit: int | None = None, cursor: str | None = None
    ) -> m.GenerationTaskPage:
        page: m.GenerationTaskPage = await self.execute(list_tasks_call(status, limit, cursor))
        return page

    async def iter_tasks(
        self, *, status: str | None = None, limit: int = 100
    ) -> AsyncIterator[m.GenerationTask]:
        cursor: str | None = None
        while True:
            page = await self.list_tasks(status=status, limit=limit, cursor=cursor)
            for task in page.items:
                yield task
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    async def cancel_task(self, task_id: str) -> m.GenerationTask:
        task: m.GenerationTask = await self.execute(cancel_task_call(task_id))
        return task

    async def credits(self) -> m.Credits:
        found: m.Credits = await self.execute(credits_call())
        return found

    async def wait(
        self, task_id: str, timeout: float = 600.0, poll_interval: float = 1.0
    ) -> m.GenerationTask:
        """The task once terminal; WaitTimeout (with the last snapshot) after ``timeout``."""

        async def snapshot() -> m.GenerationTask:
            return await self.get_task(task_id)

        task: m.GenerationTask = await self.wait_for(
            task_id, snapshot, lambda t: t.done, timeout, poll_interval, may_have_finished
        )
        return task
