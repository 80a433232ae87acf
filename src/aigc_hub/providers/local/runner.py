"""A job's life: queued → running (0.25, 0.5, 0.75) → succeeded | failed | canceled.

One task per job; at most ``max_concurrent`` run at once (the rest stay queued). Progress
milestones follow FFmpeg's own progress, so a slow render reports slowly; the fault
``render_seconds`` adds time spread over the milestones.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

from aigc_hub.providers.local import catalog
from aigc_hub.providers.local.faults import FaultState
from aigc_hub.providers.local.jobs import Job, JobStore
from aigc_hub.providers.local.renderer import Renderer, RenderError

log = logging.getLogger(__name__)
MILESTONES = (0.25, 0.5, 0.75)


class JobRunner:
    """Runs jobs in background tasks; :meth:`cancel` stops one, :meth:`close` stops all."""

    def __init__(
        self,
        store: JobStore,
        renderer: Renderer,
        faults: FaultState,
        output_dir: Path,
        max_concurrent: int,
    ) -> None:
        self.store = store
        self.renderer = renderer
        self.faults = faults
        self.output_dir = output_dir
        self._slots = asyncio.Semaphore(max_concurrent)
        self._tasks: dict[str, asyncio.Task[None]] = {}

    def start(self, job: Job, *, fail: bool, black: bool = False) -> None:
        """Run ``job`` in the background; ``fail`` makes it end failed, ``black`` makes its
        video all black (faults)."""
        task = asyncio.create_task(self._run(job, fail, self.faults.faults.render_seconds, black))
        self._tasks[job.id] = task
        task.add_done_callback(lambda _: self._tasks.pop(job.id, None))

    def cancel(self, job: Job) -> None:
        """Mark the job canceled (unless already final) and stop its work."""
        if self.store.update(job, status="canceled"):
            task = self._tasks.get(job.id)
            if task is not None:
                task.cancel()

    async def close(self) -> None:
        """Stop every running job (their FFmpeg processes are killed)."""
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _run(self, job: Job, fail: bool, extra_s: float, black: bool) -> None:
        try:
            async with self._slots:
                await self._work(job, fail, extra_s, black)
        except asyncio.CancelledError:
            raise
        except RenderError as exc:
            log.warning("job %s: %s", job.id, exc)
            self.store.update(
                job, status="failed", error={"code": "render_failed", "message": str(exc)[:500]}
            )
        except Exception as exc:  # a bug must still end the job, not leave it running
            log.exception("job %s crashed", job.id)
            self.store.update(
                job,
                status="failed",
                error={"code": "internal_error", "message": type(exc).__name__},
            )

    async def _work(self, job: Job, fail: bool, extra_s: float, black: bool) -> None:
        spec = job.spec
        if not self.store.update(job, status="running", progress=0.0):
            return  # canceled while queued
        if fail:
            await asyncio.sleep(extra_s)
            self.store.update(job, progress=MILESTONES[0])
            code = self.faults.faults.fail_code
            self.store.update(
                job, status="failed", error={"code": code, "message": f"the model failed ({code})"}
            )
            return
        reached = {p: asyncio.Event() for p in MILESTONES}

        def on_progress(fraction: float) -> None:
            for p, event in reached.items():
                if fraction >= p:
                    event.set()

        dest = self.output_dir / f"{job.id}.mp4"
        render = asyncio.create_task(
            self.renderer.render(
                spec.prompt, spec.width, spec.height, spec.duration_s, dest, on_progress, black
            )
        )
        render.add_done_callback(lambda _: on_progress(1.0))
        try:
            for p in MILESTONES:
                await asyncio.sleep(extra_s / len(MILESTONES))
                await reached[p].wait()
                if render.done() and render.exception() is not None:
                    break
                self.store.update(job, progress=p)
            path = await render
        finally:
            if not render.done():
                render.cancel()
                await asyncio.gather(render, return_exceptions=True)
        self.store.update(
            job,
            status="succeeded",
            progress=1.0,
            output_path=path,
            output_size=path.stat().st_size,
            cost=catalog.cost(spec.duration_s, spec.width, spec.height),
        )
