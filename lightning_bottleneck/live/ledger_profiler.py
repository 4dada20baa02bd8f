"""The ledger's profiler adapter: :class:`LedgerProfiler` stands in for ``trainer.profiler`` during the fit.

The Trainer reads ``trainer.profiler`` at call time, so every ``profile(action)`` / ``start`` / ``stop`` of
the fit goes through it. It asks the ledger for the context of each action name once (a dict lookup
afterwards) and forwards every call to the user's profiler (``PassThroughProfiler`` by default, then nothing
is forwarded at all), so ``Trainer(profiler="simple" | "advanced")`` keeps its output.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from lightning.pytorch.profilers import PassThroughProfiler, Profiler

if TYPE_CHECKING:
    from lightning_bottleneck.live.ledger import LiveLedger

__all__ = ["LedgerProfiler"]


class _Forwarded:
    """Our context around the user's profiler's own ``profile(action)`` (theirs inside ours)."""

    __slots__ = ("cm", "name", "ours", "user")

    def __init__(self, ours: Any, user: Profiler, name: str) -> None:
        self.ours = ours
        self.user = user
        self.name = name
        self.cm: Any = None

    def __enter__(self) -> str:
        self.ours.__enter__()
        self.cm = self.user.profile(self.name)
        try:
            return self.cm.__enter__()
        except BaseException:
            self.ours.__exit__(None, None, None)
            raise

    def __exit__(self, *exc: Any) -> Any:
        try:
            return self.cm.__exit__(*exc)
        finally:
            self.ours.__exit__(*exc)


_OWN = frozenset({"_user", "_ledger", "_ctxs", "_forward"})


class LedgerProfiler(Profiler):
    """``trainer.profiler`` for the fit: times actions for the ledger and forwards everything to the user's.

    Attributes it does not have itself (``dirpath``, ``_lightning_module``, a profiler's own fields) are read
    from and written to the user's profiler.
    """

    def __init__(
        self, user: Profiler, ledger: LiveLedger
    ) -> None:  # no super().__init__: fields are the user's
        object.__setattr__(self, "_user", user)
        object.__setattr__(self, "_ledger", ledger)
        object.__setattr__(self, "_ctxs", {})
        object.__setattr__(self, "_forward", type(user) is not PassThroughProfiler)

    # ---- the hot path
    def profile(self, action_name: str) -> Any:
        ctx = self._ctxs.get(action_name)
        if ctx is None:
            ctx = self._ctxs[action_name] = self._ledger.classify(action_name)
        if self._forward:
            return _Forwarded(ctx, self._user, action_name)
        return ctx

    def start(self, action_name: str) -> None:
        ctx = self._ctxs.get(action_name)
        if ctx is None:
            ctx = self._ctxs[action_name] = self._ledger.classify(action_name)
        ctx.__enter__()
        if self._forward:
            try:
                self._user.start(action_name)
            except BaseException:
                ctx.__exit__(None, None, None)
                raise

    def stop(self, action_name: str) -> None:
        try:
            if self._forward:
                self._user.stop(action_name)
        finally:
            ctx = self._ctxs.get(action_name)
            if ctx is not None:
                ctx.__exit__(None, None, None)

    # ---- everything else is the user's profiler's
    def summary(self) -> str:
        return self._user.summary()

    def describe(self) -> None:
        self._user.describe()

    def setup(self, stage: str, local_rank: int | None = None, log_dir: str | None = None) -> None:
        self._user.setup(stage, local_rank=local_rank, log_dir=log_dir)

    def teardown(self, stage: str | None) -> None:
        self._user.teardown(stage)

    def __getattr__(self, name: str) -> Any:
        if name in _OWN:  # not set yet (unpickling): never recurse
            raise AttributeError(name)
        return getattr(self._user, name)

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _OWN:
            object.__setattr__(self, name, value)
        else:
            setattr(self._user, name, value)

    def __del__(
        self,
    ) -> None:  # the base class tears down on deletion: the user's profiler is not ours to close
        return None
