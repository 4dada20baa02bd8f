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

from lightning_bottleneck.vocabulary import ENV_VAR

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
    from lightning_bottleneck.live.callback import BottleneckCallback

    params = inspect.signature(BottleneckCallback.__init__).parameters
    return {name for name, p in params.items() if name != "self" and p.kind is p.POSITIONAL_OR_KEYWORD}


def callbacks_from_env() -> list[Any]:
    value = os.environ.get(ENV_VAR, "")
    if value.strip().lower() in _OFF:
        return []
    from lightning_bottleneck.live.callback import BottleneckCallback

    try:
        return [BottleneckCallback(**parse_options(value, callback_options()))]
    except OptionError as err:
        raise SystemExit(f"lightning-bottleneck: error: {err}") from None
    except Exception as err:  # the callback's own validation names the option and the allowed values
        message = " ".join(str(err).split())
        raise SystemExit(f"lightning-bottleneck: error: {ENV_VAR}={value!r}: {message}") from None
