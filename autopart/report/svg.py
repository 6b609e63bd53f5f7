"""Small helpers shared by the drawings: target colours, tints, escaping and number format."""

from __future__ import annotations

from collections.abc import Iterable
from html import escape

PALETTE = (
    "#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2",
    "#b07aa1", "#edc948", "#ff9da7", "#9c755f", "#2f9e9e",
)  # fmt: skip
COPY_COLOUR = "#37474f"
UNKNOWN_COLOUR = "#b0b7bf"


def target_colours(targets: Iterable[str]) -> dict[str, str]:
    """A distinct colour per target, host targets first, stable for the same set of targets."""
    ordered = sorted(set(targets), key=lambda t: (not t.startswith("cpu"), t))
    return {target: PALETTE[i % len(PALETTE)] for i, target in enumerate(ordered)}


def tint(colour: str, amount: float) -> str:
    """``colour`` (``#rrggbb``) mixed with white; ``amount`` 0 keeps it, 1 gives white."""
    channels = [int(colour[i : i + 2], 16) for i in (1, 3, 5)]
    mixed = [round(c + (255 - c) * amount) for c in channels]
    return "#" + "".join(f"{c:02x}" for c in mixed)


def attr(text: object) -> str:
    """``text`` escaped for an attribute value or element content."""
    return escape(str(text), quote=True)


def clip(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, ending in an ellipsis when cut."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def num(value: float) -> str:
    """A coordinate with at most one decimal, for compact SVG."""
    return f"{value:.1f}".rstrip("0").rstrip(".")
