"""LightningCLI (short flag, class path, config file) and the no-code-change environment variable."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from lightning_bottleneck.live.autoload import ENV_VAR, callbacks_from_env, parse_options

from conftest import EXAMPLES

pytest.importorskip("jsonargparse")

CLI_ARGS = [
    "--data.name=input",
    "--trainer.max_steps=8",
    "--trainer.accelerator=cpu",
    "--trainer.enable_progress_bar=false",
    "--trainer.enable_checkpointing=false",
    "--trainer.logger=false",
]


@pytest.mark.parametrize("flag", ["BottleneckCallback", "lightning_bottleneck.BottleneckCallback"])
def test_lightning_cli_callback_flag(tmp_path: Path, flag: str) -> None:
    sys.path.insert(0, str(EXAMPLES))
    from lightning_bottleneck import BottleneckCallback

    from cli_train import main

    cli = main(
        [
            "fit",
            *CLI_ARGS,
            f"--trainer.default_root_dir={tmp_path}",
            f"--trainer.callbacks+={flag}",
            "--trainer.callbacks.wait=1",
            "--trainer.callbacks.warmup=1",
            "--trainer.callbacks.active=3",
            "--trainer.callbacks.verbose=false",
        ]
    )
    (cb,) = [c for c in cli.trainer.callbacks if isinstance(c, BottleneckCallback)]
    assert (cb.wait, cb.warmup, cb.active) == (1, 1, 3)
    assert cb.report is not None and cb.report.primary.value == "input"
    assert json.loads((tmp_path / "bottleneck_report.json").read_text())["steps_profiled"] == 3


def test_lightning_cli_config_file(tmp_path: Path) -> None:
    sys.path.insert(0, str(EXAMPLES))
    from cli_train import main

    report = tmp_path / "r.json"
    cli = main(
        [
            "fit",
            "--config",
            str(EXAMPLES / "cli_config.yaml"),
            *CLI_ARGS,
            f"--trainer.default_root_dir={tmp_path}",
            f"--trainer.callbacks.report_path={report}",
            "--trainer.callbacks.wait=1",
            "--trainer.callbacks.warmup=1",
            "--trainer.callbacks.active=3",
        ]
    )
    assert cli.trainer.global_step == 8
    assert json.loads(report.read_text())["primary"] == "input"


def test_env_var_options_are_parsed() -> None:
    assert parse_options("1") == {}
    assert parse_options("wait=1, active=3,with_stack=true,report_path=r.json,log_every_n_steps=none") == {
        "wait": 1,
        "active": 3,
        "with_stack": True,
        "report_path": "r.json",
        "log_every_n_steps": None,
    }
    with pytest.raises(ValueError, match=ENV_VAR):
        parse_options("wait")


def test_env_var_off_adds_and_imports_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_VAR, raising=False)
    assert callbacks_from_env() == []
    monkeypatch.setenv(ENV_VAR, "0")
    assert callbacks_from_env() == []
    # every Trainer calls the factory: without the variable it must not even import the callback
    probe = (
        "import sys, lightning.pytorch as pl\n"
        "pl.Trainer(logger=False, enable_progress_bar=False, enable_model_summary=False)\n"
        "print('lightning_bottleneck.live.callback' in sys.modules)\n"
    )
    env = {k: v for k, v in __import__("os").environ.items() if k != ENV_VAR}
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "False"


def test_env_var_adds_the_callback_to_an_unchanged_script(tmp_path: Path) -> None:
    """A plain training script, no import of this package: the entry point adds the callback."""
    script = tmp_path / "train.py"
    script.write_text(
        "import sys\n"
        f"sys.path.insert(0, {str(EXAMPLES)!r})\n"
        "import lightning.pytorch as pl\n"
        "from scenarios import scenario\n"
        "model, train, _ = scenario('input')\n"
        "trainer = pl.Trainer(accelerator='cpu', max_steps=8, logger=False, enable_progress_bar=False,\n"
        f"                     enable_checkpointing=False, default_root_dir={str(tmp_path)!r})\n"
        "trainer.fit(model, train)\n"
    )
    env = {**__import__("os").environ, ENV_VAR: "wait=1,warmup=1,active=3"}
    out = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "lightning-bottleneck: input-bound" in out.stdout + out.stderr
    assert json.loads((tmp_path / "bottleneck_report.json").read_text())["primary"] == "input"
