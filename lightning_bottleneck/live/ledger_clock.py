"""The ledger's clock: seconds per *slot*, self time only, and the generic contexts that time one action.

A slot is a part of the fit (:class:`~lightning_bottleneck.categories.FitPart`) or a named piece of one (one
callback hook, the training fetch). :class:`SlotClock` keeps a stack of slots; each boundary reads
``perf_counter`` once and adds the time since the previous boundary to the slot running until then, so every
second lands in exactly one slot. :class:`Timed`, :class:`Count` and :data:`UNTIMED` are the contexts the
profiler hands Lightning for an action (see :mod:`lightning_bottleneck.live.ledger_actions`).
"""

from __future__ import annotations

from time import perf_counter
from typing import Protocol

from lightning_bottleneck.categories import FitPart

__all__ = ["PARTS", "PART_SLOT", "UNTIMED", "Count", "SlotClock", "StepFeed", "Timed"]

#: Every part, in order: the clock's first slots are the parts themselves, ``PART_SLOT[part]`` each.
PARTS = list(FitPart)
PART_SLOT = {p: i for i, p in enumerate(PARTS)}


class SlotClock:
    """Seconds per slot: ``cur`` runs now, ``stack`` holds the slots interrupted by nested ones."""

    __slots__ = ("acc", "calls", "cur", "names", "parts", "stack", "t", "t0")

    def __init__(self) -> None:
        self.acc: list[float] = []
        self.calls: list[int] = []
        self.parts: list[FitPart] = []
        self.names: list[str | None] = []
        for part in PARTS:
            self.new_slot(part)
        self.stack: list[int] = []
        self.cur = PART_SLOT[FitPart.SETUP_TEARDOWN]
        self.t0 = self.t = perf_counter()

    def new_slot(self, part: FitPart, name: str | None = None) -> int:
        self.acc.append(0.0)
        self.calls.append(0)
        self.parts.append(part)
        self.names.append(name)
        return len(self.acc) - 1

    def enter(self, slot: int) -> None:
        now = perf_counter()
        self.acc[self.cur] += now - self.t
        self.t = now
        self.stack.append(self.cur)
        self.cur = slot
        self.calls[slot] += 1

    def exit(self) -> None:
        now = perf_counter()
        self.acc[self.cur] += now - self.t
        self.t = now
        if self.stack:
            self.cur = self.stack.pop()

    def set_level(self, depth: int, slot: int) -> None:
        """The slot that runs at nesting ``depth`` (when the slots above it have ended) becomes ``slot``."""
        if depth < 0:
            return
        if depth < len(self.stack):
            self.stack[depth] = slot
        elif depth == len(self.stack):
            now = perf_counter()
            self.acc[self.cur] += now - self.t
            self.t = now
            self.cur = slot

    def flush(self) -> float:
        now = perf_counter()
        self.acc[self.cur] += now - self.t
        self.t = now
        return now - self.t0


class StepFeed(Protocol):
    """Told each training step's start and end by the ledger's contexts, and what went wrong in either
    (:mod:`lightning_bottleneck.live.step_feed`)."""

    def step_started(self) -> None: ...

    def step_ended(self) -> None: ...

    def failed(self, where: str, err: Exception) -> None: ...


class _Untimed:
    """A hook nobody overrides, or an action of no interest: its time stays with the slot around it."""

    __slots__ = ()

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


UNTIMED = _Untimed()


class Timed:
    """An action with a slot of its own (inlined enter/exit: this is the per-hook cost)."""

    __slots__ = ("clock", "slot")

    def __init__(self, clock: SlotClock, slot: int) -> None:
        self.clock = clock
        self.slot = slot

    def __enter__(self) -> None:
        c = self.clock
        now = perf_counter()
        c.acc[c.cur] += now - c.t
        c.t = now
        c.stack.append(c.cur)
        c.cur = self.slot
        c.calls[self.slot] += 1

    def __exit__(self, *exc: object) -> None:
        c = self.clock
        now = perf_counter()
        c.acc[c.cur] += now - c.t
        c.t = now
        if c.stack:
            c.cur = c.stack.pop()


class Count:
    """An action only counted when it completes (its time stays with the slot around it)."""

    __slots__ = ("calls", "slot")

    def __init__(self, clock: SlotClock, slot: int) -> None:
        self.calls = clock.calls
        self.slot = slot

    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type: object, *exc: object) -> None:
        if exc_type is None:
            self.calls[self.slot] += 1
