"""``python -m aigc_hub`` runs the ``aigc-hub`` command line."""

from aigc_hub.cli.main import app

app(prog_name="aigc-hub")
