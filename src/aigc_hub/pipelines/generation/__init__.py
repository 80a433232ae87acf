"""The AI video generation pipeline (seed 004): tasks, scheduler, providers, ledger, assets
and the media stage.

A map of the folder (the shape ``docs/pipelines.md`` describes), with the seed 004 sections
each module implements:

* ``pipeline.py`` — the ``Pipeline`` declaration, the only module that wires (§3.2.9 groups);
* ``settings.py`` — ``GenerationSettings``, env prefix ``AIGC_HUB_GEN_``;
* ``events.py`` — its topics (§3.5.3) and versioned event payloads;
* ``models.py`` — its tables (§3.5.1);
* ``states.py`` — task and attempt states and the allowed moves (§3.6–3.7);
* ``records.py`` — the repository: load a task, move a task or an attempt (§3.5.1, §3.8.2);
* ``rules.py`` — pure decisions: routing order, fair order and priority aging, slot scopes,
  poll backoff, how an observation moves a task (§3.5.4, §3.6.3, §3.6.4, §3.7.2, §3.9.4);
* ``services.py`` — commands and queries used by HTTP, the CLI and scanners (§3.6.2);
* ``handlers/`` — one module per consumer group: ``scheduler``, ``submitter`` (§3.7.1),
  ``observer`` (§3.6.4), ``poller`` (§3.6.4), ``fetcher`` (§3.6.5, also the urgent queue),
  ``media`` (§3.3.3-9: routes to ``media_variants`` and ``asset_probe``), ``reconciler``
  (the orphan scanner's commands);
* ``scanners.py`` — watchdogs under leader leases (§3.10.2); ``media_scanners.py`` — those
  of the media stages (expiring output URLs, orphan objects, missing objects, abandoned
  uploads);
* ``http.py`` — task and credit routes (§3.6.2) and the callback gateway (§3.6.4, §3.7);
* ``assets.py``, ``assets_http.py`` — uploads in presigned parts, their checks and the asset
  routes (§3.3.3-3, §3.6.1); ``playback.py`` — playback grants and hub-served HLS playlists
  (§3.4 steps 35–36); ``gallery.py`` — what the console's gallery shows of a tenant's tasks;
* ``cli.py`` — ``aigc-hub gen`` (through the CLI kit);
* ``state.py`` — the per-hub state (``Generation``) the hub builds at start;
* ``up.py`` — the ``up`` hook: serves the local provider on embedded defaults;
* ``ledger.py`` — credits on the backbone's ledger (§3.8.5);
* ``providers.py`` — adapters by name with their breakers, and routing (§3.6.3);
* ``requests.py`` — a task row as a provider-neutral request;
* ``adapters/`` — one client per provider (§3.2.6), the only code that speaks a vendor's API.
"""
