"""Both Lightning namespaces: ``lightning.pytorch`` (the unified package) and ``pytorch_lightning`` (the
standalone one). The callback trains, diagnoses and reports under either, in code and through the
``LIGHTNING_BOTTLENECK`` entry point (each namespace has its own ``callbacks_factory`` group).
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

NAMESPACES = ["lightning.pytorch", "pytorch_lightning"]

# A tiny input-bound fit: every sample sleeps 4 ms on the training process (num_workers=0).
SCRIPT = textwrap.dedent(
    """
    import sys, time, torch
    import {ns} as pl

    class Slow(torch.utils.data.Dataset):
        def __len__(self):
            return 256
        def __getitem__(self, i):
            time.sleep(0.004)
            return torch.randn(16), torch.randn(1)

    class Model(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = torch.nn.Linear(16, 1)
        def training_step(self, batch, batch_idx):
            x, y = batch
            return torch.nn.functional.mse_loss(self.net(x), y)
        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01)

    callbacks = []
    if sys.argv[2] == "code":
        from lightning_bottleneck import BottleneckCallback
        callbacks.append(BottleneckCallback(wait=1, warmup=1, active=3, verbose=False, report_path=sys.argv[1]))
    trainer = pl.Trainer(max_steps=8, accelerator="cpu", devices=1, logger=False, callbacks=callbacks,
                         enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False,
                         default_root_dir=sys.argv[3])
    trainer.fit(Model(), torch.utils.data.DataLoader(Slow(), batch_size=4))
    """
)


@pytest.mark.parametrize("namespace", NAMESPACES)
@pytest.mark.parametrize("how", ["code", "env"])
def test_trains_and_reports_under_each_namespace(tmp_path: Path, namespace: str, how: str) -> None:
    if (
        importlib.util.find_spec(namespace.split(".")[0]) is None
    ):  # pragma: no cover - dev extra installs both
        pytest.fail(f"{namespace} is not installed: `pip install -e .[dev]` brings both namespaces")
    script = tmp_path / "train.py"
    script.write_text(SCRIPT.format(ns=namespace))
    report = tmp_path / "report.json"
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    env.pop("LIGHTNING_BOTTLENECK", None)
    if how == "env":
        env["LIGHTNING_BOTTLENECK"] = f"wait=1,warmup=1,active=3,verbose=false,report_path={report}"
    out = subprocess.run(
        [sys.executable, str(script), str(report), how, str(tmp_path / "root")],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    data = json.loads(report.read_text())
    assert data["primary"] == "input", data["breakdown"]
    assert data["steps_profiled"] >= 3
    assert data["breakdown"]["data_wait"] > 0.3
