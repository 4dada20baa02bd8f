"""Everything the rules look at: the typed, torch-free evidence of one run (re-exported from its modules).

``model`` holds :class:`Evidence` and the live run's own records (timing, sync sites, configuration); the
other modules hold what the measurement stage (``measure/``) found, as results the offline side can read.
"""

from lightning_bottleneck.evidence.model import (
    Evidence,
    MemoryStats,
    RunConfig,
    RunLength,
    SyncSite,
    TimingStats,
)

__all__ = ["Evidence", "MemoryStats", "RunConfig", "RunLength", "SyncSite", "TimingStats"]
