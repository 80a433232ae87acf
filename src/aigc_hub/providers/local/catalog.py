"""What the local provider offers and what it charges: its public price list."""

from __future__ import annotations

from typing import Final

MODEL: Final = "local-v1"
MODES: Final = frozenset({"text_to_video"})
MAX_DURATION_S: Final = 10
#: Credits per second of video, by (width, height): bigger frames cost more.
CREDITS_PER_SECOND: Final[dict[tuple[int, int], int]] = {
    (160, 90): 1,
    (320, 180): 2,
    (640, 360): 4,
    (1280, 720): 8,
}
MAX_PROMPT_CHARS: Final = 2000


def cost(duration_s: int, width: int, height: int) -> int:
    """Credits a finished job of this size costs (the provider's actual charge)."""
    return duration_s * CREDITS_PER_SECOND[(width, height)]


def invalid_field(
    model: str, mode: str, duration_s: int, width: int, height: int
) -> tuple[str, str] | None:
    """``(field, message)`` for the first parameter this provider cannot serve, else None."""
    if model != MODEL:
        return "model", f"unknown model {model!r}; this provider serves {MODEL!r}"
    if mode not in MODES:
        return "mode", f"mode {mode!r} is not one of {sorted(MODES)}"
    if not 1 <= duration_s <= MAX_DURATION_S:
        return "duration_s", f"duration must be 1..{MAX_DURATION_S} s"
    if (width, height) not in CREDITS_PER_SECOND:
        sizes = ", ".join(f"{w}x{h}" for w, h in CREDITS_PER_SECOND)
        return "resolution", f"{width}x{height} is not one of {sizes}"
    return None
