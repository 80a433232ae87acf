"""``Pipeline("vistack", state=build_state)``: seed 002's video site jobs.

Consumer groups (the seed's one group ``vistack-consumer-group``, ``[kafka].concurrency``
records at once per worker; its name and concurrency come from the settings):

* ``vistack-consumer-group`` — ``transcode``, ``delete_file`` and ``comment``;
* ``vistack-consumer-group-danmaku`` — ``danmaku`` in batches (batched inserts): a batch
  group of its own, so a long transcode never holds a danmaku back.

Scanners, each under a leader lease: the retry dispatcher (every 5 s, the ZSET
``transcode:retry:zset``) and the watchdog (every minute).
"""

from __future__ import annotations

from aigc_hub.pipeline import GroupTuning, Pipeline

from . import events, http, interactions_http, models, scanners, up
from .handlers import comment, consumer, danmaku, delete_file, transcode
from .settings import VistackSettings
from .state import NAME, Vistack, build_state

#: The seed's group, as declared (``AIGC_HUB_VISTACK_GROUP_ID`` renames it at start).
GROUP = "vistack-consumer-group"

pipeline: Pipeline[Vistack] = Pipeline(
    NAME,
    state=build_state,
    settings=VistackSettings,
    cli="aigc_hub.pipelines.vistack.cli:app",
    models=models.__name__,
    # Its tables' revisions are in the hub's own linear chain: no branch of its own.
    migrations=None,
)
events.register(pipeline)
pipeline.routers += [
    http.router,
    http.play_router,
    interactions_http.router,
    interactions_http.review_router,
]
pipeline.up_hook(up.transcoder_hook)


def _seed_group(vs: Vistack) -> GroupTuning:
    """The seed's ``[kafka].group_id`` and ``[kafka].concurrency``."""
    return GroupTuning(vs.settings.group_id, vs.settings.concurrency)


pipeline.handler_with_state(
    GROUP,
    [events.TRANSCODE_TOPIC, events.DELETE_FILE_TOPIC, events.COMMENT_TOPIC],
    concurrency=4,
    on_dead_letter=consumer.on_dead_letter,
    tune=_seed_group,
)(consumer.on_record)
pipeline.scanner_with_state(scanners.RetryDispatcher)
pipeline.scanner_with_state(scanners.Watchdog)
# The handlers of the seed's group register themselves with the dispatch on import.
_HANDLER_MODULES = (transcode, delete_file, comment)


def _danmaku_batches(vs: Vistack) -> tuple[int, float]:
    """The danmaku writers' batches: ``danmaku_batch`` records or ``danmaku_wait_s``."""
    return vs.settings.danmaku_batch, vs.settings.danmaku_wait_s


def _danmaku_group(vs: Vistack) -> GroupTuning:
    return GroupTuning(f"{vs.settings.group_id}-danmaku")


pipeline.batch_handler_with_state(
    f"{GROUP}-danmaku",
    [events.DANMAKU_TOPIC],
    concurrency=1,  # one batch at a time: each video's danmaku are stored in posting order
    shape=_danmaku_batches,
    tune=_danmaku_group,
)(danmaku.on_danmaku)
