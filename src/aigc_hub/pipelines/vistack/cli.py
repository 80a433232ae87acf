"""``aigc-hub vistack``: the video site's commands."""

from __future__ import annotations

import typer

app = typer.Typer(help="Vistack (seed 002): videos, the transcoder, danmaku and comments.")
