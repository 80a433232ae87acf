"""The HTTP API: :func:`app.create_app` builds it around a started hub (``bootstrap.Hub``)."""
