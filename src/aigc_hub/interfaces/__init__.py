"""The ways in: HTTP (``interfaces.http``); they import both the backbone and pipelines."""
