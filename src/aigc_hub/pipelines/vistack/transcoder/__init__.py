"""Vistack's transcoder, a gRPC service of its own (seed 002's ``transcoder``):
``transcoder.proto`` and its generated stubs, the servicer (``service.py``), the server
(``server.py``), its settings and ``aigc-hub vistack transcoder serve`` (``cli.py``)."""
