"""The ways in: HTTP (``interfaces.http``) and the web console (``interfaces.console``);
they import both the backbone and pipelines."""
