"""Words for a figure that does not clear the project's no-change band
(:data:`lightning_bottleneck.thresholds.NO_CHANGE_BAND`): the notes that say why a setting was not advised."""

from __future__ import annotations

from lightning_bottleneck.thresholds import NO_CHANGE_BAND


def band_words(ratio: float) -> str:
    """ "within the 3% noise band" for a ratio inside it, "slower" for one below it (a 0.80x is not noise)."""
    if ratio < 1.0 - NO_CHANGE_BAND:
        return f"slower, below the {NO_CHANGE_BAND:.0%} noise band"
    return f"within the {NO_CHANGE_BAND:.0%} noise band"
