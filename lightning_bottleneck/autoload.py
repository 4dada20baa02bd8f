"""No-code-change activation: ``LIGHTNING_BOTTLENECK=1 python train.py``.

Lightning calls :func:`callbacks_from_env` for every ``Trainer`` through the
``lightning.pytorch.callbacks_factory`` entry point. Without the variable it returns nothing and
imports nothing. The value may carry options: ``LIGHTNING_BOTTLENECK="wait=1,warmup=1,active=3"``.
"""

from __future__ import annotations

import os
from typing import Any

ENV_VAR = "LIGHTNING_BOTTLENECK"
_OFF = {"", "0", "false", "no", "off"}
_BOOL = {"true": True, "yes": True, "on": True, "false": False, "no": False, "off": False}


def parse_options(value: str) -> dict[str, Any]:
    """``"wait=1,active=3,with_stack=true,report_path=r.json"`` -> keyword arguments."""
    opts: dict[str, Any] = {}
    if value.strip().lower() in {"1", "true", "yes", "on"}:
        return opts
    for item in value.split(","):
        if not item.strip():
            continue
        if "=" not in item:
            raise ValueError(f"{ENV_VAR}: expected key=value items separated by commas, got {item!r}")
        key, raw = (part.strip() for part in item.split("=", 1))
        if raw.lower() in _BOOL:
            opts[key] = _BOOL[raw.lower()]
        elif raw.lstrip("-").isdigit():
            opts[key] = int(raw)
        elif raw.lower() == "none":
            opts[key] = None
        else:
            opts[key] = raw
    return opts


def callbacks_from_env() -> list[Any]:
    value = os.environ.get(ENV_VAR, "")
    if value.strip().lower() in _OFF:
        return []
    from lightning_bottleneck.callback import BottleneckCallback

    try:
        return [BottleneckCallback(**parse_options(value))]
    except TypeError as err:
        raise ValueError(f"{ENV_VAR}={value!r}: {err}") from err
