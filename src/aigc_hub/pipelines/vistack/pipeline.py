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

from aigc_hub.pipeline import Pipeline

from . import events, models
from .settings import VistackSettings
from .state import NAME, Vistack, build_state

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
