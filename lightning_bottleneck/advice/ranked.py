"""Advice ordered by time saved: each recommendation carries the candidate fix that backs it.

:func:`ranked_recommendations` takes the advisors' recommendations and a
:class:`~lightning_bottleneck.rules.ranking.Ranking`, drops what was measured no faster, attaches to each
recommendation its saving (``saved_ms_per_step``, ``saved_s``), its ``method`` ("measured"/"estimated"),
``basis`` and speed-ups, adds a recommendation for a measured win no advisor named, says what each figure is
(:func:`prediction_kind`: a measured point, a measured range at most x1.44 wide, or a bound) and orders the list:
backed recommendations by time saved, then the others (no saving known) by their bucket's best fix.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import lightning_bottleneck.thresholds as T
from lightning_bottleneck.categories import PredictionKind, Provenance
from lightning_bottleneck.report import Recommendation
from lightning_bottleneck.rules.noise_band import not_advised

if TYPE_CHECKING:
    from lightning_bottleneck.rules.ranking import Candidate, Ranking

__all__ = ["prediction_kind", "ranked_recommendations"]

#: Settings whose one recommendation may back a candidate of another bucket (advice keeps one
#: recommendation per setting, so the compute bucket's compile advice also stands for overhead's).
SHARED_KEYS = ("compile", "precision")


def _measured_no_faster(rec: Recommendation, tried: list[Candidate]) -> Candidate | None:
    for c in tried:
        if (
            c.key is not None
            and c.key in c.settings
            and rec.settings.get(c.key) == c.settings[c.key]
            and (rec.kind == c.category.value or c.key in SHARED_KEYS)
        ):
            return c
    return None


def _match(c: Candidate, recs: list[Recommendation], backed: dict[int, list[Candidate]]) -> int | None:
    if c.lever is not None:  # the rule's lever and the advice that words it carry one stable id
        for i, r in enumerate(recs):
            if r.lever == c.lever:
                return i
    same = [i for i, r in enumerate(recs) if r.kind == c.category.value]
    if c.key is not None:
        for i in same:
            if c.key in recs[i].settings:
                return i
        if c.key in SHARED_KEYS:  # one compile/precision recommendation serves compute and overhead alike
            for i, r in enumerate(recs):
                if c.key in r.settings and i not in backed:
                    return i
    if c.method == Provenance.ESTIMATED or c.key is None or c.key == "cheaper_samples":
        for i in same:
            if i not in backed:
                return i
    return None


#: A candidate's measured one-off cost (seconds) and the training steps its saving takes to pay it back.
ONE_OFF_KEYS = ("one_off_s", "break_even_steps")

#: How to apply a measured lever no advisor named, by its setting (``{v}``: the setting's value).
TRIAL_SNIPPETS = {
    "precision": 'Trainer(precision="{v}")',
    "float32_matmul_precision": 'torch.set_float32_matmul_precision("{v}")',
    "channels_last": "model = model.to(memory_format=torch.channels_last)  # and the inputs",
    "compile": "model = torch.compile(model)",
    "batch_size": "DataLoader(dataset, batch_size={v})  # the learning rate may need retuning",
}


def _from_trial(c: Candidate) -> Recommendation:
    key = c.key or ""
    snippet = TRIAL_SNIPPETS.get(key, "# " + ", ".join(f"{k}={v!r}" for k, v in c.settings.items()))
    return Recommendation(
        kind=c.category.value,
        title=f"Use {c.name}: measured faster on this model",
        detail=f"A trial on this run's own model and batch: {c.basis}.",
        settings=dict(c.settings),
        snippet=snippet.format(v=c.settings.get(key)),
    )


def _rescaled(
    span: tuple[float, float], point: float, r: Recommendation, ranking: Ranking
) -> tuple[float, float]:
    """An advisor's range around its ``point`` speed-up, on the whole run's scale: each end's saving relative to
    the point's (``1 - 1/x``) times the recommendation's saving, through the run's account."""
    base = 1.0 - 1.0 / point
    ends = []
    for x in span:
        saved = (r.saved_ms_per_step or 0.0) * max(0.0, 1.0 - 1.0 / x) / base if x > 0 else 0.0
        whole = ranking.account.speedup(saved)
        ends.append(whole if whole is not None else (x if saved > 0 else 1.0))
    return (min(ends[0], r.expected_speedup or ends[0]), max(ends[1], r.expected_speedup or ends[1]))


def prediction_kind(r: Recommendation) -> PredictionKind | None:
    """What ``r``'s figure is: a point or a range timed on this run (the saving measured, or computed from measured
    seconds) when the range is at most MEASURED_RANGE_WIDTH_MAX wide, else a bound at its high end; None without a
    figure."""
    if r.expected_speedup is None and r.expected_speedup_range is None:
        return None
    if r.method in (Provenance.MEASURED, Provenance.COMPUTED) and r.expected_speedup is not None:
        if r.expected_speedup_range is None:
            return PredictionKind.MEASURED
        lo, hi = r.expected_speedup_range
        if lo > 0 and hi / lo <= T.MEASURED_RANGE_WIDTH_MAX:
            return PredictionKind.MEASURED_RANGE
    return PredictionKind.BOUND


def ranked_recommendations(recs: list[Recommendation], ranking: Ranking) -> list[Recommendation]:
    out: list[Recommendation] = []
    for r in recs:
        veto = _measured_no_faster(r, ranking.tried)
        if veto is None:
            out.append(r)
    backed: dict[int, list[Candidate]] = {}
    for c in ranking.candidates:
        i = _match(c, out, backed)
        if i is None:
            if c.method != Provenance.MEASURED:
                continue
            out.append(_from_trial(c))
            i = len(out) - 1
        backed.setdefault(i, []).append(c)
    for i, cands in backed.items():
        r = out[i]
        r.saved_ms_per_step = sum(c.saved_ms_per_step for c in cands)
        saved = [c.saved_s for c in cands]
        r.saved_s = None if any(s is None for s in saved) else sum(s or 0.0 for s in saved)
        methods = {c.method for c in cands}
        r.method = next(
            (m for m in (Provenance.MEASURED, Provenance.COMPUTED) if m in methods), Provenance.ESTIMATED
        )
        r.basis = "; ".join(c.basis for c in cands)
        for c in cands:  # a measured one-off cost (a compile) and the steps that pay it back
            for key in ONE_OFF_KEYS:
                if key in c.evidence:
                    r.evidence[key] = c.evidence[key]
        measured = [c.measured_speedup for c in cands if c.measured_speedup is not None]
        if measured:
            r.measured_speedup = max(measured)
        if r.expected_speedup is None or len(cands) > 1 or ranking.account.fit_ms_per_step is not None:
            old, r.expected_speedup = r.expected_speedup, ranking.account.speedup(r.saved_ms_per_step)
            if r.expected_speedup_range is not None and old and old > 1.0 and r.expected_speedup:
                # the advisor's range was on its own scale (the step): each end saves in proportion to the point
                r.expected_speedup_range = _rescaled(r.expected_speedup_range, old, r, ranking)
        bounded = [
            c
            for c in cands
            if "saved_high_ms_per_step" in c.evidence or "saved_low_ms_per_step" in c.evidence
        ]
        more = sum(
            max(0.0, c.evidence.get("saved_high_ms_per_step", 0.0) - c.saved_ms_per_step) for c in bounded
        )
        less = sum(
            max(0.0, c.saved_ms_per_step - c.evidence.get("saved_low_ms_per_step", c.saved_ms_per_step))
            for c in bounded
        )
        top = ranking.account.speedup(r.saved_ms_per_step + more) if more > 0 else None
        bottom = ranking.account.speedup(r.saved_ms_per_step - less) if less > 0 else None
        if r.method == Provenance.ESTIMATED and r.expected_speedup and r.expected_speedup_range is None:
            # not measured on this run: a share of the step times a published speed-up (or "all of the data
            # wait if samples cost nothing") is an upper bound, no 20% prediction; a candidate may name a higher
            # bound than its typical figure (compile on per-op overhead: OVERHEAD_RECOVERABLE_MAX)
            r.expected_speedup_range = (min(1.0, r.expected_speedup), max(r.expected_speedup, top or 0.0))
            r.uncertainty = "estimated from the trace, not measured on this run"
        elif (
            r.expected_speedup
            and top
            and top > r.expected_speedup
            and not bottom
            and r.expected_speedup_range is None
            and all(c.ceiling_only for c in bounded)
        ):
            # the point is computed from this run's timings (a hook's own seconds, the logger writes'); what it may
            # leave out (the step after each call running slower on the caches the call left) is bounded, not
            # measured: the point is the prediction, the bound said beside it as a ceiling ("up to X"), no range
            # from the point up, whose low end a point a hair over the applied speed-up misses. heavy_callback
            # (issue 28): "up to 3.06x" for 1.91x applied where the point read 1.86x; logging_heavy (seventeenth
            # session): 1.30-1.87x for 1.29x applied, the point 0.01 off
            r.speedup_ceiling = top
            why = [str(c.evidence["range_why"]) for c in bounded if c.evidence.get("range_why")]
            r.uncertainty = "; ".join([r.uncertainty, *why] if r.uncertainty else why)
        elif r.expected_speedup and ((top and top > r.expected_speedup) or bottom):
            # a part the computed saving leaves out, or one it may overstate, bounded (its candidate says why:
            # `range_why`), merged with the advisor's own range when it gave one
            lo, hi = r.expected_speedup_range or (r.expected_speedup, r.expected_speedup)
            r.expected_speedup_range = (
                min(lo, r.expected_speedup, bottom or r.expected_speedup),
                max(hi, r.expected_speedup, top or r.expected_speedup),
            )
            why = [str(c.evidence["range_why"]) for c in bounded if c.evidence.get("range_why")]
            r.uncertainty = "; ".join([r.uncertainty, *why] if r.uncertainty else why)
    for i, r in enumerate(out):
        if i in backed:
            continue
        size = next((c for c in ranking.sizing if c.key in r.settings and r.kind == c.category.value), None)
        if size is not None:  # sized, not ranked: stays where the bucket order puts it
            r.saved_ms_per_step, r.saved_s, r.method, r.basis = (
                size.saved_ms_per_step, size.saved_s, size.method, size.basis,
            )  # fmt: skip
            low = ranking.account.speedup(size.saved_ms_per_step) or size.speedup
            r.expected_speedup = low
            if size.method == Provenance.MEASURED:  # timed on this model (a bigger batch's trial): a point
                r.measured_speedup = size.measured_speedup
                r.expected_speedup_range, r.uncertainty = None, ""
            elif low:
                r.expected_speedup_range = (low, max(low, float(size.evidence["speedup_max"])))
                r.uncertainty = (
                    "estimated from the trace, not measured on this run: from the per-sample work growing with "
                    "the batch to none of it growing"
                )
    for r in out:
        r.prediction_kind = prediction_kind(r)
    bucket = ranking.bucket_savings()

    def order(item: tuple[int, Recommendation]) -> tuple[int, float, int]:
        # by time saved: a prediction's saving is its printed point's; a bound is ranked by its estimated saving
        # (in the JSON, not printed: its ceiling is), so an unmeasured "up to 5x" expected to give 3x goes before
        # a measured 1.5x, and after a measured 4x
        i, r = item
        if i in backed:
            return (0, -(r.saved_ms_per_step or 0.0), i)
        return (1, -bucket.get(r.kind, 0.0), i)

    # never advise what cannot be told from no change (issue 28 item 3): a figure under the noise band, a point or
    # a ceiling alike, is no reason to change a setting; the report's notes say what was left out
    ordered = [r for _, r in sorted(enumerate(out), key=order)]
    for r in ordered:
        if r.figure is not None and r.figure < 1 + T.NO_CHANGE_BAND and r.settings:
            ranking.notes.append(not_advised(r.settings, r.title, r.figure, "over the whole run"))
    return [r for r in ordered if r.figure is None or r.figure >= 1 + T.NO_CHANGE_BAND]
