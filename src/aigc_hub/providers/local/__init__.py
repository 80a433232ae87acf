"""A real, local AI-video provider process: the ``local`` provider (``aigc-hub provider serve``).

It speaks a small vendor-style HTTP API (jobs with idempotent submit, status, cancel),
renders real H.264 clips with FFmpeg, serves them behind signed expiring URLs and reports
every change with Standard Webhooks. With ``--faults`` it also answers ``/_faults`` and
``/_stats`` so tests can make it misbehave like real vendors do (429, 503, lost, duplicated
or reordered webhooks, submits that are taken but never answered, expired outputs).

Modules: :mod:`.catalog` (models, prices), :mod:`.jobs` (job store), :mod:`.faults`,
:mod:`.renderer` (FFmpeg), :mod:`.outputs` (signed URLs), :mod:`.delivery` (webhooks),
:mod:`.runner` (a job's life), :mod:`.app` (routes).
"""
