"""Rules: evidence -> findings, candidate fixes with their predicted savings, the verdict (re-exports).

The share rules, findings and the share-based verdict are in :mod:`~lightning_bottleneck.rules.shares`; the
candidates and the reported verdict in :mod:`~lightning_bottleneck.rules.ranking`; the loader rule in
:mod:`~lightning_bottleneck.rules.loader_plan`; the rest of the fit in :mod:`~lightning_bottleneck.rules.fit`.
"""

from lightning_bottleneck.rules.shares import (
    SHARE_RULES,
    ShareRule,
    Verdict,
    choose_primary,
    classify,
    final_verdict,
    memory_findings,
    share_findings,
)

__all__ = [
    "SHARE_RULES",
    "ShareRule",
    "Verdict",
    "choose_primary",
    "classify",
    "final_verdict",
    "memory_findings",
    "share_findings",
]
