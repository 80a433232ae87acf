"""The ``aigc-hub`` command line: Typer apps, one module per command group."""
