"""Pipeline ``documents`` (seed 003): upload → parse → chunk → embed → vector store → search,
and the AI analysis of each document.

The folder map (one line per module, with the seed sections it implements):

- ``pipeline``: the only module that wires: topics, events, consumer groups (§4, §7), the
  routes, the seed's DLQ API, the admission check, the ``up`` hook.
- ``settings``: ``DocumentsSettings`` (``AIGC_HUB_DOCS_*``): limits, chunking, models,
  stores, the consumer settings (§6.1) and backpressure thresholds (§7).
- ``events``: the six topics' five declared ones (§2.2) and the event records (§3.3).
- ``models``, ``states``, ``records``: tasks (the seed's ``TaskStatus``, §3.4), their
  history and chunks; the task state machine; load and guarded moves.
- ``services``: submit (§3.4), task, list, search, delete, shared by HTTP and the CLI.
- ``rules``: pure decisions (the hybrid search's ranking).
- ``formats``, ``markup``, ``parsing``: the formats a user brings to plain text within
  limits (§4.1).
- ``splitting``: recursive, token-aware chunks with offsets (§4.1).
- ``handlers/``: one module per consumer group: ``chunking`` (§4.1), ``embedding`` (§4.2),
  ``storage`` (§4.3), ``analysis`` (§7).
- ``adapters/``: the embedding models (``minilm``, ``openai_embeddings``) and analyzers
  (``local_analyzer``, ``openai_chat``) behind one protocol each (``embedder``,
  ``analyzer``).
- ``vectors/``: the vector stores, SQLite + numpy embedded and pgvector at scale (§4.3).
- ``backpressure``: lag-based and overload-based backpressure (§7).
- ``dlq_http``: the seed's DLQ management API (§6.3) over the backbone's dead letters.
- ``http``, ``cli``, ``up``: the routes, ``aigc-hub docs``, the word ``up`` says at start.
- ``state``: the per-hub state (settings, model, analyzer, stores).
- ``policies/``: the shipped compliance policy (``compliance-v1``).
"""
