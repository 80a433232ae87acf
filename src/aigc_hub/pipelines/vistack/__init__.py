"""Pipeline ``vistack`` (seed 002): a video site's jobs on the backbone.

* ``pipeline.py`` — the ``Pipeline``: topics, consumer groups, scanners, routes.
* ``settings.py`` — ``VistackSettings`` (``AIGC_HUB_VISTACK_*``, the seed's ``[kafka]``).
* ``events.py`` — the seed's four topics and the payloads, each with its ``v`` (roadmap).
* ``models.py``, ``states.py``, ``records.py`` — videos (the seed's DB state machine),
  danmaku and comments; guarded, fenced moves with history.
* ``rules.py`` — the seed's retry delay, its lease, counter and ZSET names.
* ``uploads.py`` — upload sessions of source videos (the media plane's, in parts).
* ``services.py`` — videos and deletes: shared by HTTP and the CLI.
* ``playback.py`` — signed playback of a video's DASH manifest and segments.
* ``handlers/`` — the consumer groups' handlers (transcode, delete_file, danmaku, comment).
* ``scanners.py`` — the retry dispatcher and the watchdog (leader-run).
* ``transcoder/`` — the transcoder, a gRPC service of its own (``ProcessVideo``).
* ``adapters/transcoder.py`` — the worker's client of that service.
* ``http.py``, ``cli.py`` — routes under ``/v1/vistack`` and ``aigc-hub vistack``.
* ``up.py`` — ``aigc-hub up`` serves one transcoder on embedded defaults.
"""
