"""Pipeline ``documents`` (seed 003): upload → parse → chunk → embed → vector store → search.

The folder map (one line per module, with the seed sections it implements):

- ``parsing``: the formats a user brings (text, Markdown, HTML, PDF, DOCX) to plain text,
  within size and page limits (§3.4, §4.1).
- ``splitting``: recursive, token-aware chunks with offsets (§4.1).
- ``adapters/``: the embedding models and analyzers behind one protocol each (§4.2, §7).
- ``vectors/``: the vector stores, SQLite + numpy embedded and pgvector at scale (§4.3).
"""
