"""Every category appears in every table that must know it: adding a bucket fails here until all agree."""

from __future__ import annotations

import pytest

import lightning_bottleneck.thresholds as T
from lightning_bottleneck.advice import ADVISORS
from lightning_bottleneck.analysis.breakdown import breakdown_from_summary, breakdown_from_timing
from lightning_bottleneck.analysis.summary import TraceSummary
from lightning_bottleneck.categories import BUCKET_SHARES, Category, FindingKind, FitPart, Share
from lightning_bottleneck.output.text import HEADLINES
from lightning_bottleneck.rules import SHARE_RULES
from lightning_bottleneck.rules.stragglers import OWN_WORK_BUCKETS as STRAGGLER_BUCKETS

#: Categories that are not a share of step time (see categories.BUCKET_SHARES).
#: ``rest_of_fit`` is a share of the whole fit (the ledger's), not of step time.
NOT_TIME_BUCKETS = {Category.MEMORY, Category.UNKNOWN, Category.REST_OF_FIT}


def test_time_buckets_are_every_category_but_memory_and_unknown() -> None:
    assert set(BUCKET_SHARES) == set(Category) - NOT_TIME_BUCKETS
    assert set(BUCKET_SHARES.values()) == set(Share) - {Share.OTHER}


@pytest.mark.parametrize(
    "breakdown",
    [
        breakdown_from_summary(TraceSummary(num_steps=5, data_wait=0.2, host_op_long=0.5)),
        breakdown_from_summary(
            TraceSummary(num_steps=5, device="cuda", device_busy=0.6, device_idle=0.4, device_compute=0.5)
        ),
        breakdown_from_timing(0.3),
    ],
    ids=["cpu-trace", "gpu-trace", "timing-only"],
)
def test_the_breakdown_has_every_share(breakdown: dict[str, float]) -> None:
    assert set(breakdown) == {str(s) for s in Share}


def test_every_time_bucket_has_one_share_rule_on_its_share() -> None:
    rules = {rule.category: rule.share for rule in SHARE_RULES}
    assert len(rules) == len(SHARE_RULES)
    assert rules == BUCKET_SHARES
    for rule in SHARE_RULES:
        assert 0 < rule.medium <= rule.high <= 1, rule


def test_every_share_rule_has_a_recoverable_fraction() -> None:
    assert set(T.RECOVERABLE) == {rule.category.value for rule in SHARE_RULES}
    assert all(0 < v <= 1 for v in T.RECOVERABLE.values())


def test_straggler_buckets_are_the_time_buckets_but_communication() -> None:
    assert set(STRAGGLER_BUCKETS.values()) == set(BUCKET_SHARES) - {Category.COMMUNICATION}
    assert all(BUCKET_SHARES[c] == Share(k) for k, c in STRAGGLER_BUCKETS.items())


def test_every_category_has_a_headline() -> None:
    assert set(HEADLINES) == set(Category)


def test_every_category_but_unknown_has_an_advisor_and_a_finding_kind() -> None:
    assert set(ADVISORS) == set(Category) - {Category.UNKNOWN}
    assert {c.value for c in Category} - {Category.UNKNOWN.value} <= {k.value for k in FindingKind}
    for category in set(Category) - {Category.UNKNOWN}:
        assert FindingKind.of(category).value == category.value


def test_every_part_outside_the_step_has_one_rule_with_named_thresholds() -> None:
    from lightning_bottleneck.analysis.ledger import OUTSIDE_STEP_PARTS
    from lightning_bottleneck.rules.fit import PART_RULES

    parts = [rule.part for rule in PART_RULES]
    assert len(parts) == len(set(parts))
    # compile warm-up and set-up/teardown are shown in the ledger but have no Lightning setting to advise
    assert set(parts) == set(OUTSIDE_STEP_PARTS) - {FitPart.COMPILE_WARMUP, FitPart.SETUP_TEARDOWN}
    for rule in PART_RULES:
        assert 0 < rule.medium <= rule.high <= 1, rule
    assert 0 < T.FIT_PART_TARGET_SHARE < T.FIT_PART_SHARE_MEDIUM


def test_the_rest_of_fit_is_in_every_table() -> None:
    assert Category.REST_OF_FIT in HEADLINES
    assert Category.REST_OF_FIT in ADVISORS
    assert FindingKind.of(Category.REST_OF_FIT) == FindingKind.REST_OF_FIT
    assert Category.REST_OF_FIT not in BUCKET_SHARES
    assert Category.REST_OF_FIT not in STRAGGLER_BUCKETS.values()
