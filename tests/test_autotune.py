"""``BottleneckCallback(autotune=True)``: the measured DataLoader setting applied to the running fit, confirmed or
undone, with the sequence of samples unchanged.

Real tiny fits on CPU. The choice is forced (``choose`` patched) so that the tests do not depend on what the loader
probe measures on a busy 2-core machine; the loading costs are sleeps, so the switch is 2x faster (kept) or several
times slower (undone) whatever else runs on the machine.
"""

from __future__ import annotations

import inspect
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import pytest
import torch
from lightning.pytorch.utilities.combined_loader import CombinedLoader
from lightning.pytorch.utilities.exceptions import MisconfigurationException
from torch import nn
from torch.utils.data import BatchSampler, DataLoader, Dataset, RandomSampler, get_worker_info
from torch.utils.data.dataloader import default_collate

from lightning_bottleneck import BottleneckCallback
from lightning_bottleneck.advice.autotune import keep_line
from lightning_bottleneck.autotune_record import (
    BASIS_FIRST_EPOCH,
    BASIS_RESTARTS,
    BASIS_VERDICT,
    KEPT,
    NOT_APPLIED,
    UNDONE,
    AutotuneRecord,
)
from lightning_bottleneck.categories import Category
from lightning_bottleneck.live.loader_switch import loader_settings
from lightning_bottleneck.output.autotune import autotune_line
from lightning_bottleneck.output.html import render_html
from lightning_bottleneck.output.text import render_markdown, render_text
from lightning_bottleneck.report import Recommendation, Report
from lightning_bottleneck.rules.autotune import (
    CLEAN_BEFORE_MIN,
    CLEAN_BEFORE_STEPS,
    LARGE_GAIN_MIN,
    MIN_CONFIRM_STEPS,
    RESTART_SHARE_AFTER_VERDICT,
    Choice,
    alternative,
    choose,
    decide,
    race,
    restart_bound,
    restart_fix,
    restart_saving_ms,
    settled,
)

from conftest import quiet_trainer

WORKERS = {"num_workers": 2, "persistent_workers": True}
FAST = {"wait": 1, "warmup": 1, "active": 3, "verbose": False, "probe_loader": False, "trial_budget_s": 0}


class Indexed(Dataset):
    """Sample ``i`` is ``(x_i, y_i, i)``; it sleeps ``in_process_s`` when loaded in the training process and
    ``in_worker_s`` when loaded in a DataLoader worker."""

    def __init__(self, n: int = 80, in_process_s: float = 0.0, in_worker_s: float = 0.0) -> None:
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(n, 8, generator=g)
        self.y = torch.randn(n, 1, generator=g)
        self.in_process_s, self.in_worker_s = in_process_s, in_worker_s

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor, int]:
        delay = self.in_worker_s if get_worker_info() is not None else self.in_process_s
        if delay:
            time.sleep(delay)
        return self.x[i], self.y[i], i


class Seen(pl.LightningModule):
    """Records the sample indices of every training batch, in order (a dict batch: each loader's, by key)."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Linear(8, 1)
        self.seen: list[Any] = []

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        parts = batch if isinstance(batch, dict) else {"": batch}
        self.seen.append({k: v[2].tolist() for k, v in parts.items()})
        loss = sum(nn.functional.mse_loss(self.net(v[0]), v[1]) for v in parts.values())
        return loss  # type: ignore[return-value]

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


def _loader(data: Dataset, seeded: bool) -> DataLoader:
    generator = torch.Generator().manual_seed(7) if seeded else None
    return DataLoader(data, batch_size=4, shuffle=True, generator=generator)


class Data(pl.LightningDataModule):
    def __init__(self, data: Dataset) -> None:
        super().__init__()
        self.data = data

    def train_dataloader(self) -> DataLoader:
        return _loader(self.data, seeded=True)


@pytest.fixture
def forced(monkeypatch: pytest.MonkeyPatch) -> None:
    """Autotune applies num_workers=2, persistent_workers=True, whatever the probe would have measured."""
    import lightning_bottleneck.live.autotune as live

    monkeypatch.setattr(live, "choose", lambda report, accelerator, left_to_run=None: Choice(dict(WORKERS)))


def _fit(
    tmp_path: Path, autotune: bool, data: Any, epochs: int = 8, **trainer_options: Any
) -> tuple[Seen, pl.Trainer, BottleneckCallback]:
    torch.manual_seed(0)
    model = Seen()
    cb = BottleneckCallback(**FAST, autotune=autotune)
    trainer = quiet_trainer(tmp_path / str(autotune), [cb], max_epochs=epochs, **trainer_options)
    if isinstance(data, pl.LightningDataModule):
        trainer.fit(model, datamodule=data)
    else:
        trainer.fit(model, train_dataloaders=data() if callable(data) else data)
    return model, trainer, cb


# ---------------------------------------------------------------------------------------------- real fits
@pytest.mark.parametrize(
    "seeded, workers, persistent",
    [(True, 0, False), (False, 0, False), (True, 1, False), (False, 1, True)],
    ids=[
        "in-process-own-generator",
        "in-process-global-rng",
        "one-worker-restarting",
        "one-worker-persisting-global-rng",
    ],
)
def test_a_faster_setting_is_applied_kept_and_the_samples_are_the_same(
    tmp_path: Path, forced: None, seeded: bool, workers: int, persistent: bool, one_intra_op_thread: None
) -> None:
    # 16 ms a batch in-process (or in one worker); two persistent workers load two batches at once. One intra-op
    # thread: with two beside the workers on the 2-core VM a step can wait on a descheduled thread for whole
    # scheduler slices, and "one-worker-restarting" was once undone in CI (fourteenth session). A worker that
    # persists drew its base seed from the generator (or the global RNG) once: the loaders that replace it draw
    # nothing there, and the order of every epoch after stays. 82 samples: the last batch of each epoch holds 2, and
    # the BatchSampler exhausts the shuffling sampler to make it, in-process too (RandomSampler's tail permutation is
    # drawn every epoch); the workers that replace in-process loading are asked for the same batches (at 2f1ef8b the
    # in-process cases lost the order at the third epoch)
    data = Indexed(n=82, in_process_s=0.004, in_worker_s=0.004)

    def loader() -> DataLoader:
        dl = _loader(data, seeded)
        return DataLoader(data, batch_size=4, shuffle=True, generator=dl.generator, num_workers=workers,
                          persistent_workers=persistent)  # fmt: skip

    plain, _, _ = _fit(tmp_path, False, loader)
    tuned, trainer, cb = _fit(tmp_path, True, loader)
    record = cb.report.autotune
    assert record is not None and record.status == KEPT, record
    assert record.settings == WORKERS and record.previous == {
        "num_workers": workers,
        "persistent_workers": persistent,
    }
    # the switch is made mid-epoch, the sampler's position kept (unless the mid-run verdict came at an epoch's last
    # batch, or, with one worker, every batch of the epoch was already given to it): at the next epoch boundary
    steps_per_epoch = 21
    inside = record.applied_at_step % steps_per_epoch != 0
    # with one worker, at the boundary where every batch of the epoch was already given to it
    assert record.mid_epoch is inside if workers == 0 else (inside or not record.mid_epoch), record
    assert record.applied_at_step is not None and record.applied_at_epoch is not None
    assert record.steps_after >= MIN_CONFIRM_STEPS - 1 and record.speedup and record.speedup > 1.2
    assert trainer.train_dataloader.num_workers == 2 and trainer.train_dataloader.persistent_workers
    # the exact sequence of sample indices, across the switch
    assert tuned.seen == plain.seen and len(tuned.seen) == 8 * steps_per_epoch
    assert "num_workers=2, persistent_workers=True" in record.keep_line
    assert "autotune: applied num_workers=2" in render_text(cb.report)
    assert json.loads(cb.report.to_json())["autotune"]["status"] == KEPT
    # the loader advice measured before the switch is not given again at the end of fit
    assert _loader_advice(cb.midrun_report), cb.midrun_report.recommendations  # the mid-run verdict gave some
    assert not _loader_advice(cb.report) and any("DataLoader advice left out" in n for n in cb.report.notes)


class _MarkStart:
    """A worker_init_fn that leaves one file per worker start in ``folder`` (workers are other processes)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def __call__(self, worker_id: int) -> None:
        (self.folder / f"{os.getpid()}-{worker_id}").touch()


def test_persistent_workers_switched_mid_epoch_start_once(tmp_path: Path, forced: None) -> None:
    # the loader that finishes the switched epoch is the loader of the epochs after: its two workers start at the
    # switch and never again (before, two more started at the next epoch boundary: four starts)
    # 40 steps an epoch: the switch falls inside one
    data = Indexed(n=160, in_process_s=0.004, in_worker_s=0.004)
    starts = tmp_path / "starts"
    starts.mkdir()

    def loader() -> DataLoader:
        g = torch.Generator().manual_seed(7)
        return DataLoader(data, batch_size=4, shuffle=True, generator=g, worker_init_fn=_MarkStart(starts))

    plain, _, _ = _fit(tmp_path, False, loader)
    tuned, trainer, cb = _fit(tmp_path, True, loader)
    record = cb.report.autotune
    # kept (the workers' 2x); under a loaded machine the confirm may undo it (twice in a full suite run beside other
    # work): the workers it started are then shut down, and none starts again either way
    assert record is not None and record.status in (KEPT, UNDONE), record.to_dict()
    if not record.mid_epoch:  # the verdict came at an epoch's last batch: nothing mid-epoch to test
        pytest.skip(f"switched at the epoch boundary: {record}")
    assert len(list(starts.iterdir())) == 2, sorted(p.name for p in starts.iterdir())
    if record.status == KEPT:
        assert trainer.train_dataloader.num_workers == 2 and trainer.train_dataloader.persistent_workers
    assert tuned.seen == plain.seen  # the rest of the switched epoch, then whole epochs drawn as before


class SeenThreads(Seen):
    """Also records the training process's intra-op threads at every step."""

    def __init__(self) -> None:
        super().__init__()
        self.threads: list[int] = []

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        self.threads.append(torch.get_num_threads())
        return super().training_step(batch, batch_idx)


@pytest.mark.parametrize("in_worker_s", [0.004, 0.03], ids=["faster", "slower"])
def test_a_setting_timed_at_fewer_threads_holds_them_while_it_runs_and_gives_them_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, in_worker_s: float
) -> None:
    """Issue 29's cpu_transform: the workers were timed beside a CPU step at the one intra-op thread they leave the
    training process (measure/host_threads.py), so the setting carries it (``torch_threads``): set with the loaders,
    the user's count back when the check undoes it (from the decision on) and when the fit ends; the line to keep it
    sets it beside the DataLoader."""
    import lightning_bottleneck.live.autotune as live

    setting = {**WORKERS, "torch_threads": 1}
    monkeypatch.setattr(live, "choose", lambda report, accelerator, left_to_run=None: Choice(dict(setting)))
    data = Indexed(n=82, in_process_s=0.004, in_worker_s=in_worker_s)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        model = SeenThreads()
        cb = BottleneckCallback(**FAST, autotune=True)
        trainer = quiet_trainer(tmp_path, [cb], max_epochs=8)
        trainer.fit(model, train_dataloaders=_loader(data, True))
        after_fit = torch.get_num_threads()
    finally:
        torch.set_num_threads(before)
    record = cb.report.autotune
    assert record is not None and record.settings == setting, record
    at = record.applied_at_step
    assert at is not None and set(model.threads[:at]) == {2}, (at, model.threads)
    if record.status == KEPT:  # (the faster one; a loaded machine may undo it)
        assert set(model.threads[at:]) == {1}, (at, model.threads)
    else:
        decided = record.decided_at_step
        assert record.status == UNDONE and decided is not None, record
        assert set(model.threads[at:decided]) == {1} and set(model.threads[decided:]) == {2}, model.threads
    assert in_worker_s == 0.004 or record.status == UNDONE, record
    assert after_fit == 2  # the user's count, once the fit is over
    assert record.keep_line.endswith("persistent_workers=True); torch.set_num_threads(1)"), record
    line = autotune_line(record)
    assert "torch.set_num_threads(1)" in line and "torch_threads" not in line, line


def test_a_slower_setting_is_undone_and_its_workers_are_shut_down(tmp_path: Path, forced: None) -> None:
    data = Indexed(in_process_s=0.003, in_worker_s=0.03)  # 12 ms a batch in-process, 120 ms in a worker
    plain, _, _ = _fit(tmp_path, False, lambda: _loader(data, True))
    tuned, trainer, cb = _fit(tmp_path, True, lambda: _loader(data, True))
    record = cb.report.autotune
    # mid-epoch 4 or 8 steps after the verdict (Choice.clean_steps), or at the epoch boundary when that comes first
    assert record is not None and record.status == UNDONE, record
    assert record.mid_epoch or record.applied_at_step % (len(data) // 4) == 0, record
    assert record.step_ratio is not None and record.step_ratio > 1.0 and record.undone_at_epoch is not None
    loader = trainer.train_dataloader
    assert loader.num_workers == 0 and not loader.persistent_workers  # the user's own loader is back
    replaced = cb._run.autotune.replaced[0]
    assert replaced is not loader and replaced._iterator is None  # its persistent workers were shut down
    assert tuned.seen == plain.seen
    assert "switched back" in autotune_line(record)


@pytest.mark.parametrize(
    "length", [{"epochs": 1}, {"epochs": -1, "max_steps": 90}], ids=["one-epoch", "max-steps-in-the-first"]
)
def test_a_fit_with_one_long_epoch_is_switched_and_checked_within_it(
    tmp_path: Path, forced: None, length: dict[str, Any], one_intra_op_thread: None
) -> None:
    # 100 steps in the only epoch (or 90 of them): no epoch boundary to switch or check at. The switch is made
    # mid-epoch (in-process loading: the position in the sampler is exact) and checked MIN_CONFIRM_STEPS steps
    # later within the epoch. 16 ms a batch in-process; two persistent workers load two batches at once
    data = Indexed(n=400, in_process_s=0.004, in_worker_s=0.004)
    plain, _, _ = _fit(tmp_path, False, lambda: _loader(data, True), **length)
    tuned, trainer, cb = _fit(tmp_path, True, lambda: _loader(data, True), **length)
    record = cb.report.autotune
    assert record is not None and record.status == KEPT and record.mid_epoch, record
    assert record.applied_at_epoch == 0 and record.decided_at_step is not None, record
    # checked inside the epoch, MIN_CONFIRM_STEPS steps after the switch (its first step left out)
    assert record.decided_at_step - record.applied_at_step == MIN_CONFIRM_STEPS + 1, record
    assert record.decided_at_step < len(tuned.seen) and record.steps_after == MIN_CONFIRM_STEPS, record
    assert record.speedup is not None and record.speedup > 1.2, record
    assert trainer.train_dataloader.num_workers == 2  # kept: the persistent loader that finished the epoch
    assert tuned.seen == plain.seen and len(tuned.seen) == (90 if "max_steps" in length else 100)
    assert "mid-epoch epoch 0" in autotune_line(record) and "kept" in autotune_line(record)


def test_a_slower_setting_in_the_last_epoch_is_undone_mid_epoch_exactly(tmp_path: Path, forced: None) -> None:
    # two epochs of 100 steps: too few to check at a boundary; the switch in epoch 0 is checked within it and, slower
    # (12 ms a batch in-process, 120 ms in a worker), taken back in process where the fit is: the batches the two
    # workers drew ahead come first, then the rest of the sampler; the epoch after runs the user's loader
    data = Indexed(n=400, in_process_s=0.003, in_worker_s=0.03)
    plain, _, _ = _fit(tmp_path, False, lambda: _loader(data, True), epochs=2)
    tuned, trainer, cb = _fit(tmp_path, True, lambda: _loader(data, True), epochs=2)
    record = cb.report.autotune
    assert record is not None and record.status == UNDONE and record.mid_epoch, record
    assert record.undone_at_epoch == 0 and record.undone_at_step == record.decided_at_step, record
    assert record.undone_at_step is not None and record.undone_at_step < 100, record
    assert record.step_ratio is not None and record.step_ratio > 1.0, record
    assert tuned.seen == plain.seen  # across the switch, the undo and the epoch after
    tuner = cb._run.autotune
    assert trainer.train_dataloader is tuner.originals[0] and trainer.train_dataloader.num_workers == 0
    assert tuner.replaced[0]._iterator is None  # the persistent workers it started were shut down
    line = autotune_line(record)
    assert f"switched back after step {record.undone_at_step} (mid-epoch, in epoch 0" in line, line


PINNED = {**WORKERS, "pin_memory": True}


@pytest.mark.gpu
def test_on_a_gpu_pinned_memory_is_applied_with_the_workers_and_the_samples_are_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # issue 29: pin_memory is one of the settings autotune may change, on a CUDA run only (rules/autotune.choose drops
    # it elsewhere). Forced here as the other fits force theirs; the loader re-created with it pins its batches in a
    # thread of the training process, and the order of the samples is still the run's without autotune
    import lightning_bottleneck.live.autotune as live

    asked: list[Any] = []

    def pinned(report: Any, accelerator: Any, left_to_run: Any = None) -> Choice:
        asked.append(accelerator)
        return Choice(dict(PINNED))

    monkeypatch.setattr(live, "choose", pinned)
    # 16 ms a batch in-process, 40 steps an epoch
    data = Indexed(n=160, in_process_s=0.004, in_worker_s=0.004)
    plain, _, _ = _fit(tmp_path, False, lambda: _loader(data, True), epochs=4, accelerator="gpu")
    tuned, trainer, cb = _fit(tmp_path, True, lambda: _loader(data, True), epochs=4, accelerator="gpu")
    record = cb.report.autotune
    assert asked == ["cuda"], asked  # the Trainer's accelerator as the rules read it
    assert record is not None and record.status == KEPT and record.settings == PINNED, record
    assert trainer.train_dataloader.pin_memory and trainer.train_dataloader.num_workers == 2
    assert "pin_memory=True" in record.keep_line, record.keep_line
    assert tuned.seen == plain.seen and len(tuned.seen) == 4 * 40
    assert next(tuned.parameters()).device.type == "cuda"


class Crowded(Indexed):
    """A worker's sleep grows with the square of the worker count (``in_worker_s`` for one worker): workers that
    contend for one resource, each slower than one alone; more of them load slower."""

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor, int]:
        info = get_worker_info()
        if info is not None:
            time.sleep(self.in_worker_s * (info.num_workers**2 - 1))
        return super().__getitem__(i)


class Whole(Dataset):
    """Batches of four of ``data``'s samples, whole: a loader without batching of its own (``batch_size=None``)."""

    def __init__(self, data: Indexed) -> None:
        self.data = data

    def __len__(self) -> int:
        return len(self.data) // 4

    def __getitem__(self, i: int) -> Any:
        return default_collate([self.data[j] for j in range(4 * i, 4 * i + 4)])


def _one_worker(data: Dataset, persistent: bool = False, batches: bool = False) -> Any:
    def loader() -> DataLoader:
        g = torch.Generator().manual_seed(7)
        if batches:  # a batch sampler of the user's
            sampler = BatchSampler(RandomSampler(data, generator=g), 4, False)
            return DataLoader(data, batch_sampler=sampler, num_workers=1, persistent_workers=persistent)
        return DataLoader(
            data, batch_size=4, shuffle=True, generator=g, num_workers=1, persistent_workers=persistent
        )

    return loader


@pytest.mark.parametrize(
    ("epochs", "persistent", "batches"),
    [(1, False, False), (2, False, False), (2, True, True)],
    ids=["one-epoch", "two-epochs", "two-epochs-its-own-batch-sampler-persisting"],
)
def test_a_loader_with_workers_is_switched_mid_epoch_and_keeps_its_order(
    tmp_path: Path, forced: None, epochs: int, persistent: bool, batches: bool, one_intra_op_thread: None
) -> None:
    # 100 steps an epoch; one worker loads a batch in 16 ms, two persistent workers two at once. Too few epochs to
    # check at a boundary: the switch is made mid-epoch, the batches the one worker was given delivered first,
    # then the rest of the sampler by the new workers, and checked within the epoch. "two-epochs": the epoch after
    # draws its order from the generator as without autotune (the one worker drew RandomSampler's tail permutation;
    # one that persists drew its base seed from the generator once, and the new loader draws nothing there)
    data = Indexed(n=400, in_worker_s=0.004)
    plain, _, _ = _fit(tmp_path, False, _one_worker(data, persistent, batches), epochs=epochs)
    tuned, trainer, cb = _fit(tmp_path, True, _one_worker(data, persistent, batches), epochs=epochs)
    record = cb.report.autotune
    assert record is not None and record.status == KEPT and record.mid_epoch, record
    assert record.previous == {"num_workers": 1, "persistent_workers": persistent}, record
    assert record.applied_at_epoch == 0 and record.decided_at_step is not None, record
    assert record.decided_at_step - record.applied_at_step == MIN_CONFIRM_STEPS + 1, record
    assert record.speedup is not None and record.speedup > 1.2, record
    assert trainer.train_dataloader.num_workers == 2 and trainer.train_dataloader.persistent_workers
    # the exact sequence of sample indices, across the switch
    assert tuned.seen == plain.seen and len(tuned.seen) == 100 * epochs
    assert "mid-epoch epoch 0" in autotune_line(record), autotune_line(record)


def test_a_slower_setting_for_a_loader_with_workers_is_undone_mid_epoch_to_its_own_workers(
    tmp_path: Path, forced: None, one_intra_op_thread: None
) -> None:
    # two epochs of 100 steps; one worker loads a batch in 16 ms, two of them 64 ms each (Crowded): the switch in
    # epoch 0 is checked within it, slower, and taken back to the user's one worker where the fit is: the batches
    # the two workers drew ahead first, then the rest of the sampler; the epoch after runs the user's loader (a
    # user's loader whose worker persisted: tests/test_loader_switch.py, and the DataModule test below at a boundary)
    data = Crowded(n=400, in_worker_s=0.004)
    plain, _, _ = _fit(tmp_path, False, _one_worker(data), epochs=2)
    tuned, trainer, cb = _fit(tmp_path, True, _one_worker(data), epochs=2)
    record = cb.report.autotune
    assert record is not None and record.status == UNDONE and record.mid_epoch, record
    assert record.undone_at_epoch == 0 and record.undone_at_step == record.decided_at_step, record
    assert record.step_ratio is not None and record.step_ratio > 1.0, record
    # the exact sequence across the switch, the undo and the epoch after
    assert tuned.seen == plain.seen and len(tuned.seen) == 200
    tuner = cb._run.autotune
    assert trainer.train_dataloader is tuner.originals[0] and trainer.train_dataloader.num_workers == 1
    assert tuner.replaced[0]._iterator is None  # the persistent workers it started were shut down


@pytest.mark.parametrize(
    "faster, prefetch", [(True, 2), (False, 16)], ids=["kept-mid-epoch", "undone-at-a-boundary"]
)
def test_a_datamodules_loader_given_by_position_whose_worker_persists_is_switched_and_keeps_its_order(
    tmp_path: Path, forced: None, faster: bool, prefetch: int, one_intra_op_thread: None
) -> None:
    # the DataModule gives batch_size and shuffle by position (Lightning re-creates the loader with them in their
    # places) and its one worker persists: it is shut down at the switch, and neither the loader that replaces it nor
    # (undone: two crowded workers at 64 ms a batch against its 16 ms) the one re-created with its own settings draws
    # from the generator, so every epoch keeps its order. prefetch_factor=16: the worker is given 16 of the epoch's
    # 20 batches ahead, none is left to queue by the switch, and it is made at the next epoch boundary
    data = (Indexed if faster else Crowded)(in_process_s=0.004, in_worker_s=0.004)

    class Positional(Data):
        def train_dataloader(self) -> DataLoader:
            g = torch.Generator().manual_seed(7)
            return DataLoader(self.data, 4, True, generator=g, num_workers=1, persistent_workers=True,
                              prefetch_factor=prefetch)  # fmt: skip

    plain, _, _ = _fit(tmp_path, False, Positional(data))
    tuned, trainer, cb = _fit(tmp_path, True, Positional(data))
    record = cb.report.autotune
    assert record is not None and record.status == (KEPT if faster else UNDONE), record
    # mid-epoch unless the mid-run verdict came too close to an epoch's end (the boundary came first)
    assert record.mid_epoch is (prefetch == 2 and record.applied_at_step % 20 != 0), record
    assert record.previous == {"num_workers": 1, "persistent_workers": True}, record
    assert tuned.seen == plain.seen and len(tuned.seen) == 160
    tuner = cb._run.autotune
    assert tuner.originals[0]._iterator is None  # its worker was shut down at the switch
    expected = WORKERS if faster else {"num_workers": 1, "persistent_workers": True}
    assert loader_settings(trainer.train_dataloader, expected) == expected
    assert trainer.train_dataloader is not tuner.originals[0]


class _Interrupted(Exception):
    pass


class _EndsWhileDraining(pl.Callback):
    """Ends the fit (an exception, or ``should_stop``) at the first batch end after autotune's mid-epoch switch,
    while the user's worker still holds batches queued before it; keeps that worker's processes."""

    def __init__(self, cb: BottleneckCallback, raises: bool) -> None:
        self.cb, self.raises = cb, raises
        self.workers: list[Any] = []
        self.left = 0

    def on_train_batch_end(self, trainer: pl.Trainer, *args: Any) -> None:
        tuner = self.cb._run.autotune
        if self.workers or not tuner.drains:
            return
        self.workers, self.left = list(tuner.drains[0].old._workers), tuner.drains[0].left
        if self.raises:
            raise _Interrupted
        trainer.should_stop = True


@pytest.mark.parametrize("raises", [True, False], ids=["an-exception", "should-stop"])
def test_a_fit_that_ends_while_the_users_workers_drain_leaves_none_running(
    tmp_path: Path, forced: None, raises: bool
) -> None:
    # one persistent worker with prefetch_factor=10 holds up to ten batches at the mid-epoch switch; the fit ends a
    # batch later. Lightning's teardown shuts down the fit loop's loaders only, not the user's it replaced
    data = Indexed(n=400, in_worker_s=0.004)
    g = torch.Generator().manual_seed(7)
    loader = DataLoader(data, batch_size=4, shuffle=True, generator=g, num_workers=1, persistent_workers=True,
                        prefetch_factor=10)  # fmt: skip
    cb = BottleneckCallback(**FAST, autotune=True)
    ends = _EndsWhileDraining(cb, raises)
    trainer = quiet_trainer(tmp_path, [cb, ends], max_epochs=1)
    if raises:
        with pytest.raises(_Interrupted):
            trainer.fit(Seen(), train_dataloaders=loader)
    else:
        trainer.fit(Seen(), train_dataloaders=loader)
    # it ended with batches still queued in the user's worker
    assert ends.workers and ends.left > 0, ends.left
    for worker in ends.workers:
        worker.join(timeout=10)
        assert not worker.is_alive()
    assert loader._iterator is None and not cb._run.autotune.drains


def test_a_one_epoch_fit_whose_sampler_position_cannot_be_kept_is_told_why_nothing_applies(
    tmp_path: Path, forced: None
) -> None:
    data = Whole(
        Indexed(n=800, in_worker_s=0.002)
    )  # 200 steps of 8 ms: the mid-run verdict comes within the epoch

    def loader() -> (
        DataLoader
    ):  # the dataset gives whole batches: no index batches to take the rest of the epoch from
        return DataLoader(data, batch_size=None, shuffle=True, num_workers=1)

    _, trainer, cb = _fit(tmp_path, True, loader, epochs=1)
    record = cb.report.autotune
    assert record is not None and record.status == NOT_APPLIED, record
    assert "cannot be kept mid-epoch" in record.reason and "0 epoch(s) left" in record.reason, record.reason
    assert trainer.train_dataloader.num_workers == 1


@pytest.mark.parametrize("first, raced", [(1, 3), (3, 1)], ids=["raced-faster-stays", "raced-slower-goes"])
def test_the_count_left_to_the_run_is_raced_for_an_epoch_and_the_faster_stays(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, first: int, raced: int
) -> None:
    # 32 ms a batch in-process, 16 ms in a worker (sleeps: a busy core does not move them): one worker is 2x the
    # loader as it was, three 6x; whichever is applied first is kept, and the other runs the next epoch
    import lightning_bottleneck.live.autotune as live

    applied, other = ({"num_workers": w, "persistent_workers": True} for w in (first, raced))
    monkeypatch.setattr(
        live,
        "choose",
        lambda report, accelerator, left_to_run=None: Choice(dict(applied), alternative=dict(other)),
    )
    data = Indexed(n=160, in_process_s=0.008, in_worker_s=0.004)  # 40 steps an epoch
    plain, _, _ = _fit(tmp_path, False, lambda: _loader(data, True), epochs=4)
    tuned, trainer, cb = _fit(tmp_path, True, lambda: _loader(data, True), epochs=4)
    record = cb.report.autotune
    assert record is not None and record.status == KEPT, record
    assert record.raced == other and record.raced_against == applied and record.raced_at_epoch == 1, record
    won = raced > first
    assert record.race_ended and record.race_won is won and record.race_ratio is not None, record
    assert (record.race_ratio < 0.7) if won else (record.race_ratio > 1.4), record
    assert record.settings == (other if won else applied)
    assert trainer.train_dataloader.num_workers == record.settings["num_workers"]
    assert f"num_workers={record.settings['num_workers']}," in record.keep_line
    assert tuned.seen == plain.seen  # the same samples across the switch, the race and the switch back
    line = autotune_line(record)
    assert (
        f"then ran num_workers={raced} for epoch 1" in line
        and f"num_workers={record.settings['num_workers']} stayed" in line
    )
    back = AutotuneRecord.from_dict(json.loads(json.dumps(record.to_dict())))
    assert (back.raced, back.raced_against, back.raced_at_epoch, back.race_won) == (other, applied, 1, won)
    assert back.race_ratio == pytest.approx(record.race_ratio, abs=1e-4) and back.race_interval is not None


class SlowUntilVerdict(Seen):
    """Steps of 30 ms more until the callback's mid-run verdict: the warm-up, window and analysis that make the
    steps before a verdict slower than the fit's, for reasons no loader setting changes."""

    cb: BottleneckCallback | None = None

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        if self.cb is not None and self.cb.midrun_report is None:
            time.sleep(0.03)
        return super().training_step(batch, batch_idx)


def test_the_switch_is_judged_against_the_steps_after_the_verdict_not_the_slow_ones_before(
    tmp_path: Path, forced: None
) -> None:
    # 12 ms a batch in-process; two workers at 60 ms a batch each deliver one every 30 ms: the setting is slower
    # than the steady steps (at 36 ms a batch, one every 18 ms, it was kept on a VM state whose steps ran 3x
    # slower: 12 ms plus a 6 ms step is as slow), and faster only than the 42 ms+ steps before the verdict
    data = Indexed(in_process_s=0.003, in_worker_s=0.015)
    model = SlowUntilVerdict()
    cb = BottleneckCallback(**FAST, autotune=True)
    model.cb = cb
    trainer = quiet_trainer(tmp_path, [cb], max_epochs=6)
    trainer.fit(model, train_dataloaders=_loader(data, True))
    record = cb.report.autotune
    verdict_step = int(re.search(r"Mid-run verdict at step (\d+)", " ".join(cb.midrun_report.notes)).group(1))
    assert record is not None and record.status == UNDONE, record
    # judged against the steps since the verdict the setting is no faster (0.99-1.4 in runs here); against the steps
    # of 30 ms more before the verdict it would read well under 0.9 and be kept
    assert record.step_ratio is not None and record.step_ratio > 0.9, record
    assert record.steps_before is not None and record.steps_before >= CLEAN_BEFORE_MIN, record
    steps_per_epoch = len(data) // 4
    wait = cb._run.autotune.pending.clean_steps  # 8, or 4 where the advice predicted 2x or more
    assert wait in (CLEAN_BEFORE_STEPS, CLEAN_BEFORE_MIN)
    if record.mid_epoch:  # the switch waited for the steps it is judged against
        assert record.applied_at_step == verdict_step + wait, (record, verdict_step)
    else:  # the epoch ended first (or with the wait): the switch is at its boundary
        assert record.applied_at_step % steps_per_epoch == 0 and record.applied_at_step <= verdict_step + wait


def test_a_datamodule_and_a_combined_loader_are_switched(tmp_path: Path, forced: None) -> None:
    data = Indexed(in_process_s=0.003)
    _, trainer, cb = _fit(tmp_path, True, Data(data), epochs=8)
    assert cb.report.autotune is not None and cb.report.autotune.status in (KEPT, UNDONE)
    assert cb.report.autotune.applied_at_epoch is not None

    def combined() -> CombinedLoader:
        return CombinedLoader({"a": _loader(data, True), "b": _loader(Indexed(n=80), True)}, "max_size_cycle")

    plain, _, _ = _fit(tmp_path / "c", False, combined, epochs=8)
    tuned, trainer, cb = _fit(tmp_path / "c", True, combined, epochs=8)
    record = cb.report.autotune
    assert record is not None and record.loaders == 2 and record.applied_at_epoch is not None, record
    if record.status == KEPT:
        assert all(dl.num_workers == 2 for dl in trainer.fit_loop._combined_loader.flattened)
    assert tuned.seen == plain.seen


def test_a_switch_that_fails_on_the_second_loader_leaves_the_first_where_it_was(
    tmp_path: Path, forced: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # two train loaders with one worker each, one epoch: the mid-epoch switch takes over the first loader's sampler
    # iterator (its new workers already drew from it), then re-creating the second fails; the first gets its
    # position back (loader_switch.uncut), nothing is applied, and the samples are those of the fit without autotune
    import lightning_bottleneck.live.loader_switch as switch

    data = Indexed(n=800, in_worker_s=0.001)

    def combined() -> CombinedLoader:
        return CombinedLoader({"a": _one_worker(data)(), "b": _one_worker(data)()}, "max_size_cycle")

    plain, _, _ = _fit(tmp_path, False, combined, epochs=1)
    real, calls = switch._over, []

    def second_fails(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("injected")
        return real(*args, **kwargs)

    monkeypatch.setattr(switch, "_over", second_fails)
    tuned, trainer, cb = _fit(tmp_path, True, combined, epochs=1)
    record = cb.report.autotune
    assert record is not None and record.status == NOT_APPLIED and "injected" in record.reason, record
    assert len(calls) == 2 and tuned.seen == plain.seen and len(tuned.seen) == 200
    assert all(dl.num_workers == 1 for dl in trainer.fit_loop._combined_loader.flattened)


def test_default_reports_hold_no_autotune_and_a_short_fit_applies_nothing(tmp_path: Path) -> None:
    _, trainer, cb = _fit(tmp_path, False, lambda: _loader(Indexed(), True), epochs=2)
    assert cb.report.autotune is None and "autotune" not in cb.report.to_dict()
    _, trainer, cb = _fit(tmp_path, True, lambda: _loader(Indexed(), True), epochs=2)
    record = cb.report.autotune
    assert record is not None and record.status == NOT_APPLIED and record.reason, record
    assert trainer.train_dataloader.num_workers == 0


def test_the_loader_probe_is_told_when_the_run_will_confirm_its_choice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The measurement stage gets ``run_confirms`` (the probe then times each worker count once with the step) only
    where autotune would apply a measured setting and time it on the run: autotune on, epochs enough left, or one
    epoch with steps enough left to switch within it; and ``run_races`` (the probe leaves twice the core count to
    the run) only where the run could race that count for an epoch after its check."""
    import lightning_bottleneck.live.fit_run as fit_run

    seen: list[tuple[bool, bool, int]] = []
    real = fit_run.measure

    def spy(trainer: pl.Trainer, *args: Any, **kwargs: Any) -> None:
        seen.append(
            (kwargs.get("run_confirms", False), kwargs.get("run_races", False), trainer.current_epoch)
        )
        real(trainer, *args, **kwargs)

    monkeypatch.setattr(fit_run, "measure", spy)
    for autotune, epochs, n in ((True, 4, 80), (False, 4, 80), (True, 2, 80), (True, 1, 400)):
        model = SlowUntilVerdict()  # the verdict comes in the first epoch
        cb = BottleneckCallback(**FAST, autotune=autotune)
        model.cb = cb
        trainer = quiet_trainer(tmp_path / f"{autotune}{epochs}", [cb], max_epochs=epochs)
        trainer.fit(model, train_dataloaders=_loader(Indexed(n=n), True))
    # two epochs: one left after the first, too few to check a switch at a boundary, and its 20-step epoch too
    # short to switch within; one epoch of 100 steps: switched within it, where no race can follow
    assert seen == [(True, True, 0), (False, False, 0), (False, False, 0), (True, False, 0)], seen


def _slow_start(worker_id: int) -> None:
    time.sleep(0.3)  # each worker's start-up (a dataset that opens files, a heavy import): paid every epoch


def _restarting_loader(data: Dataset) -> Any:
    """A factory of seeded shuffled loaders of 4-sample batches whose 2 workers take 0.3 s to start, every epoch."""

    def loader() -> DataLoader:
        g = torch.Generator().manual_seed(7)
        return DataLoader(
            data, batch_size=4, shuffle=True, generator=g, num_workers=2, worker_init_fn=_slow_start
        )

    return loader


def test_workers_restarting_every_epoch_are_switched_after_the_first_epoch_before_any_verdict(
    tmp_path: Path,
) -> None:
    # 2 workers that take 0.3 s to start, restarted every epoch, for 10 batches of microseconds: the check at the
    # end of the first epoch times the loading in the training process and switches before the window's verdict
    loader = _restarting_loader(Indexed(n=40))

    plain, _, _ = _fit(tmp_path, False, loader, epochs=6)
    torch.manual_seed(0)
    tuned = Seen()
    cb = BottleneckCallback(wait=12, warmup=1, active=3, verbose=False, trial_budget_s=0, autotune=True)
    trainer = quiet_trainer(tmp_path / "tuned", [cb], max_epochs=6)
    trainer.fit(tuned, train_dataloaders=loader())
    record = cb.report.autotune
    assert record is not None and record.basis == BASIS_FIRST_EPOCH, record
    assert record.settings == {"num_workers": 0} and record.previous == {"num_workers": 2}
    assert record.applied_at_step == 10 and record.applied_at_epoch == 1 and not record.mid_epoch
    assert record.startup_ms is not None and record.startup_ms >= 250
    assert record.in_process_batch_ms is not None and record.in_process_batch_ms < 50
    # kept on the run's own steps: one start-up an epoch spread over its 10 steps, against none
    assert record.status == KEPT and record.speedup is not None and record.speedup > 3, record
    assert trainer.train_dataloader.num_workers == 0
    assert tuned.seen == plain.seen  # the exact sequence of sample indices, across the switch
    assert "chosen after the first epoch" in autotune_line(record)
    assert record.to_dict()["basis"] == BASIS_FIRST_EPOCH
    # the measurement stage did not probe the train loader it had already switched
    assert any("Train loader probe skipped: autotune switched" in n for n in cb.report.notes), cb.report.notes
    assert not _loader_advice(cb.report)


def test_restarting_workers_under_a_combined_loader_get_the_fix_and_the_other_loader_stays(
    tmp_path: Path,
) -> None:
    # two train loaders of 10 batches: "a" restarts 2 workers that take 0.3 s to start every epoch, "b" loads
    # in-process; the restart fix goes to "a" only ("b" already has it), and both keep their samples
    def combined() -> CombinedLoader:
        return CombinedLoader(
            {"a": _restarting_loader(Indexed(n=40))(), "b": _loader(Indexed(n=40), True)}, "max_size_cycle"
        )

    plain, _, _ = _fit(tmp_path, False, combined, epochs=6)
    tuned, trainer, cb = _fit(tmp_path / "tuned", True, combined, epochs=6)
    record = cb.report.autotune
    assert record is not None and record.basis in (BASIS_FIRST_EPOCH, BASIS_RESTARTS), (record.reason, record)
    assert record.settings == {"num_workers": 0} and record.previous == {"num_workers": 2}, record
    assert record.loaders == 1 and record.status == KEPT, record
    assert [dl.num_workers for dl in trainer.fit_loop._combined_loader.flattened] == [0, 0]
    assert tuned.seen == plain.seen  # each loader's sample indices, in order, across the switch


class SlowStep(Seen):
    """A step of ~60 ms (the loading takes microseconds): a run whose workers' start-up is a third of an epoch."""

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        time.sleep(0.06)
        return super().training_step(batch, batch_idx)


class SlowTrainStart(pl.Callback):
    """Another callback's work at the start of training (0.35 s): Lightning has started the first epoch's workers
    before it (``FitLoop.setup_data``), so the first epoch's wait for its first batch no longer shows their start-up."""

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        time.sleep(0.35)


@pytest.mark.parametrize(
    ("wait", "hidden", "epochs"),
    [(2, False, (1, 2)), (14, False, (2,)), (2, True, (2,))],
    ids=["verdict-in-epoch-0", "verdict-in-epoch-1", "first-start-up-hidden"],
)
def test_workers_restarting_for_a_third_of_each_epoch_are_switched_once_the_verdict_has_nothing_measured(
    tmp_path: Path, wait: int, hidden: bool, epochs: tuple[int, ...]
) -> None:
    # 2 workers that take 0.3 s to start, restarted every epoch, for 10 steps of ~60 ms: the start-up is under half
    # the first epoch (the first-epoch check leaves it to the verdict) and the verdict has no measured loader
    # setting (no probe), so the restarts are fixed at an epoch boundary and checked on the run's own steps. A
    # verdict within the first epoch: its end, or the second's where the first epoch's wait hid the start-up
    # (Lightning starts the first iterator before on_train_start: 6-9 ms of it seen in some fits beside other
    # processes, 250-300 ms in others; "first-start-up-hidden" makes it so); a verdict in the second epoch: its end.
    loader = _restarting_loader(Indexed(n=40))

    torch.manual_seed(0)
    plain = Seen()  # the same samples without the step's sleep
    quiet_trainer(tmp_path / "plain", [], max_epochs=6).fit(plain, train_dataloaders=loader())
    torch.manual_seed(0)
    tuned = SlowStep()
    cb = BottleneckCallback(**{**FAST, "wait": wait}, autotune=True)
    trainer = quiet_trainer(tmp_path / "tuned", [SlowTrainStart(), cb] if hidden else [cb], max_epochs=6)
    trainer.fit(tuned, train_dataloaders=loader())
    record = cb.report.autotune
    if hidden:
        assert cb._run is not None and cb._run.timer.epoch_start_wait_ms[0] < 150  # the first start-up hidden
    assert record is not None and record.basis == BASIS_RESTARTS, (record.reason, "\n".join(cb.report.notes))
    assert record.settings == {"num_workers": 0} and record.previous == {"num_workers": 2}, record
    assert record.applied_at_epoch in epochs and not record.mid_epoch, record
    # the start-up under half an epoch (its 10 steps take 0.6 s or more), at least a fifth of it
    assert record.startup_ms is not None and 150 <= record.startup_ms < 600 + 10 * 60, record
    # kept: 0.3 s an epoch spread over its 10 steps is half a step more, far outside the noise
    assert record.status == KEPT and record.speedup is not None and record.speedup > 1.2, record
    assert trainer.train_dataloader.num_workers == 0
    assert tuned.seen == plain.seen  # the exact sequence of sample indices, across the switch
    assert "once the verdict had no measured loader setting to apply" in autotune_line(record)
    assert record.to_dict()["basis"] == BASIS_RESTARTS


def test_a_start_up_the_first_epoch_hid_is_switched_at_the_next_epoch_end_before_any_verdict(
    tmp_path: Path,
) -> None:
    # the first-epoch check's loader (2 workers, 0.3 s to start every epoch, 10 steps of microseconds) behind another
    # callback's 0.35 s on_train_start: the first epoch's wait no longer shows the start-up, the second's does, and
    # the verdict comes later still (wait=30): the second epoch's end switches, where before only the verdict's
    # boundary would have (the fourth epoch's end at the earliest)
    loader = _restarting_loader(Indexed(n=40))
    torch.manual_seed(0)
    tuned = Seen()
    cb = BottleneckCallback(wait=30, warmup=1, active=3, verbose=False, trial_budget_s=0, autotune=True)
    trainer = quiet_trainer(tmp_path, [SlowTrainStart(), cb], max_epochs=6)
    trainer.fit(tuned, train_dataloaders=loader())
    record = cb.report.autotune
    assert cb._run is not None and cb._run.timer.epoch_start_wait_ms[0] < 150  # the first start-up hidden
    assert record is not None and record.basis == BASIS_FIRST_EPOCH, (record.reason, record)
    assert record.settings == {"num_workers": 0} and record.previous == {"num_workers": 2}, record
    assert record.applied_at_step == 20 and record.applied_at_epoch == 2 and not record.mid_epoch, record
    assert record.startup_ms is not None and record.startup_ms >= 250, record  # the second epoch's wait
    assert record.status == KEPT and record.speedup is not None and record.speedup > 3, record
    assert "after 2 epochs, before the verdict" in autotune_line(record)


def _quick_start(worker_id: int) -> None:
    time.sleep(0.05)  # a start-up of ~60-80 ms with the fork: a fifth of a slower epoch at most


class Bursty(Seen):
    """Every third step sleeps 0.25 s, the others take ~1 ms: the median step is the short mode (as with workers that
    deliver together), the trimmed mean what an epoch takes a step."""

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        if batch_idx % 3 == 0:
            time.sleep(0.25)
        return super().training_step(batch, batch_idx)


def test_a_start_up_short_beside_an_epoch_of_bursty_steps_is_left_alone(tmp_path: Path) -> None:
    # 2 workers that start in ~70 ms, every epoch, for 10 steps of which every third sleeps 0.25 s (~1 s an epoch):
    # the start-up is under a tenth of the epoch, under a fifth even once the verdict has nothing measured (up to a
    # start-up of ~210 ms: one beside a busy core in a full run crossed it with 0.15 s sleeps). Before,
    # the check weighed it against the median step (~1 ms: 10 ms an epoch) and switched at the first epoch's end
    # (issue 29's io_wait_workers: persistent workers applied and undone in 3 fits of 5, 0.966x)
    def loader() -> DataLoader:
        g = torch.Generator().manual_seed(7)
        return DataLoader(Indexed(n=40), batch_size=4, shuffle=True, generator=g, num_workers=2,
                          worker_init_fn=_quick_start)  # fmt: skip

    torch.manual_seed(0)
    tuned = Bursty()
    # the window in the second epoch: the first epoch's steps all timed (the profiled ones are left out)
    cb = BottleneckCallback(**{**FAST, "wait": 12}, autotune=True)
    trainer = quiet_trainer(tmp_path, [cb], max_epochs=6)
    trainer.fit(tuned, train_dataloaders=loader())
    record = cb.report.autotune
    waits = cb._run.timer.epoch_start_wait_ms
    assert record is not None and record.status == NOT_APPLIED and record.settings == {}, (record, waits)
    assert trainer.train_dataloader.num_workers == 2 and not trainer.train_dataloader.persistent_workers
    assert 40 <= sorted(waits)[len(waits) // 2] < 200, waits  # the start-up the test is built on


def test_kept_workers_are_weighed_by_what_they_save_not_the_whole_wait() -> None:
    # kept workers still wait for each epoch's first batch, loaded whole by one worker (issue 29's io_wait_workers:
    # a wait of ~110 ms, 51 ms of it the first batch); num_workers=0 saves the whole wait
    assert restart_saving_ms({"persistent_workers": True}, 110.0, 51.0) == pytest.approx(59.0)
    assert restart_saving_ms({"num_workers": 0}, 110.0, 51.0) == 110.0
    assert restart_saving_ms({"persistent_workers": True}, 110.0, None) == 110.0  # not timed: the whole wait
    assert restart_saving_ms({"persistent_workers": True}, 40.0, 60.0) == 0.0
    # a fifth of the epoch in wait, but not in what the fix saves
    assert restart_bound(110.0, 400.0, RESTART_SHARE_AFTER_VERDICT)
    assert not restart_bound(110.0, 400.0, RESTART_SHARE_AFTER_VERDICT, saved_ms=59.0)
    assert restart_bound(110.0, 180.0, RESTART_SHARE_AFTER_VERDICT, saved_ms=59.0)


def test_the_first_epoch_check_acts_only_on_start_ups_that_dominate_the_epoch() -> None:
    assert restart_bound(400.0, 20.0) and restart_bound(300.0, 300.0)
    assert not restart_bound(299.0, 301.0)  # under half the epoch: the verdict decides
    # once the verdict has no measured setting: a fifth of the epoch
    assert restart_bound(200.0, 800.0, RESTART_SHARE_AFTER_VERDICT)
    assert not restart_bound(199.0, 801.0, RESTART_SHARE_AFTER_VERDICT)
    assert not restart_bound(40.0, 1.0)  # under the stall floor (EPOCH_STALL_MIN_MS): a fork's noise
    # loading in-process over the epochs left (7 x 10 x 0.2 ms = 14 ms) is far under one more start-up
    assert restart_fix(0.4, 10, 7, 0.0002) == {"num_workers": 0}
    # 7 x 10 x 10 ms = 0.7 s of loading against a 0.4 s start-up: keep the workers instead
    assert restart_fix(0.4, 10, 7, 0.010) == {"persistent_workers": True}
    assert restart_fix(0.4, 10, 7, None) == {"persistent_workers": True}  # not timed: the safe fix
    assert AutotuneRecord.from_dict({"status": KEPT}).basis == BASIS_VERDICT  # reports written before


# ---------------------------------------------------------------------------------------------- two ranks
def _ddp_records(tmp_path: Path, mode: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """Ranks 0 and 1's autotune records from ``tests/ddp_scripts/ddp_train.py OUT mode`` (two ranks on CPU)."""
    script = Path(__file__).parent / "ddp_scripts" / "ddp_train.py"
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    proc = subprocess.run(
        [sys.executable, str(script), str(tmp_path), mode],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    # the two ranks share one pipe: a record (one write(2)) may land after another rank's unfinished line, and
    # another line right after it; each is found where it starts and read to the end of its JSON (raw_decode)
    by_rank = {
        m.group(1): json.JSONDecoder().raw_decode(proc.stdout, m.end())[0]
        for m in re.finditer(r"RANK (\d+) AUTOTUNE ", proc.stdout)
    }
    assert set(by_rank) == {"0", "1"}, proc.stdout[-3000:]
    return by_rank["0"], by_rank["1"]


def test_ddp_rank_zero_decides_and_both_ranks_switch_at_the_same_step(tmp_path: Path) -> None:
    zero, one = _ddp_records(tmp_path, "autotune")
    # only rank zero's choice was given; rank 1 applied it from the broadcast, at the same step
    first = {"num_workers": 2, "persistent_workers": True}
    assert zero["applied_at_step"] == one["applied_at_step"] is not None
    # kept (rank zero's 16 ms sleeps a batch in-process, two workers load two at once: 3.7-3.9x in runs here), then
    # both ranks raced rank zero's alternative at the same epoch, decided it alike and kept the same winner
    assert zero["status"] == one["status"] == KEPT, (zero, one)
    assert zero["raced_against"] == one["raced_against"] == first, (zero, one)
    assert zero["raced"] == one["raced"] == {"num_workers": 3, "persistent_workers": True}
    assert zero["raced_at_epoch"] == one["raced_at_epoch"] is not None
    assert zero["race_ended"] and one["race_ended"] and zero["race_ratio"] is not None, (zero, one)
    assert zero["race_won"] == one["race_won"] and zero["settings"] == one["settings"]
    assert zero["race_ratio"] == one["race_ratio"] and zero["speedup"] == one["speedup"]
    assert zero["workers_now"] == one["workers_now"] == zero["settings"]["num_workers"]


def test_ddp_workers_restarting_every_epoch_get_rank_zeros_fix_on_both_ranks(tmp_path: Path) -> None:
    zero, one = _ddp_records(tmp_path, "autotune_restart")
    # rank zero chose from its first epoch (or once its verdict had nothing measured) and timed the loading; rank 1
    # applied the same setting at the same step and both ranks decided alike
    assert zero["basis"] == one["basis"] and zero["basis"] in (BASIS_FIRST_EPOCH, BASIS_RESTARTS), (zero, one)
    assert zero["settings"] == one["settings"] == {"num_workers": 0}, (zero, one)
    assert zero["applied_at_step"] == one["applied_at_step"] is not None
    assert zero["applied_at_epoch"] == one["applied_at_epoch"] and not zero["mid_epoch"]
    assert zero["decided_at_step"] == one["decided_at_step"] is not None
    assert zero["status"] == one["status"] == KEPT, (zero, one)
    assert zero["speedup"] == one["speedup"] and zero["workers_now"] == one["workers_now"] == 0
    assert zero["startup_ms"] is not None and zero["startup_ms"] >= 150  # rank zero's own figures


@pytest.mark.parametrize(
    "mode",
    ["autotune_epoch", "autotune_epoch_persistent"],
    ids=["in-process", "worker-persisting"],
)
def test_ddp_in_one_epoch_both_ranks_switch_and_decide_at_the_same_step(tmp_path: Path, mode: str) -> None:
    zero, one = _ddp_records(tmp_path, mode)
    assert zero["previous"]["num_workers"] == one["previous"]["num_workers"] == (mode != "autotune_epoch")
    assert (
        zero["previous"]["persistent_workers"]
        == one["previous"]["persistent_workers"]
        == (mode != "autotune_epoch")
    )
    # one epoch of 160 steps: switched mid-epoch on both ranks at the same step, checked within the epoch at the same
    # step, decided alike (rank zero's decision broadcast); kept: rank zero's 16 ms a batch in-process (32 ms in one
    # persistent worker), two workers ~2x
    assert zero["mid_epoch"] and one["mid_epoch"], (zero, one)
    assert zero["applied_at_step"] == one["applied_at_step"] is not None
    assert (
        zero["decided_at_step"] == one["decided_at_step"] == zero["applied_at_step"] + MIN_CONFIRM_STEPS + 1
    )
    assert zero["decided_at_step"] < 160 and zero["status"] == one["status"] == KEPT, (zero, one)
    assert zero["speedup"] == one["speedup"] and not zero["raced"], (zero, one)


# ---------------------------------------------------------------------------------------------- pure parts
@pytest.mark.skipif(
    "in_order" not in inspect.signature(DataLoader).parameters, reason="DataLoader(in_order=) is torch >= 2.6"
)
def test_workers_that_replace_in_process_loading_keep_its_order() -> None:
    from lightning_bottleneck.live.loader_switch import recreate

    data = Indexed(n=40)
    # in-process loading has one order whatever in_order says; the workers that replace it must keep it
    assert recreate(DataLoader(data, batch_size=4, in_order=False), {"num_workers": 2}).in_order is True
    # a loader whose workers already loaded out of order keeps the user's choice
    workers = DataLoader(data, batch_size=4, num_workers=1, in_order=False)
    assert recreate(workers, {"num_workers": 2}).in_order is False


def test_decide_keeps_only_what_is_faster_beyond_noise() -> None:
    before = [10.0 + 0.1 * (i % 7) for i in range(40)]
    assert decide(before, [x * 0.5 for x in before]).keep
    slower = decide(before, [x * 1.5 for x in before])
    assert not slower.keep and slower.outcome == "hurt"
    same = decide(before, list(before))
    assert not same.keep and same.outcome == "no_change"
    assert not decide(before, [5.0]).keep  # too few steps: never kept


def _input_advice(settings: dict[str, Any], measured: bool = True) -> Recommendation:
    return Recommendation(
        kind="input", title="Load batches in workers", detail="", settings=settings,
        evidence={"ladder": []} if measured else {},
    )  # fmt: skip


def _loader_advice(report: Report) -> list[Recommendation]:
    """Advice to change the train DataLoader's worker settings."""
    keys = {"num_workers", "persistent_workers", "prefetch_factor", "pin_memory"}
    return [r for r in report.recommendations if r.kind == Category.INPUT and keys & set(r.settings)]


def test_what_the_switch_settled_is_not_advised_again() -> None:
    switched = {"num_workers": 2, "persistent_workers": True}
    same = _input_advice({**switched, "prefetch_factor": 4})
    other = _input_advice({"num_workers": 4, "persistent_workers": True}, measured=False)
    unrelated = Recommendation(kind="rest_of_fit", title="Log less often", detail="", settings={"x": 1})
    kept = AutotuneRecord(status=KEPT, settings=dict(switched))
    undone = AutotuneRecord(status=UNDONE, settings={**switched, "prefetch_factor": 4}, reason="slower")
    nothing = AutotuneRecord(status=NOT_APPLIED)
    val_loader = _input_advice({"num_workers": 2})
    val_loader.where = "val DataLoader"
    cheaper = Recommendation(kind="input", title="Make each sample cheaper to produce", detail="")
    cases = (same, other, unrelated, val_loader, cheaper)
    assert [settled(kept, r) for r in cases] == [True, True, False, False, False]
    assert [settled(undone, r) for r in cases] == [True, False, False, False, False]
    assert not any(settled(nothing, r) for r in cases)


def test_the_race_keeps_the_faster_mean_and_needs_enough_steps_of_both() -> None:
    first = [10.0 + 0.1 * (i % 7) for i in range(40)]
    faster = race(first, [x * 0.97 for x in first])  # any margin: both already beat the loader as it was
    assert faster.second_wins and faster.ratio == pytest.approx(0.97) and faster.interval is not None
    slower = race(first, [x * 1.05 for x in first])
    assert not slower.second_wins and slower.ratio == pytest.approx(1.05)
    short = race(first, first[: MIN_CONFIRM_STEPS - 1])  # too few steps of the raced one: the first stays
    assert not short.second_wins and short.ratio is None


def test_the_alternative_is_the_count_the_probe_left_to_the_run() -> None:
    settings = {"num_workers": 2, "persistent_workers": True}
    assert alternative(settings, [4]) == {"num_workers": 4, "persistent_workers": True}
    assert alternative(settings, []) is None and alternative(settings, [2]) is None
    assert alternative({"persistent_workers": True}, [4]) is None  # no worker count applied: nothing to race
    report = Report(Category.INPUT, 0.9, 10, 5, None, {})
    report.recommendations = [_input_advice(dict(settings))]
    assert choose(report, "cpu", [4]).alternative == {"num_workers": 4, "persistent_workers": True}
    assert choose(report, "cpu").alternative is None


def test_choose_takes_the_measured_loader_advice_and_only_loader_settings() -> None:
    report = Report(Category.INPUT, 0.9, 10, 5, None, {})
    report.recommendations = [
        _input_advice({"num_workers": 8}, measured=False),
        _input_advice({"num_workers": 4, "persistent_workers": True, "pin_memory": True, "batch_size": 64}),
    ]
    assert choose(report, "cpu")[:2] == ({"num_workers": 4, "persistent_workers": True}, "")
    assert choose(report, "cuda")[0] == {"num_workers": 4, "persistent_workers": True, "pin_memory": True}
    settings, why, *_ = choose(Report(Category.INPUT, 0.9, 10, 5, None, {}), "cpu")
    assert settings is None and why
    # how many steps after the verdict a mid-epoch switch waits: fewer when the advice predicts a large gain
    assert choose(report, "cpu").clean_steps == CLEAN_BEFORE_STEPS  # no figure: the full wait
    for predicted, steps in (
        (1.6, CLEAN_BEFORE_STEPS),
        (LARGE_GAIN_MIN, CLEAN_BEFORE_MIN),
        (7.0, CLEAN_BEFORE_MIN),
    ):
        report.recommendations[1].expected_speedup = predicted
        assert choose(report, "cpu").clean_steps == steps, predicted


def test_the_record_round_trips_and_renders_everywhere() -> None:
    record = AutotuneRecord(
        status=KEPT, settings=dict(WORKERS), previous={"num_workers": 0}, applied_at_step=20, applied_at_epoch=2,
        steps_before=30, steps_after=25, step_ratio=0.5, ratio_interval=(0.45, 0.55), outcome="helped",
        loaders=1, keep_line=keep_line(WORKERS, 4),
    )  # fmt: skip
    report = Report(Category.INPUT, 0.9, 10, 5, None, {}, autotune=record)
    again = Report.from_dict(json.loads(report.to_json()))
    assert again.autotune == record
    line = autotune_line(record)
    assert "at step 20" in line and "2.00x" in line and "1.82x to 2.22x" in line and "kept" in line
    assert "DataLoader(dataset, batch_size=4, ..., num_workers=2, persistent_workers=True)" in line
    assert "autotune: applied" in render_text(report)
    assert "### Autotune" in render_markdown(report)
    assert "<h2>Autotune</h2>" in render_html(report)
    # a race won: the first setting applied, the raced one that stayed, its ratio; everywhere the line goes
    raced = {"num_workers": 4, "persistent_workers": True}
    record.raced, record.raced_against, record.raced_at_epoch = raced, dict(WORKERS), 3
    record.race_ratio, record.race_interval, record.race_won, record.settings = 0.9, (0.85, 0.95), True, raced
    record.race_ended = True
    again = Report.from_dict(json.loads(report.to_json()))
    assert again.autotune == record
    line = autotune_line(record)
    assert line.startswith("applied num_workers=2, persistent_workers=True at step 20"), line
    assert "then ran num_workers=4 for epoch 3 (0.90x the mean step time of num_workers=2" in line, line
    assert "num_workers=4 stayed" in line and "0.85x to 0.95x" in line, line
    assert "then ran num_workers=4" in render_text(report) and "then ran num_workers=4" in render_html(report)
    record.race_ended = False  # the fit ended during the raced epoch (nothing was decided)
    assert "then ran num_workers=4 for epoch 3 (the fit ended during that epoch)" in autotune_line(record)
    record.race_ended, record.race_ratio, record.race_won = (
        True,
        None,
        False,
    )  # too few steps: the first stays
    assert "(too few steps to compare: num_workers=2 stayed)" in autotune_line(record)


def test_the_option_is_validated_and_flows_from_the_environment_and_the_cli(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with pytest.raises(MisconfigurationException, match=r"`autotune`.*True or False.*'yes'"):
        BottleneckCallback(autotune="yes")  # type: ignore[arg-type]
    from lightning_bottleneck.live.autoload import callbacks_from_env

    monkeypatch.setenv("LIGHTNING_BOTTLENECK", "autotune=true")
    (cb,) = callbacks_from_env()
    assert cb.autotune is True
    from lightning_bottleneck.cli import RUN_SWITCHES, build_parser

    assert RUN_SWITCHES[-1][:3] == ("--autotune", "autotune", True)
    args = build_parser().parse_args(["run", "--autotune", "train.py"])
    assert args.autotune is True
