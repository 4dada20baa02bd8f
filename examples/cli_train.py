"""LightningCLI with the callback, from the command line or a config file.

Bounded by default (``--trainer.max_steps=60``: a few seconds on a laptop CPU; the verdict is printed
when the profiling window has been analysed, then refreshed at the end of fit). Pass another
``--trainer.max_steps`` or ``--trainer.max_epochs`` for a longer run.

    # the short flag: the class name is enough once lightning_bottleneck is imported
    python examples/cli_train.py fit --data.name=input --trainer.max_steps=20 \
        --trainer.callbacks+=BottleneckCallback --trainer.callbacks.wait=2 --trainer.callbacks.warmup=2

    # the full class path works without any import in the script
    python examples/cli_train.py fit --trainer.callbacks+=lightning_bottleneck.BottleneckCallback

    # or a config file
    python examples/cli_train.py fit --config examples/cli_config.yaml
"""

from __future__ import annotations

import sys
from pathlib import Path

from lightning.pytorch.cli import LightningCLI

sys.path.insert(0, str(Path(__file__).resolve().parent))
from lightning_bottleneck import BottleneckCallback  # noqa: F401  - makes the short flag resolve

from scenarios import Regressor, ScenarioData


def main(args: list[str] | None = None) -> LightningCLI:
    return LightningCLI(
        Regressor,
        ScenarioData,
        args=args,
        save_config_callback=None,
        trainer_defaults={"max_steps": 60},  # without it Lightning runs 1000 epochs (minutes)
    )


if __name__ == "__main__":
    main()
