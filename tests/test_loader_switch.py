"""``live/loader_switch.py`` on real DataLoaders (no Trainer): a loader with workers (persistent or not), switched in
the middle of its epoch, gives the same batches in the same order and leaves the generator where the loader alone
would have left it, in the epochs after too, and so does a switch taken back mid-epoch to the loader's own setting; a
switch taken back before any batch of it was used leaves the running iterator as it was.

The full fits (a switch, its check and its undo inside a Lightning fit) are in ``tests/test_autotune.py``.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch.utils.data import BatchSampler, DataLoader, Dataset, RandomSampler

from lightning_bottleneck.live.loader_switch import (
    back_to_own_setting,
    continue_epoch,
    own_loaders,
    recreate,
    rest_of_epoch,
    shutdown_iterator,
    uncut,
)


class Numbers(Dataset):
    def __len__(self) -> int:
        return 90  # 23 batches of 4, the last of 2

    def __getitem__(self, i: int) -> int:
        return i


def _loader(workers: int, persistent: bool = False) -> DataLoader:
    return DataLoader(Numbers(), batch_size=4, shuffle=True, generator=torch.Generator().manual_seed(7),
                      num_workers=workers, persistent_workers=persistent)  # fmt: skip


def _epoch(dl: DataLoader) -> list[list[int]]:
    return [b.tolist() for b in dl]


@pytest.mark.parametrize(
    "settings",
    [{"num_workers": 2}, {"num_workers": 2, "persistent_workers": True}, {"num_workers": 0}],
    ids=["two-workers", "two-persistent-workers", "in-process"],
)
@pytest.mark.parametrize("taken", [0, 5, 20])
@pytest.mark.parametrize("persistent", [False, True], ids=["own-worker", "own-persistent-worker"])
def test_a_loader_with_workers_switched_mid_epoch_keeps_its_batches_and_its_generator(
    settings: dict[str, Any], taken: int, persistent: bool
) -> None:
    plain = _loader(1, persistent)
    # three epochs: each one's order comes from the generator after the one before (a persistent loader drew its
    # base seed from it once, at its first iterator; one that does not persist draws it every epoch)
    expected = _epoch(plain) + _epoch(plain) + _epoch(plain)
    shutdown_iterator(plain._iterator)

    dl = _loader(1, persistent)
    seen = (
        _epoch(dl) if persistent else []
    )  # persistent: an epoch before, the one worker then waits for the next
    running = iter(dl)
    # the one worker has been given a few more batches than these
    seen += [next(running).tolist() for _ in range(taken)]
    assert running._send_idx > taken
    # the loader of the epochs after, as autotune makes it before the switch: the persistent one goes on (its
    # sampler draws as the user's iterator would have), else one re-created from the user's
    after = recreate(dl, settings)
    finish = rest_of_epoch(dl, running, settings)
    after = finish if settings.get("persistent_workers") else after
    assert after.batch_sampler.batch_size == 4  # as the user's loader's reads
    rest = continue_epoch(running, iter(finish), dl)
    seen += [b.tolist() for b in rest]
    assert running._shutdown  # the user's worker stopped once it delivered what it was given
    assert dl._iterator is None  # and a persistent one is no longer the user's loader's to re-use
    seen += _epoch(after)
    if not persistent:  # the epoch after that: the user's own loader again
        seen += _epoch(dl)
    shutdown_iterator(getattr(finish, "_iterator", None))
    shutdown_iterator(getattr(after, "_iterator", None))
    assert seen == expected
    # RandomSampler's tail permutation was drawn, as the user's worker would have drawn it
    assert torch.equal(dl.generator.get_state(), plain.generator.get_state())


@pytest.mark.parametrize("persistent", [False, True], ids=["own-worker", "own-persistent-workers"])
def test_a_switch_undone_mid_epoch_goes_on_with_the_loaders_own_workers_and_its_order(
    persistent: bool,
) -> None:
    plain = _loader(2, persistent)
    expected = _epoch(plain) + _epoch(plain)
    shutdown_iterator(plain._iterator)

    dl = _loader(2, persistent)
    running = iter(dl)
    seen = [next(running).tolist() for _ in range(3)]
    finish = rest_of_epoch(dl, running, {"num_workers": 1, "persistent_workers": True})
    switched = continue_epoch(running, iter(finish), dl)
    seen += [next(switched).tolist() for _ in range(8)]  # past the batches the user's workers were given
    back = back_to_own_setting(dl, switched, finish)
    assert back.num_workers == 2
    seen += _epoch(back)
    shutdown_iterator(switched)
    # the epochs after: the user's loader, re-created with its own settings where its workers persisted
    (again,) = own_loaders([finish], [dl])
    assert (again is dl) is not persistent and again.num_workers == 2
    assert again.persistent_workers is persistent
    seen += _epoch(again)
    shutdown_iterator(getattr(again, "_iterator", None))
    assert seen == expected
    assert torch.equal(dl.generator.get_state(), plain.generator.get_state())


def test_a_switch_taken_back_before_its_batches_are_used_leaves_the_running_iterator_as_it_was() -> None:
    expected = _epoch(_loader(1))
    dl = _loader(1)
    running = iter(dl)
    seen = [next(running).tolist() for _ in range(3)]
    finish = rest_of_epoch(dl, running, {"num_workers": 2})
    new = iter(finish)  # its two workers were given batches from the running sampler iterator
    assert finish.batch_sampler.handed > 0
    shutdown_iterator(new)
    uncut(running, finish)  # as autotune does when re-creating another loader failed
    seen += [b.tolist() for b in running]
    assert seen == expected


def test_a_distributed_sampler_is_told_each_epoch_after_a_switch_to_workers_that_persist() -> None:
    # Lightning calls set_epoch on a loader's sampler and on its batch sampler's sampler at each epoch
    # (_set_sampler_epoch): the loader that goes on after a mid-epoch switch passes it to the user's sampler, so a
    # DistributedSampler shuffles each epoch as it would have (not the switched epoch's order again)
    from lightning.fabric.utilities.data import _set_sampler_epoch
    from torch.utils.data import DistributedSampler

    def loader() -> DataLoader:
        sampler = DistributedSampler(Numbers(), num_replicas=2, rank=0, shuffle=True, seed=3)
        return DataLoader(Numbers(), batch_size=4, sampler=sampler, num_workers=1)

    plain = loader()
    expected = []
    for epoch in range(3):
        _set_sampler_epoch(plain, epoch)
        expected += _epoch(plain)

    dl = loader()
    _set_sampler_epoch(dl, 0)
    running = iter(dl)
    seen = [next(running).tolist() for _ in range(5)]
    finish = rest_of_epoch(dl, running, {"num_workers": 2, "persistent_workers": True})
    seen += [b.tolist() for b in continue_epoch(running, iter(finish), dl)]
    for epoch in (1, 2):
        _set_sampler_epoch(finish, epoch)
        seen += _epoch(finish)
    shutdown_iterator(finish._iterator)
    assert seen == expected


def _batched(workers: int, persistent: bool) -> DataLoader:
    sampler = BatchSampler(RandomSampler(Numbers(), generator=torch.Generator().manual_seed(7)), 4, False)
    return DataLoader(Numbers(), batch_sampler=sampler, num_workers=workers, persistent_workers=persistent)


def _by_position(workers: int, persistent: bool) -> DataLoader:
    from lightning.fabric.utilities.data import _replace_dunder_methods

    with _replace_dunder_methods(DataLoader, "dataset"):  # as Lightning captures a DataModule's loader
        return DataLoader(Numbers(), 4, True, generator=torch.Generator().manual_seed(7), num_workers=workers,
                          persistent_workers=persistent)  # fmt: skip


@pytest.mark.parametrize(
    "make", [_batched, _by_position], ids=["its-own-batch-sampler", "arguments-by-position"]
)
@pytest.mark.parametrize(
    "own", [(0, False), (1, False), (1, True)], ids=["in-process", "one-worker", "one-persistent-worker"]
)
@pytest.mark.parametrize(
    "settings",
    [{"num_workers": 0}, {"num_workers": 2}, {"num_workers": 2, "persistent_workers": True}],
    ids=["to-in-process", "to-two-workers", "to-two-persistent-workers"],
)
def test_a_loader_re_created_at_an_epoch_boundary_keeps_its_batches_and_its_generator(
    make: Any, own: tuple[int, bool], settings: dict[str, Any]
) -> None:
    # the loader autotune puts in the fit loop at an epoch boundary (recreate): a batch sampler of the user's is
    # kept as it is, and arguments given by position stay in their places; the epochs after draw as the user's would
    plain = make(*own)
    expected = _epoch(plain) + _epoch(plain) + _epoch(plain)
    shutdown_iterator(plain._iterator)

    dl = make(*own)
    seen = _epoch(dl)
    new = recreate(dl, settings)
    shutdown_iterator(dl._iterator)  # as autotune shuts the user's persistent workers down at the switch
    # its batch sampler reads as the user's: batch_size 4
    assert new.num_workers == settings["num_workers"] and new.batch_sampler.batch_size == 4
    seen += _epoch(new) + _epoch(new)
    shutdown_iterator(new._iterator)
    assert seen == expected
    assert torch.equal(dl.generator.get_state() if dl.generator is not None else torch.get_rng_state(),
                       plain.generator.get_state() if plain.generator is not None else torch.get_rng_state())  # fmt: skip
