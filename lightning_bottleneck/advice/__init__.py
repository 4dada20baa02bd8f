"""Advice: findings and ranked candidates -> recommendations in words and settings (re-exports).

:func:`~lightning_bottleneck.advice.recommend.advise` is the entry point (per-bucket advisors, the loader
rule's changes in words, the ranking's order); the words for one area live in their own module.
"""

from lightning_bottleneck.advice.recommend import ADVISORS, advise, input_advice, suggested_workers

__all__ = ["ADVISORS", "advise", "input_advice", "suggested_workers"]
