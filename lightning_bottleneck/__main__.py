"""``python -m lightning_bottleneck``: the same command line as ``lightning-bottleneck``."""

from __future__ import annotations

import sys

from lightning_bottleneck.cli import main

sys.exit(main())
