"""No-code-change activation: ``LIGHTNING_BOTTLENECK=1 python train.py``.

Lightning calls :func:`callbacks_from_env` for every ``Trainer`` through the
``lightning.pytorch.callbacks_factory`` entry point. Without the variable it returns nothing and
imports nothing. The value may carry options: ``LIGHTNING_BOTTLENECK="wait=1,warmup=1,active=3"``.
A mistake in it (``wiat=2``, ``active=ten``) stops the program before training with one line naming the
bad key or value and the valid ones, not a traceback.
"""

from __future__ import annotations

import inspect
import os
import re
from typing import Any

ENV_VAR = "LIGHTNING_BOTTLENECK"
_OFF = {"", "0", "false", "no", "off"}
_ON = {"1", "true", "yes", "on"}
_BOOL = {"true": True, "yes": True, "on": True, "false": False, "no": False, "off": False}
_FLOAT = re.compile(r"^-?(\d+\.\d*|\.\d+|\d+)([eE][-+]?\d+)?$")


class OptionError(ValueError):
    """A bad ``LIGHTNING_BOTTLENECK`` value; ``str()`` is one line."""


def parse_options(value: str, valid: set[str] | None = None) -> dict[str, Any]:
    """``"wait=1,active=3,with_stack=true,report_path=r.json"`` -> keyword arguments.

    With ``valid``, a key outside it raises :class:`OptionError` naming the key and the valid ones.
    """
    opts: dict[str, Any] = {}
    if value.strip().lower() in _ON:
        return opts
    for item in value.split(","):
        if not item.strip():
            continue
        if "=" not in item:
            raise OptionError(
                f"{ENV_VAR}: expected key=value items separated by commas, got {item.strip()!r}"
            )
        key, raw = (part.strip() for part in item.split("=", 1))
        if valid is not None and key not in valid:
            raise OptionError(f"{ENV_VAR}: unknown option {key!r}; valid options: {', '.join(sorted(valid))}")
        if raw.lower() in _BOOL:
            opts[key] = _BOOL[raw.lower()]
        elif raw.lstrip("-").isdigit():
            opts[key] = int(raw)
        elif _FLOAT.match(raw):
            opts[key] = float(raw)
        elif raw.lower() == "none":
            opts[key] = None
        else:
            opts[key] = raw
    return opts


def callback_options() -> set[str]:
    """The keyword arguments ``BottleneckCallback`` takes (imports torch and lightning)."""
    from lightning_bottleneck.callback import BottleneckCallback

    params = inspect.signature(BottleneckCallback.__init__).parameters
    return {name for name, p in params.items() if name != "self" and p.kind is p.POSITIONAL_OR_KEYWORD}


def callbacks_from_env() -> list[Any]:
    value = os.environ.get(ENV_VAR, "")
    if value.strip().lower() in _OFF:
        return []
    from lightning_bottleneck.callback import BottleneckCallback

    try:
        return [BottleneckCallback(**parse_options(value, callback_options()))]
    except OptionError as err:
        raise SystemExit(f"lightning-bottleneck: error: {err}") from None
    except Exception as err:  # the callback's own validation names the option and the allowed values
        message = " ".join(str(err).split())
        raise SystemExit(f"lightning-bottleneck: error: {ENV_VAR}={value!r}: {message}") from None


def stands_down(callback: Any, trainer: Any, duplicates: bool = True) -> bool:
    """Whether ``callback`` must leave this fit alone, saying why once; called at setup and train start.

    - Another ``BottleneckCallback`` comes first in ``trainer.callbacks`` (two in the code, or
      ``LIGHTNING_BOTTLENECK=1`` with one already in the code: the entry point cannot see the Trainer, and
      Lightning appends its callbacks after the user's). The first one runs the analysis with its own
      options and notes it in its report; this one logs one info line.
    - A ``torch.profiler`` session already records (the user's own ``with torch.profiler.profile():
      trainer.fit(...)``, on any rank): only one can run in a process, so the user's session is left
      intact, every rank stands down, and one warning says so.
    """
    from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn

    from lightning_bottleneck.callback import BottleneckCallback
    from lightning_bottleneck.profiler_window import profiler_in_use

    if duplicates:
        first = next((c for c in trainer.callbacks if isinstance(c, BottleneckCallback)), callback)
        if first is not callback:
            rank_zero_info(
                "BottleneckCallback: another BottleneckCallback in this Trainer runs the analysis (two in the "
                f"code, or {ENV_VAR} with one in the code); this one stands down."
            )
            first._notes.append(
                "A second BottleneckCallback in the Trainer stood down; this one ran the analysis."
            )
            return True
    busy = profiler_in_use()
    strategy = getattr(trainer, "strategy", None)
    if strategy is not None and getattr(trainer, "world_size", 1) > 1:
        # Every rank must take the same road: the callback's set-up has collectives (log_dir, the gather's
        # group), and a user may profile one rank only. One all-reduce, at setup and train start.
        busy = strategy.reduce_boolean_decision(busy, all=False)
    if busy:
        rank_zero_warn(
            "BottleneckCallback stands down for this fit: a torch.profiler session is already recording "
            "(your own `with torch.profiler.profile()`?) and only one can run in a process; that session is "
            "left intact. Remove it, or the callback, to get the analysis."
        )
        return True
    return False
