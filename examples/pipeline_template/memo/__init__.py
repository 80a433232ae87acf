"""The ``memo`` pipeline: a tenant writes a note, a consumer stamps it, a scanner archives it.

The folder: ``pipeline.py`` wires everything (the only module the hub loads), ``settings.py``
(``AIGC_HUB_MEMO_*``), ``models.py`` (its table), ``migrations/`` (its Alembic branch),
``handlers.py`` (consumer group ``memo-stamper``), ``scanners.py`` (``memo-archiver``),
``http.py`` (``/v1/memo/notes``) and ``cli.py`` (``aigc-hub memo``).
"""
