"""``BottleneckCallback(autotune=True)``: apply the loader probe's measured DataLoader setting to the running fit,
time it against the steps before, keep it only when faster beyond noise, else switch back.

The state machine runs at epoch ends (``on_train_epoch_end``), on every rank at the same epoch:

1. *waiting*: once the mid-run verdict exists, global rank zero picks the setting
   (:func:`~lightning_bottleneck.advice.autotune.choose`: the loader plan's measured advice, only
   ``num_workers`` / ``persistent_workers`` / ``prefetch_factor`` / ``pin_memory`` on a GPU) and broadcasts it
   through the strategy (``trainer.strategy.broadcast``); every rank re-creates its train DataLoader(s) with it
   through Lightning's own machinery (``_get_dataloader_init_args_and_kwargs`` + ``_reinstantiate_wrapped_cls``:
   the arguments the user's DataLoader was built with, captured by Lightning, with the same sampler object), and
   puts them in the fit loop's ``CombinedLoader`` (``flattened``), so the next epoch iterates them. Every train
   loader of a ``CombinedLoader`` gets the setting.
2. *trial*: after at least :data:`~lightning_bottleneck.advice.autotune.MIN_CONFIRM_STEPS` steps and one epoch,
   rank zero compares the steps after with the steps before
   (:func:`~lightning_bottleneck.advice.autotune.decide`, the noise-aware comparison of ``compare``) and
   broadcasts keep or undo; undo puts the original loaders back and shuts down the workers autotune started.
3. *done*.

The samples the model sees stay the same: the same dataset, sampler object, batch size, collate_fn,
worker_init_fn, generator and drop_last. A DataLoader draws a base seed for its workers from its generator (or
torch's global RNG) each time it creates an iterator, which a persistent iterator does only once: where the
original loader re-created its iterator every epoch and the new one persists, and where workers exhaust the sampler
that in-process loading leaves one step short of its end (or the other way round), the sampler is wrapped
(:class:`SameDraws`) so that the generator advances exactly as before and a shuffling sampler draws the same
order. A loader whose workers already persist is left alone (its iterator is re-used; a new loader would draw
once more). Random augmentations inside workers draw from per-worker seeds, which depend on the worker count.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from statistics import median
from typing import Any

import torch
from lightning.pytorch.utilities import rank_zero_info
from torch.utils.data import DataLoader, IterableDataset, Sampler

from lightning_bottleneck.advice.autotune import MIN_CONFIRM_STEPS, MIN_EPOCHS_LEFT, choose, decide, keep_line
from lightning_bottleneck.output.autotune import (
    APPLIED,
    KEPT,
    NOT_APPLIED,
    UNDONE,
    AutotuneRecord,
    autotune_line,
)

WAITING, TRIAL, DONE = "waiting", "trial", "done"


class SameDraws(Sampler):
    """The loader's own sampler, drawing from its generator exactly as it did under the previous setting.

    Two things a worker setting changes about the draws, both undone here:

    * ``DataLoader`` draws a base seed (``torch.empty((), dtype=torch.int64).random_(generator=loader.generator)``)
      when it creates an iterator, which a persistent iterator does once: with ``reused_draw``, every iteration
      after the first makes that draw first, as a new iterator would have.
    * ``RandomSampler`` draws one more permutation when asked past its last index (the tail of its ``__iter__``).
      Under Lightning's batch limit an in-process loader never asks (the epoch ends at its last batch), while
      workers always do (the main process queues indices ahead until the sampler is exhausted). ``tail=True``
      looks one index ahead, so the sampler is exhausted with its last index (the workers' draws, in-process);
      ``tail=False`` stops after ``len(sampler)`` indices (the in-process draws, with workers).
    """

    def __init__(
        self, sampler: Any, generator: torch.Generator | None, reused_draw: bool, tail: bool | None
    ) -> None:
        self.sampler = sampler
        self.generator = generator
        self.reused_draw = reused_draw
        self.tail = tail
        self.started = 0

    def __iter__(self) -> Iterator[Any]:
        self.started += 1
        if self.reused_draw and self.started > 1:  # a re-used iterator: the draw a new one would have made
            torch.empty((), dtype=torch.int64).random_(generator=self.generator)
        it = iter(self.sampler)
        if self.tail is False:
            for _, index in zip(range(len(self.sampler)), it):
                yield index
            return
        if self.tail is True:
            try:
                current = next(it)
            except StopIteration:
                return
            for following in it:
                yield current
                current = following
            yield current
            return
        yield from it

    def __len__(self) -> int:
        return len(self.sampler)

    def set_epoch(self, epoch: int) -> None:
        set_epoch = getattr(self.sampler, "set_epoch", None)
        if callable(set_epoch):
            set_epoch(epoch)


def _draws_every_epoch(dl: DataLoader) -> bool:
    return not (dl.persistent_workers and dl.num_workers > 0)


def loader_settings(dl: DataLoader, keys: Any) -> dict[str, Any]:
    values = {
        "num_workers": dl.num_workers,
        "persistent_workers": dl.persistent_workers,
        "prefetch_factor": dl.prefetch_factor,
        "pin_memory": dl.pin_memory,
    }
    return {k: values[k] for k in keys if k in values}


def recreate(dl: DataLoader, settings: dict[str, Any]) -> DataLoader:
    """``dl`` re-instantiated by Lightning with ``settings`` in place of its worker arguments; the same dataset,
    sampler object, batch size, collate_fn, worker_init_fn, generator and drop_last."""
    from lightning.fabric.utilities.data import _reinstantiate_wrapped_cls
    from lightning.pytorch.trainer.states import RunningStage
    from lightning.pytorch.utilities.data import _get_dataloader_init_args_and_kwargs

    workers = int(settings.get("num_workers", dl.num_workers))
    persistent = bool(settings.get("persistent_workers", dl.persistent_workers)) and workers > 0
    prefetch = settings.get("prefetch_factor", dl.prefetch_factor if dl.num_workers > 0 else None)
    wanted: dict[str, Any] = {
        "num_workers": workers,
        "persistent_workers": persistent,
        "prefetch_factor": prefetch if workers > 0 else None,
        "pin_memory": bool(settings.get("pin_memory", dl.pin_memory)),
    }
    if workers == 0 and dl.multiprocessing_context is not None:
        wanted["multiprocessing_context"] = None  # torch refuses a context without workers
    sampler: Any = dl.sampler
    reused_draw = persistent and _draws_every_epoch(dl)
    tail = (
        None
        if (workers > 0) == (dl.num_workers > 0) or not hasattr(dl.sampler, "__len__")
        else dl.num_workers > 0
    )
    if reused_draw or tail is not None:
        sampler = SameDraws(dl.sampler, dl.generator, reused_draw, tail)
    saved_args, kwargs = _get_dataloader_init_args_and_kwargs(dl, sampler, RunningStage.TRAINING)
    arg_names = tuple(getattr(dl, "__pl_saved_arg_names", ()))
    args = list(saved_args)
    for name, value in wanted.items():
        if name in arg_names and arg_names.index(name) < len(args):
            args[arg_names.index(name)] = value
        else:
            kwargs[name] = value
    new = _reinstantiate_wrapped_cls(dl, *args, **kwargs)
    if (
        new.worker_init_fn is not dl.worker_init_fn
    ):  # one Lightning added after construction (seed_everything)
        new.worker_init_fn = dl.worker_init_fn
    return new


class _Remaining(Sampler):
    """The batches of index lists the running in-process iterator has not fetched yet: exactly ``left`` of them,
    taken from its own batch sampler iterator (never asked one more time: that would run ``RandomSampler``'s tail
    draw, which in-process loading under Lightning never does)."""

    def __init__(self, batches: Iterator[Any], left: int) -> None:
        self.batches = batches
        self.left = left

    def __iter__(self) -> Iterator[Any]:
        for _ in range(self.left):
            try:
                yield next(self.batches)
            except StopIteration:
                return

    def __len__(self) -> int:
        return self.left


def _can_switch_mid_epoch(trainer: Any, settings: dict[str, Any]) -> bool:
    """The running epoch's loaders that would change load in-process (no read-ahead: the position in the sampler
    is the batches fetched) with automatic batching, and the fit loop's iterator holds their iterators."""
    from torch.utils.data.dataloader import _SingleProcessDataLoaderIter

    combined = getattr(trainer.fit_loop, "_combined_loader", None)
    running = getattr(getattr(combined, "_iterator", None), "iterators", None)
    if combined is None or not running or len(running) != len(combined.flattened):
        return False
    if int(settings.get("num_workers", 0)) == 0:
        return False  # nothing to gain before the next epoch from in-process loading
    batches = _epoch_batches(combined)
    found = False
    for dl, it in zip(combined.flattened, running):
        if not _eligible(dl, batches):
            continue
        if (
            dl.num_workers != 0
            or not isinstance(it, _SingleProcessDataLoaderIter)
            or dl.batch_size is None
            or set(getattr(dl, "__pl_saved_arg_names", ())) - {"dataset"}
            or len(dl) - it._num_yielded < 1
        ):
            return False
        found = True
    return found


def rest_of_epoch(dl: DataLoader, running: Any, settings: dict[str, Any]) -> DataLoader:
    """A loader for the rest of the running epoch with ``settings`` (non-persistent workers): Lightning's captured
    arguments of ``dl`` with, as its batch sampler, the index batches ``running`` (in-process) has not fetched; its
    workers' base seed comes from a generator of its own seeded with ``running``'s, so the user's generator (or
    torch's global one) draws nothing the run without autotune would not."""
    from lightning.fabric.utilities.data import _reinstantiate_wrapped_cls
    from lightning.pytorch.trainer.states import RunningStage
    from lightning.pytorch.utilities.data import _get_dataloader_init_args_and_kwargs

    left = len(dl) - running._num_yielded
    args, kwargs = _get_dataloader_init_args_and_kwargs(dl, dl.sampler, RunningStage.TRAINING)
    workers = int(settings.get("num_workers", dl.num_workers))
    generator = torch.Generator()
    generator.manual_seed(int(running._base_seed) & (2**63 - 1))
    kwargs.update(
        batch_sampler=_Remaining(running._sampler_iter, left), batch_size=1, shuffle=None, sampler=None,
        drop_last=False, generator=generator, num_workers=workers, persistent_workers=False,
        prefetch_factor=settings.get("prefetch_factor"), pin_memory=bool(settings.get("pin_memory", dl.pin_memory)),
    )  # fmt: skip
    new = _reinstantiate_wrapped_cls(dl, *args, **kwargs)
    new.worker_init_fn = dl.worker_init_fn
    return new


def _shutdown_iterator(it: Any) -> None:
    with contextlib.suppress(Exception):
        it._shutdown_workers()


def shutdown_workers(dl: Any) -> None:
    """Stop the workers of ``dl``'s persistent iterator, if any (best effort; never raises)."""
    it = getattr(dl, "_iterator", None)
    if it is None:
        return
    with contextlib.suppress(Exception):
        it._shutdown_workers()
    with contextlib.suppress(Exception):
        dl._iterator = None


class Autotuner:
    """One fit's autotune (see the module docstring); driven by the callback's epoch hooks."""

    def __init__(self, verbose: bool = True) -> None:
        self.verbose = verbose
        self.state = WAITING
        self.record: AutotuneRecord | None = None
        # the timed steps, one entry per epoch (split in two at a mid-epoch switch): (first step, other steps)
        self.entries: list[tuple[float | None, list[float]]] = []
        self.split = 0  # entries[split:] ran with the setting
        self.one_off: set[int] = (
            set()
        )  # entries whose first step paid a start-up kept or left out (see _after)
        self.ring_start = 0
        self.starts_seen = 0
        self.pending: tuple[dict[str, Any] | None, str] | None = None  # rank zero's choice, every rank
        self.originals: list[Any] = []
        self.replaced: list[Any] = []
        self.rest_of_epoch: list[Any] = []  # iterators of the loaders that finish a switched epoch
        self.switch_epoch: int | None = None
        self.switch_steps = 0
        self.before: list[float] = []

    # ------------------------------------------------------------------ timing per epoch
    def epoch_start(self, run: Any) -> None:
        self.ring_start = run.timer.step_ms.n
        self.starts_seen = len(run.timer.epoch_start_wait_ms)

    def _epoch_steps(self, run: Any) -> tuple[float | None, list[float]]:
        """This epoch's step times (profiled ones left out) and its first step (epoch-start wait + a median step)."""
        ring = run.timer.step_ms
        count = ring.n - self.ring_start
        values = ring.last(count) if count > 0 else []
        first_pos = ring.n - len(values)
        window = run.window_ring
        if window is not None:
            lo, hi = window
            values = [v for i, v in enumerate(values, start=first_pos) if not lo <= i < hi]
        waits = run.timer.epoch_start_wait_ms
        first = None
        if len(waits) > self.starts_seen:
            first = waits[self.starts_seen] + (median(values) if values else 0.0)
        return first, values

    # ------------------------------------------------------------------ the epoch end
    def epoch_end(self, run: Any, trainer: Any) -> None:
        """Time the epoch; apply, or judge, when due. A failure puts the user's loaders back and ends autotune
        (one reason on the record); the callback and the fit go on."""
        if self.state == DONE:
            for it in self.rest_of_epoch:  # the loaders that finished a switched epoch: their workers go
                _shutdown_iterator(it)
            self.rest_of_epoch = []
            return
        try:
            self._epoch_end(run, trainer)
        except Exception as err:
            if self.state == TRIAL and self.originals:
                with contextlib.suppress(Exception):
                    trainer.fit_loop._combined_loader.flattened = list(self.originals)
                for dl, original in zip(self.replaced, self.originals):
                    if dl is not original:
                        shutdown_workers(dl)
            self.state = DONE
            self.record = AutotuneRecord(
                status=NOT_APPLIED, reason=f"autotune failed ({type(err).__name__}: {err})"
            )

    def _epoch_end(self, run: Any, trainer: Any) -> None:
        self.entries.append(self._epoch_steps(run))
        for it in self.rest_of_epoch:  # the loaders that finished the switched epoch: their workers go
            _shutdown_iterator(it)
        self.rest_of_epoch = []
        if self.state == WAITING and run.midrun_report is not None:
            if self.pending is None:  # no choice at the mid-run verdict (it did not reach this object)
                self.pending = self._agreed_choice(run, trainer)
            self._apply(run, trainer, self.pending, mid_epoch=False)
        elif self.state == TRIAL and run.timer.steps - self.switch_steps >= MIN_CONFIRM_STEPS:
            self._decide(run, trainer)

    def midrun(self, run: Any, trainer: Any) -> None:
        """Right after the mid-run verdict (the same step on every rank): the choice, and, where the position in
        the sampler can be kept exactly, the switch now; else at the next epoch boundary."""
        if self.state != WAITING or self.pending is not None:
            return
        try:
            self.pending = self._agreed_choice(run, trainer)
            if self.pending[0] is not None and _can_switch_mid_epoch(trainer, self.pending[0]):
                self._apply(run, trainer, self.pending, mid_epoch=True)
        except Exception as err:
            self.state = DONE
            self.record = AutotuneRecord(
                status=NOT_APPLIED, reason=f"autotune failed ({type(err).__name__}: {err})"
            )

    def _agreed_choice(self, run: Any, trainer: Any) -> tuple[dict[str, Any] | None, str]:
        payload: tuple[dict[str, Any] | None, str] = (None, "")
        if trainer.is_global_zero:
            try:  # never raise before the broadcast: the other ranks wait in it
                payload = self._choose(run, trainer)
            except Exception as err:
                payload = (None, f"autotune could not choose ({type(err).__name__}: {err})")
        if trainer.world_size > 1:
            payload = trainer.strategy.broadcast(payload, src=0)
        return payload

    def _before(self) -> list[float]:
        out: list[float] = []
        for first, steps in self.entries[: self.split]:
            out += ([first] if first is not None else []) + steps
        return out

    def _after(self) -> list[float]:
        """The steps with the setting; a start-up paid once (persistent workers, the loader that finishes a
        switched epoch) is left out: keeping the setting does not pay it again."""
        out: list[float] = []
        for i, (first, steps) in enumerate(self.entries[self.split :], start=self.split):
            if first is not None and i not in self.one_off:
                out.append(first)
            out += steps[1:] if (first is None and i == self.split) else steps
        return out

    def _apply(
        self, run: Any, trainer: Any, payload: tuple[dict[str, Any] | None, str], mid_epoch: bool
    ) -> None:
        settings, reason = payload
        self.state = DONE
        if settings is None:
            self._not_applied(reason)
            return
        combined = trainer.fit_loop._combined_loader
        originals = list(combined.flattened)
        batches = _epoch_batches(combined)
        try:
            replaced = [recreate(dl, settings) if _eligible(dl, batches) else dl for dl in originals]
            rest = []
            if mid_epoch:
                running = combined._iterator.iterators
                for i, (dl, new) in enumerate(zip(originals, replaced)):
                    if new is not dl:
                        rest.append((i, iter(rest_of_epoch(dl, running[i], settings))))
            combined.flattened = replaced
        except Exception as err:
            self._not_applied(
                f"Lightning could not re-create the train DataLoader ({type(err).__name__}: {err})"
            )
            return
        for i, it in rest:  # from the next batch on, the rest of this epoch's batches come from the workers
            combined._iterator.iterators[i] = it
        self.rest_of_epoch = [it for _, it in rest]
        self.originals, self.replaced = originals, replaced
        changed = [dl for dl, new in zip(originals, replaced) if new is not dl]
        if mid_epoch:  # this epoch's steps so far are "before"; the rest is a new entry without a first step
            self.entries.append(self._epoch_steps(run))
            self.ring_start, self.starts_seen = run.timer.step_ms.n, len(run.timer.epoch_start_wait_ms) + 1
        self.split = len(self.entries)
        persistent = any(not _draws_every_epoch(dl) for dl in replaced)
        if persistent:  # the epoch that starts them pays their start-up once
            self.one_off.add(self.split + (1 if mid_epoch else 0))
        self.switch_epoch = trainer.current_epoch + (0 if mid_epoch else 1)
        self.switch_steps = run.timer.steps
        self.before = self._before()
        config = run.config
        self.record = AutotuneRecord(
            status=APPLIED,
            settings=dict(settings),
            previous=loader_settings(changed[0], settings) if changed else {},
            applied_at_step=run.timer.steps,
            applied_at_epoch=self.switch_epoch,
            mid_epoch=mid_epoch,
            steps_before=len(self.before),
            loaders=len(changed),
            keep_line=keep_line(settings, config.batch_size if config is not None else None),
        )
        self.state = TRIAL
        when = "mid-epoch, the sampler's position kept" if mid_epoch else f"from epoch {self.switch_epoch}"
        self._say(
            f"autotune applied {_text(settings)} to {len(changed)} train DataLoader(s) after step {run.timer.steps}"
            f" ({when}); timing it against the {len(self.before)} steps before."
        )

    def _choose(self, run: Any, trainer: Any) -> tuple[dict[str, Any] | None, str]:
        if getattr(trainer, "reload_dataloaders_every_n_epochs", 0):
            return None, "reload_dataloaders_every_n_epochs re-creates the train loader from the user's code"
        length = run.measured.run_length if run.measured is not None else None
        epochs = length.epochs if length is not None else None
        if epochs is not None:
            left = epochs - (trainer.current_epoch + 1)
            if left < MIN_EPOCHS_LEFT:
                return None, (
                    f"the fit has {max(left, 0)} epoch(s) left after epoch {trainer.current_epoch}: too few to apply "
                    "a setting at an epoch boundary and check it"
                )
        combined = getattr(trainer.fit_loop, "_combined_loader", None)
        loaders = list(combined.flattened) if combined is not None else []
        if not any(_eligible(dl, _epoch_batches(combined)) for dl in loaders):
            return (
                None,
                "no train DataLoader autotune can re-create (map-style, workers not already persistent)",
            )
        accelerator = run.config.accelerator if run.config is not None else None
        return choose(run.midrun_report, accelerator)

    def _decide(self, run: Any, trainer: Any) -> None:
        after = self._after()
        decision = decide(self.before, after) if trainer.is_global_zero else None
        if trainer.world_size > 1:
            decision = trainer.strategy.broadcast(decision, src=0)
        assert decision is not None and self.record is not None
        self.state = DONE
        record = self.record
        record.decided_at_step = run.timer.steps
        record.steps_after = len(after)
        record.step_ratio, record.ratio_interval, record.outcome = (
            decision.ratio,
            decision.interval,
            decision.outcome,
        )
        if decision.keep:
            record.status = KEPT
            self._say(f"autotune {autotune_line(record)}")
            return
        combined = trainer.fit_loop._combined_loader
        combined.flattened = list(self.originals)
        for dl, original in zip(self.replaced, self.originals):
            if dl is not original:
                shutdown_workers(dl)
        for it in self.rest_of_epoch:
            _shutdown_iterator(it)
        self.rest_of_epoch = []
        record.status = UNDONE
        record.undone_at_epoch = trainer.current_epoch + 1
        record.reason = decision.reason
        self._say(f"autotune {autotune_line(record)}")

    # ------------------------------------------------------------------ the end of fit
    def result(self, run: Any) -> AutotuneRecord:
        """The record for the report: as decided, or what stands when the fit ended."""
        if self.record is not None and self.state == TRIAL:
            after = self._after()
            interim = decide(self.before, after)
            self.record.steps_after = len(after)
            self.record.step_ratio, self.record.ratio_interval = interim.ratio, interim.interval
            self.record.outcome = interim.outcome
        if self.record is not None:
            return self.record
        why = (
            "the fit ended before an epoch boundary after the mid-run verdict (autotune applies at epoch boundaries)"
            if run.midrun_report is not None
            else "no mid-run verdict was taken (the fit ended first)"
        )
        return AutotuneRecord(status=NOT_APPLIED, reason=why)

    def _not_applied(self, reason: str) -> None:
        self.record = AutotuneRecord(status=NOT_APPLIED, reason=reason)
        self._say(f"autotune {autotune_line(self.record)}")

    def _say(self, text: str) -> None:
        if self.verbose:
            rank_zero_info(f"lightning-bottleneck: {text}")


def _eligible(dl: Any, batches: int | None = None) -> bool:
    """A map-style DataLoader whose workers do not already persist and that ends with the epoch: under a
    ``CombinedLoader`` a shorter loader cycles (``max_size_cycle``) or a longer one is cut (``min_size``), and
    how far such a loader runs its sampler depends on its workers, so it is left as it is."""
    if (
        not isinstance(dl, DataLoader)
        or isinstance(dl.dataset, IterableDataset)
        or not _draws_every_epoch(dl)
    ):
        return False
    if batches is None:
        return True
    try:
        return len(dl) == batches
    except TypeError:
        return False


def _epoch_batches(combined: Any) -> int | None:
    """Batches per epoch of the fit loop's ``CombinedLoader`` (None: not sized)."""
    try:
        from lightning.pytorch.utilities.data import sized_len

        return sized_len(combined)
    except Exception:
        return None


def _text(settings: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in settings.items())
