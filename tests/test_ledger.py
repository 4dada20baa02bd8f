"""The whole-fit ledger: the pure data model, and the live timing on real tiny Lightning fits."""

from __future__ import annotations

import json

import pytest

from lightning_bottleneck.analysis.ledger import FitLedger, HookTime, merge_ranks
from lightning_bottleneck.categories import FitPart


def _ledger(fit_s: float = 10.0, **parts: float) -> FitLedger:
    return FitLedger(
        fit_s=fit_s,
        parts={FitPart(k): v for k, v in parts.items()},
        train_steps=100,
        epochs=2,
        validation_runs=4,
        validation_batches=40,
        validation_loader_wait_s=2.0,
        validation_compute_s=1.0,
        checkpoint_saves=5,
        log_calls=20,
        hooks={"Slow.on_train_batch_end": HookTime(0.5, 100)},
    )


def test_unaccounted_is_what_the_timed_parts_leave_and_every_part_is_present() -> None:
    ledger = _ledger(training_steps=5.0, validation=3.0, checkpointing=1.0)
    assert list(ledger.parts) == list(FitPart)
    assert ledger.parts[FitPart.UNACCOUNTED] == pytest.approx(1.0)
    assert ledger.share(FitPart.VALIDATION) == pytest.approx(0.3)
    assert ledger.per_validation_s() == pytest.approx(0.75)
    assert ledger.per_save_s() == pytest.approx(0.2)
    assert ledger.largest_outside_part() is FitPart.VALIDATION
    assert sum(ledger.parts.values()) == pytest.approx(ledger.fit_s)
    over = _ledger(fit_s=1.0, training_steps=2.0)
    assert over.parts[FitPart.UNACCOUNTED] == 0.0


def test_to_dict_round_trips_through_json() -> None:
    ledger = _ledger(training_steps=5.0, validation=3.0, logging=0.5)
    d = json.loads(json.dumps(ledger.to_dict()))
    assert d["shares"]["validation"] == pytest.approx(0.3)
    d["cause"] = "validation"  # what the report adds; from_dict ignores it
    d["parts"]["a_part_from_a_newer_version"] = 1.0
    back = FitLedger.from_dict(d)
    assert back == ledger


def test_merge_ranks_takes_the_slowest_rank_per_part() -> None:
    a = _ledger(fit_s=10.0, training_steps=6.0, validation=2.0)
    b = _ledger(fit_s=11.0, training_steps=5.0, validation=4.0)
    b.hooks["Slow.on_train_batch_end"] = HookTime(0.9, 100)
    merged = merge_ranks([a, b])
    assert merged.fit_s == 11.0
    assert merged.parts[FitPart.TRAINING_STEPS] == 6.0
    assert merged.parts[FitPart.VALIDATION] == 4.0
    assert merged.hooks["Slow.on_train_batch_end"].seconds == pytest.approx(0.9)
    assert merge_ranks([a]) is a
    with pytest.raises(ValueError):
        merge_ranks([])
