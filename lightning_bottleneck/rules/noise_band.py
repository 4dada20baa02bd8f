"""Words for a figure that does not clear the project's no-change band
(:data:`lightning_bottleneck.thresholds.NO_CHANGE_BAND`): the notes that say why a setting was not advised."""

from __future__ import annotations

from typing import Any

from lightning_bottleneck.thresholds import NO_CHANGE_BAND


def band_words(ratio: float) -> str:
    """ "within the 3% noise band" for a ratio inside it, "slower" for one below it (a 0.80x is not noise)."""
    if ratio < 1.0 - NO_CHANGE_BAND:
        return f"slower, below the {NO_CHANGE_BAND:.0%} noise band"
    return f"within the {NO_CHANGE_BAND:.0%} noise band"


def not_advised(settings: dict[str, Any], what: str, ratio: float, scale: str) -> str:
    """The note for a setting left out under the band: the loader plan's (per epoch) and the ranking's (over the
    whole run) say it the same way."""
    shown = ", ".join(f"{k}={v!r}" for k, v in settings.items())
    return f"Not advised: {shown} ({what}), {ratio:.3f}x {scale}, {band_words(ratio)}."
