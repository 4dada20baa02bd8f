"""``live/loader_switch.py`` on real DataLoaders (no Trainer): a loader whose workers do not persist, switched in the
middle of its epoch, gives the same batches in the same order and leaves the generator where the loader alone would
have left it; a switch taken back before any batch of it was used leaves the running iterator as it was.

The full fits (a switch, its check and its undo inside a Lightning fit) are in ``tests/test_autotune.py``.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, Dataset

from lightning_bottleneck.live.loader_switch import (
    continue_epoch,
    rest_of_epoch,
    shutdown_iterator,
    uncut,
)


class Numbers(Dataset):
    def __len__(self) -> int:
        return 90  # 23 batches of 4, the last of 2

    def __getitem__(self, i: int) -> int:
        return i


def _loader(workers: int) -> DataLoader:
    return DataLoader(Numbers(), batch_size=4, shuffle=True, generator=torch.Generator().manual_seed(7),
                      num_workers=workers)  # fmt: skip


def _epoch(dl: DataLoader) -> list[list[int]]:
    return [b.tolist() for b in dl]


@pytest.mark.parametrize(
    "settings",
    [{"num_workers": 2}, {"num_workers": 2, "persistent_workers": True}, {"num_workers": 0}],
    ids=["two-workers", "two-persistent-workers", "in-process"],
)
@pytest.mark.parametrize("taken", [0, 5, 20])
def test_a_loader_with_workers_switched_mid_epoch_keeps_its_batches_and_its_generator(
    settings: dict[str, Any], taken: int
) -> None:
    plain = _loader(1)
    # two epochs: the second's order comes from the generator after the first
    expected = _epoch(plain) + _epoch(plain)

    dl = _loader(1)
    running = iter(dl)
    # the one worker has been given a few more batches than these
    seen = [next(running).tolist() for _ in range(taken)]
    assert running._send_idx > taken
    finish = rest_of_epoch(dl, running, settings)
    rest = continue_epoch(running, iter(finish))
    seen += [b.tolist() for b in rest]
    assert running._shutdown  # the user's worker stopped once it delivered what it was given
    # the epoch after: the persistent loader goes on (its sampler draws as a new iterator of the user's would),
    # else the user's own loader
    seen += _epoch(finish if settings.get("persistent_workers") else dl)
    shutdown_iterator(getattr(finish, "_iterator", None))
    assert seen == expected
    # RandomSampler's tail permutation was drawn, as the user's worker would have drawn it
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
