"""Autotune's decisions, torch-free: which measured DataLoader setting to apply, whether to keep it, and which
advice its switch settled.

* :func:`choose`: the loader plan's measured recommendation on the mid-run report (an ``input`` advice that rests
  on the loader probe's ladder), reduced to the settings autotune may change (:data:`AUTOTUNE_SETTINGS`: nothing
  that changes what the model learns); ``pin_memory`` only on a CUDA run.
* :func:`decide`: the steps after the switch against the steps before, with the same noise-aware comparison as
  ``lightning-bottleneck compare`` (a seeded bootstrap interval of the step-time ratio, the
  :data:`~lightning_bottleneck.thresholds.NO_CHANGE_BAND`), on the *mean* step time with the epoch-start
  waits in (a worker start-up paid once per epoch is a cost of the setting the median would not see). Kept only
  when faster beyond noise; anything else is switched back.
* :func:`race`: once the setting is kept, the worker count the probe left to the run (:func:`alternative`) runs
  for one epoch; the faster of the two on the mean step stays.
* :func:`settled`: at the end of fit, the advice the switch already answered (not advised again).
* :func:`restart_bound` / :func:`restart_fix`: the one case decided before any profiling, at the end of the first
  epoch: workers that restart every epoch spent most of it starting up. The fix is ``num_workers=0`` when loading
  in the training process (timed there) costs the epochs left less than one more start-up, else
  ``persistent_workers=True`` (the same workers, started once more, then kept). When the mid-run verdict has no
  measured loader setting to apply, the same fix for a smaller start-up share (:data:`RESTART_SHARE_AFTER_VERDICT`).

Example::

    choice = choose(midrun_report, accelerator="cpu")  # .settings (None: nothing), .reason, .clean_steps
    decision = decide(before_ms, after_ms)
    decision.keep, decision.ratio, decision.interval
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

from lightning_bottleneck.autotune_record import APPLIED, BASIS_VERDICT, KEPT, UNDONE, AutotuneRecord
from lightning_bottleneck.bootstrap import HELPED, HURT, INCONCLUSIVE, NO_CHANGE, ratio_interval
from lightning_bottleneck.categories import Category
from lightning_bottleneck.report import Recommendation, Report
from lightning_bottleneck.rules.loader_pace import MEASURED_GAIN_MIN
from lightning_bottleneck.thresholds import EPOCH_STALL_MIN_MS, NO_CHANGE_BAND
from lightning_bottleneck.vocabulary import TORCH_THREADS

__all__ = [
    "AUTOTUNE_SETTINGS",
    "MIN_CONFIRM_STEPS",
    "MIN_EPOCHS_LEFT",
    "MIN_STEPS_AFTER_CHECK",
    "RESTART_SHARE_AFTER_VERDICT",
    "RESTART_SHARE_MIN",
    "Decision",
    "RaceResult",
    "alternative",
    "choose",
    "decide",
    "race",
    "restart_bound",
    "restart_fix",
    "restart_saving_ms",
    "settled",
]

#: The DataLoader arguments autotune may change: how batches are produced, never which or in what order.
#: With them, the training process's intra-op threads beside the workers where the step runs on the CPU
#: (``torch_threads``, measure/host_threads.py): how many threads compute each op, not what they compute.
AUTOTUNE_SETTINGS = ("num_workers", "persistent_workers", "prefetch_factor", "pin_memory", TORCH_THREADS)
#: Steps timed after the switch before it is judged (at least; and at least one whole epoch): enough for a
#: bootstrap interval of the mean to separate a 10% change from the noise of a shared 2-core machine.
MIN_CONFIRM_STEPS = 20
#: A mid-epoch switch waits this many steps after the mid-run verdict, and those steps are what it is judged
#: against: the steps before the verdict are the fit's warm-up, the profiled window and the window's analysis in
#: the child process (on a 2-core machine it competes with the step). Issue 29's cpu_transform, where 2 workers
#: train no faster (3.04-3.14 s against 3.15-3.21 s for the whole fit, two rounds each), kept them as "2.89x":
#: its ten steps before were two warm-up steps of 94 and 56 ms and six of ~17 ms beside the analysis, against
#: 12 ms steps outside the diagnosis. Eight steps cost io_wait (48 ms steps, 7 ms with workers) ~0.3 s of the
#: 14 s the switch saves.
CLEAN_BEFORE_STEPS = 8
#: Fewer steps than this after the verdict (it came at an epoch's last steps and the switch is at the boundary):
#: the comparison takes every timed step before the switch instead, the profiled ones left out.
CLEAN_BEFORE_MIN = 4
#: A measured setting whose advice predicts at least this speed-up waits only CLEAN_BEFORE_MIN steps: a change of
#: 2x or more stands far outside the interval of the mean of four steps (the steps of one setting vary by 10-20%
#: here), and a setting that does not deliver it reads inconclusive on fewer steps, so it is undone as before. The
#: four steps not waited are the slowest of the fit: io_wait's 64 ms steps, 0.26 s of a 16 s fit.
LARGE_GAIN_MIN = 2.0
#: Epochs the fit must still run after the boundary where the setting would be applied: one to time it, one
#: at least to profit from it (a setting applied for the last epoch could never be checked or undone).
MIN_EPOCHS_LEFT = 2
#: A fit with fewer epochs left than MIN_EPOCHS_LEFT (one long epoch, or ``max_steps`` inside the first) is switched
#: mid-epoch, where its sampler's position is kept, and checked MIN_CONFIRM_STEPS steps later inside that epoch
#: (undone there exactly: live/loader_switch.back_to_own_setting); only when the epoch still runs at least this many
#: steps after the check. The same count as the check: a setting the fit would run only a few steps after its
#: check could not pay back the steps it was checked on (an undone setting costs up to MIN_CONFIRM_STEPS slow
#: steps; a kept one gains over the check's steps and these).
MIN_STEPS_AFTER_CHECK = MIN_CONFIRM_STEPS
#: Autotune switches at the end of the first epoch, before the profiling window and its verdict, when workers that
#: restart every epoch (``num_workers > 0`` without ``persistent_workers``) spent at least this share of that
#: epoch before its first batch: every epoch left would then take at least twice its steps' time, a loss that no
#: step-level noise fakes and that the window's verdict would only confirm an epoch or two later (issue 29's
#: worker_restart: 0.45 s of start-up against 10 steps of 2 ms an epoch, so waiting for the verdict at step ~20 and
#: the epoch-3 boundary cost two more start-ups than the whole best fit takes). Below it the verdict decides. Where
#: the first epoch's wait shows only part of the start-up (Lightning starts that epoch's workers before the fit's
#: on_train_start hooks), the next epoch's end before the verdict checks again with the later epochs' waits.
RESTART_SHARE_MIN = 0.5
#: Once the mid-run verdict had no measured loader setting to apply (the loader probe found no worker count
#: faster: the steady loading keeps up), workers restarted every epoch whose start-up (an epoch's wait for its first
#: batch) is at least this share of an epoch (that wait plus the first epoch's steps) get the same fix at the epoch
#: boundary after the verdict: nothing else would be applied, and the start-up is a loss of the run that the fix
#: removes whole (``persistent_workers=True`` pays it once more, then never). A fifth: the check then sees a mean
#: step at least a fifth shorter (1.25x), outside the no-change band (thresholds.NO_CHANGE_BAND) and, over an
#: epoch's steps, the 10-20% spread of single steps here. Issue 29's worker_restart, whose 0.4 s start-up
#: is about its 80 steps' time on a slow VM: one fit in four fell under RESTART_SHARE_MIN at the first epoch and was
#: left untouched (6.01 s against 1.42-1.60 s for the three switched, twenty-eighth session).
RESTART_SHARE_AFTER_VERDICT = 0.2


class Choice(NamedTuple):
    """What autotune applies (None: nothing, ``reason`` says why in one sentence); for a verdict's setting switched
    mid-epoch, how many steps after the verdict it waits and is judged against; the setting raced against it
    for one epoch once it is kept (None: none; the worker count the probe left to the run, :func:`alternative`);
    and whether it is switched, checked and kept or undone within the running epoch (``in_epoch``: the fit has
    fewer than :data:`MIN_EPOCHS_LEFT` epochs left, see :data:`MIN_STEPS_AFTER_CHECK`); and what it rests on
    (``basis``: the verdict's measured advice, or the workers' start-up: :func:`restart_fix`)."""

    settings: dict[str, Any] | None
    reason: str = ""
    clean_steps: int = CLEAN_BEFORE_STEPS
    alternative: dict[str, Any] | None = None
    in_epoch: bool = False
    basis: str = BASIS_VERDICT  # what it rests on (autotune_record.BASES)


def alternative(settings: dict[str, Any], left_to_run: list[int]) -> dict[str, Any] | None:
    """``settings`` with the worker count the loader probe left to the run (``LoaderLadder.left_to_run``: where the
    run confirms the choice, CPU-bound loading times only the core count with the step), or None."""
    workers = settings.get("num_workers")
    others = [w for w in left_to_run if w != workers]
    if not workers or not others:
        return None
    return {**settings, "num_workers": others[0]}


def choose(report: Report | None, accelerator: str | None, left_to_run: list[int] | None = None) -> Choice:
    """The settings to apply, or None with the reason in one sentence; ``left_to_run``: the worker counts the loader
    probe left for the run to time (the :attr:`Choice.alternative`)."""
    if report is None:
        return Choice(None, "no mid-run verdict was taken")
    for rec in report.recommendations:
        if rec.kind != Category.INPUT or not rec.settings or rec.where is not None:
            continue
        if "ladder" not in rec.evidence:
            continue  # estimated, not measured on the run's own loader
        settings = {k: v for k, v in rec.settings.items() if k in AUTOTUNE_SETTINGS}
        if accelerator != "cuda":
            settings.pop("pin_memory", None)
        if settings:
            large = (rec.expected_speedup or 0.0) >= LARGE_GAIN_MIN
            other = alternative(settings, left_to_run or [])
            return Choice(settings, "", CLEAN_BEFORE_MIN if large else CLEAN_BEFORE_STEPS, other)
    return Choice(
        None,
        "the mid-run report has no measured DataLoader setting to apply (no loader advice, or none measured)",
    )


@dataclass(frozen=True)
class Decision:
    keep: bool
    ratio: float | None  # mean step after / mean step before
    interval: tuple[float, float] | None
    outcome: str
    reason: str


def decide(before_ms: list[float], after_ms: list[float]) -> Decision:
    """Keep only when the steps after are faster beyond noise (the interval of the ratio below 1 and the ratio
    below ``1 - NO_CHANGE_BAND``)."""
    b = [x for x in before_ms if x > 0]
    a = [x for x in after_ms if x > 0]
    if len(b) < 2 or len(a) < 2:
        return Decision(False, None, None, INCONCLUSIVE, "too few steps timed to tell")
    ratio = (sum(a) / len(a)) / (sum(b) / len(b))
    interval = ratio_interval(b, a, statistic="mean")
    if interval is None:
        return Decision(False, ratio, None, INCONCLUSIVE, "too few steps timed to tell")
    lo, hi = interval
    if hi < 1.0 and ratio < 1.0 - NO_CHANGE_BAND:
        return Decision(True, ratio, interval, HELPED, "")
    if lo > 1.0 and ratio > 1.0 + NO_CHANGE_BAND:
        return Decision(False, ratio, interval, HURT, f"steps were {ratio:.2f}x as long")
    if lo >= 1.0 - NO_CHANGE_BAND and hi <= 1.0 + NO_CHANGE_BAND:
        return Decision(
            False, ratio, interval, NO_CHANGE, f"no change beyond the ±{NO_CHANGE_BAND:.0%} noise band"
        )
    return Decision(False, ratio, interval, INCONCLUSIVE, "not faster beyond the run's noise")


@dataclass(frozen=True)
class RaceResult:
    second_wins: bool
    ratio: float | None  # mean step with the second setting / mean step with the first
    interval: tuple[float, float] | None


def race(first_ms: list[float], second_ms: list[float]) -> RaceResult:
    """Two settings that both loaded faster than the loader as it was (the first kept by :func:`decide`, the second
    run for an epoch after it): the second stays when its steps took less time on the mean, by any margin (the
    run's own hundreds of steps each; going back costs one more start-up of the first's workers, staying nothing),
    and with fewer than :data:`MIN_CONFIRM_STEPS` steps of either the first stays."""
    a = [x for x in first_ms if x > 0]
    b = [x for x in second_ms if x > 0]
    if len(a) < MIN_CONFIRM_STEPS or len(b) < MIN_CONFIRM_STEPS:
        return RaceResult(False, None, None)
    ratio = (sum(b) / len(b)) / (sum(a) / len(a))
    return RaceResult(ratio < 1.0, ratio, ratio_interval(a, b, statistic="mean"))


def restart_bound(
    start_ms: float, epoch_steps_ms: float, share: float = RESTART_SHARE_MIN, saved_ms: float | None = None
) -> bool:
    """Whether the workers' start-up (``start_ms``: an epoch's wait for its first batch) is at least ``share`` of
    an epoch (the wait plus the first epoch's steps, ``epoch_steps_ms``; ``share``: :data:`RESTART_SHARE_MIN`
    before the verdict, :data:`RESTART_SHARE_AFTER_VERDICT` once it had nothing measured to apply) and above the
    stall floor
    (:data:`~lightning_bottleneck.thresholds.EPOCH_STALL_MIN_MS`). The caller checks that the workers restart.

    ``saved_ms``: what the fix saves an epoch, where less than the wait (:func:`restart_saving_ms`), weighed
    instead of it."""
    if start_ms < EPOCH_STALL_MIN_MS or epoch_steps_ms < 0:
        return False
    return (start_ms if saved_ms is None else saved_ms) >= share * (start_ms + epoch_steps_ms)


def restart_saving_ms(fix: dict[str, Any], start_ms: float, in_process_batch_ms: float | None) -> float:
    """What :func:`restart_fix`'s ``fix`` saves an epoch of a wait of ``start_ms`` for its first batch. Kept workers
    (``persistent_workers=True``) no longer start, but the first batch of each epoch still waits for a worker to
    load it whole (a batch loaded in this process, ``in_process_batch_ms``, as long); ``num_workers=0`` saves the
    whole wait (restart_fix weighed its loading over the epochs left). Issue 29's io_wait_workers at its own size
    (two workers, batches of 16 samples that sleep 3 ms each): a wait of 92-111 ms of which 51 ms was the first batch; kept
    workers saved 0-8% of the epoch, within the check's noise, and were undone in 3 fits of 5 (0.966x of the
    callback's fit; thirty-fourth session)."""
    if fix.get("persistent_workers") and in_process_batch_ms is not None and in_process_batch_ms > 0:
        return max(0.0, start_ms - in_process_batch_ms)
    return start_ms


def restart_fix(
    start_s: float, steps_per_epoch: int, epochs_left: int, in_process_batch_s: float | None
) -> dict[str, Any]:
    """The setting that ends the restarts, chosen on the run's own figures.

    With the workers kept (``persistent_workers=True``) the epochs left cost their steps plus one more start-up
    (the re-created loader's); loading in the training process (``num_workers=0``) costs them their steps plus
    the loading, one after the other (``in_process_batch_s`` a batch, timed in this process; ``None`` when it
    could not be timed). ``num_workers=0`` only when its loading over every epoch left, with the
    :data:`~lightning_bottleneck.rules.loader_pace.MEASURED_GAIN_MIN` margin, stays under that one start-up; the
    step then pays no wait it did not pay before, since the workers' steady wait is never below zero."""
    if in_process_batch_s is not None and in_process_batch_s >= 0:
        loading = epochs_left * steps_per_epoch * in_process_batch_s
        if loading * MEASURED_GAIN_MIN < start_s:
            return {"num_workers": 0}
    return {"persistent_workers": True}


def settled(record: AutotuneRecord, rec: Recommendation) -> bool:
    """Whether the run's own switch already answered ``rec`` (so it is not advised again at the end of fit):

    * autotune applied a setting and kept it (or the fit ended before the check): every advice to change the
      train DataLoader's worker settings is settled; the loader probe measured the loader as it was before the
      switch, and the setting now in place was timed on the run itself;
    * autotune applied it and switched back: that same setting measured not faster on this run, so it is never
      advised (other loader settings stay).
    """
    if rec.kind != Category.INPUT or rec.where is not None or not set(rec.settings) & set(AUTOTUNE_SETTINGS):
        return False  # not a setting of the train DataLoader that autotune changes
    if record.status in (KEPT, APPLIED):
        return True
    if record.status == UNDONE:
        own = {k: v for k, v in rec.settings.items() if k in AUTOTUNE_SETTINGS}
        return bool(own) and own == record.settings
    return False
