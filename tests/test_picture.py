"""The picture of the window: per-step phases, the HTML report, the PNG, and the Text tab's markdown."""

from __future__ import annotations

import io
import re
import shutil
import subprocess
import tempfile
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from lightning_bottleneck import Category
from lightning_bottleneck.analysis.step_phases import (
    Phase,
    StepPhases,
    analysed_step_windows,
    step_phases,
    step_phases_from_file,
)
from lightning_bottleneck.analysis.trace_file import summarize_file
from lightning_bottleneck.categories import Severity
from lightning_bottleneck.output.html import render_html
from lightning_bottleneck.output.picture import HTML_FILENAME, IMAGE_TAG, write_picture
from lightning_bottleneck.output.text import render_markdown
from lightning_bottleneck.report import Finding, Recommendation, Report, StepTime
from lightning_bottleneck.trace.reader import load_trace

from _trace_builders import gpu_training_events, write_trace
from conftest import fit_scenario

SNIPPET_WITH_COMMENT = (
    'self.log("loss", value, prog_bar=False)\n'
    "# or keep it in the progress bar but only per epoch:\n"
    'self.log("loss", value, prog_bar=True, on_step=False, on_epoch=True)'
)


@pytest.fixture(scope="module")
def input_fit(tmp_path_factory: pytest.TempPathFactory) -> tuple[Report, StepPhases]:
    """A real tiny CPU fit whose DataLoader sleeps 2 ms per sample (16-sample batches: ~32 ms per batch)."""
    root = tmp_path_factory.mktemp("input_fit")
    _, cb = fit_scenario("input", root)
    assert cb.report is not None and cb.report.trace_files
    return cb.report, step_phases_from_file(cb.report.trace_files[-1])


def _sample_report() -> Report:
    """A report with what broke the old markdown: a snippet with a comment line, pipes, a location."""
    return Report(
        primary=Category.SYNC,
        confidence=0.8,
        steps_observed=40,
        steps_profiled=5,
        step_time_ms=StepTime(12.5, 14.0),
        breakdown={"sync": 0.55, "compute": 0.3, "overhead": 0.1, "data_wait": 0.05, "other": 0.0},
        findings=[
            Finding(
                "sync", Severity.HIGH, "55% of step time blocks on the device | .item()", {}, "train.py:42"
            ),
            Finding("epoch_start_stall", Severity.MEDIUM, "the first batch of each epoch takes 2.1 s"),
        ],
        recommendations=[
            Recommendation(
                "sync",
                "Stop Lightning reading 'loss' back to the host every step",
                "train.py:42: `self.log('loss', ...)` makes Lightning call Tensor.item after the batch.",
                {"prog_bar": False},
                SNIPPET_WITH_COMMENT,
            ),
            Recommendation("input", "Load batches in 2 background worker(s)", "num_workers=0 today.", {}, ""),
        ],
        notes=["# not a heading either"],
    )


# ---- per-step phases -----------------------------------------------------------------------------------


def test_step_phases_of_input_bound_fit_add_up_and_data_wait_dominates(
    input_fit: tuple[Report, StepPhases],
) -> None:
    report, phases = input_fit
    summary = summarize_file(report.trace_files[-1])
    assert phases.labelled and phases.phases == tuple(p.value for p in Phase)
    assert len(phases.steps) == summary.num_steps >= 3
    for step, expected_ms in zip(phases.steps, summary.step_times_ms):
        assert step.duration_ms == pytest.approx(expected_ms, rel=1e-3, abs=1e-3)  # the summary's steps
        assert sum(step.ms.values()) == pytest.approx(step.duration_ms, rel=1e-6, abs=1e-6)
        assert all(v >= 0 for v in step.ms.values())
        # 16 samples x 2 ms of sleep per batch: every step waits >= ~30 ms for data, the biggest phase
        assert step.ms["data_wait"] > 25.0
        assert max(step.ms, key=lambda p: step.ms[p]) == "data_wait"
        assert step.ms["forward"] > 0 and step.ms["backward"] > 0 and step.ms["optimizer"] > 0
    mean = phases.mean_ms()
    total = sum(s.duration_ms for s in phases.steps) / len(phases.steps)
    assert mean["data_wait"] > 0.5 * total
    # the share agrees with the report's own data_wait share (same steps, same spans)
    assert mean["data_wait"] / total == pytest.approx(report.breakdown["data_wait"], abs=0.1)
    numbers = [s.step for s in phases.steps]
    assert numbers == sorted(numbers) and len(set(numbers)) == len(numbers)  # ProfilerStep#N numbers
    assert StepPhases.from_dict(phases.to_dict()).to_dict() == phases.to_dict()


def test_step_phases_of_compute_bound_fit_are_mostly_forward_and_backward(tmp_path: Path) -> None:
    _, cb = fit_scenario("compute", tmp_path)
    assert cb.report is not None
    phases = step_phases_from_file(cb.report.trace_files[-1])

    # each step's shares, their median across the window's steps: the split of a step, not the machine's stalls (in
    # one CI run a stall landed in one of the four steps' data fetch: mean data_wait 78 ms of 240, where each step
    # waits ~2 ms of ~165 alone)
    def share(*names: str) -> float:
        return float(np.median([sum(s.ms[n] for n in names) / s.duration_ms for s in phases.steps]))

    assert len(phases.steps) >= 3
    assert share("data_wait") < 0.1
    assert share("forward", "backward", "optimizer") > 0.6


def _x(name: str, ts: float, dur: float, cat: str = "user_annotation", tid: int = 1) -> dict[str, Any]:
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur, "args": {}}


def test_nested_spans_go_to_the_most_specific_phase(tmp_path: Path) -> None:
    """One 1000 µs step: a sync inside training_step, Optimizer.step# wrapping Lightning's closure, a
    gloo all-reduce inside backward; the rest is other. Values in ms."""
    t = 1000.0
    events = [
        _x("ProfilerStep#7", t, 1000),
        _x("bottleneck/data_wait", t + 10, 100),
        _x("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", t + 20, 80, "cpu_op"),
        _x("Optimizer.step#SGD.step", t + 120, 700),
        _x("bottleneck/training_step", t + 130, 200),
        _x("cudaStreamSynchronize", t + 200, 50, "cuda_runtime"),
        _x("Optimizer.zero_grad#SGD.zero_grad", t + 340, 10),
        _x("bottleneck/backward", t + 360, 300),
        _x("gloo:all_reduce", t + 500, 40, "cpu_op"),
        _x("bottleneck/optimizer_step", t + 700, 100),
        _x("aten::add", t + 900, 20, "cpu_op", tid=2),  # another thread: not the loop's time
    ]
    trace = load_trace(write_trace(tmp_path / "t.json", events))
    phases = step_phases(trace, [(t, t + 1000)])
    (step,) = phases.steps
    assert step.step == 7
    expected = {
        "data_wait": 0.100,
        "forward": 0.150,  # 200 - the 50 µs sync
        "sync": 0.050,
        "backward": 0.260,  # 300 - the 40 µs all-reduce
        "communication": 0.040,
        "optimizer": 0.200,  # 10 zero_grad + the rest of Optimizer.step# (330-340, 350-360, 660-820)
        "other": 0.200,
    }
    assert step.ms == pytest.approx(expected, abs=1e-6)
    found = analysed_step_windows(trace)
    assert found is not None and list(found[0]) == [t] and list(found[1]) == [t + 1000]


def test_gpu_steps_are_read_on_the_device_timeline(tmp_path: Path) -> None:
    """_trace_builders' two 1000 µs GPU steps: a 300 µs GEMM and a 5 µs kernel launched from the main
    thread (forward: no labels), an NCCL kernel overlapping the GEMM by 50 µs (50 µs exposed), a 99 µs
    DataLoader fetch and a 50 µs cudaStreamSynchronize while the device idles. Values in ms."""
    trace = load_trace(write_trace(tmp_path / "gpu.json", gpu_training_events()))
    found = analysed_step_windows(trace)
    assert found is not None
    starts, ends, main = found
    assert list(ends - starts) == [1000.0, 1000.0]
    phases = step_phases(trace, (starts, ends), main_thread=main)
    expected = {
        "data_wait": 0.099,
        "forward": 0.305,
        "backward": 0.0,
        "optimizer": 0.0,
        "sync": 0.050,
        "communication": 0.050,
        "other": 0.496,  # device idle while the host runs Python / launches
    }
    for step in phases.steps:
        assert step.ms == pytest.approx(expected, abs=1e-6)
    assert not phases.labelled and any("device" in n for n in phases.notes)


def test_gpu_sync_during_device_work_is_charged_like_the_breakdown(tmp_path: Path) -> None:
    """The same steps with the cudaStreamSynchronize moved onto busy device time (t0+400..450): no idle
    time falls inside it, yet the device idles afterwards until the host launches again. As in the
    breakdown, that host-caused idle counts as sync, up to the 50 µs the host was blocked."""
    from lightning_bottleneck.analysis.breakdown import breakdown_from_summary
    from lightning_bottleneck.analysis.trace_metrics import summarize_trace

    events = gpu_training_events()
    for ev in events:
        if ev["name"] == "cudaStreamSynchronize":
            ev["ts"] = ev["ts"] - 500
    trace = load_trace(write_trace(tmp_path / "gpu.json", events))
    found = analysed_step_windows(trace)
    assert found is not None
    phases = step_phases(trace, found[:2], main_thread=found[2])
    for step in phases.steps:
        assert step.ms["sync"] == pytest.approx(0.050, abs=1e-6)
        assert step.ms["other"] == pytest.approx(0.496, abs=1e-6)
        assert sum(step.ms.values()) == pytest.approx(step.duration_ms, abs=1e-9)
    shares = breakdown_from_summary(summarize_trace(trace))
    total = sum(s.duration_ms for s in phases.steps)
    for phase in ("sync", "data_wait", "communication"):
        assert sum(s.ms[phase] for s in phases.steps) / total == pytest.approx(shares[phase], abs=0.01)


def test_no_windows_gives_no_steps_and_a_note(tmp_path: Path) -> None:
    trace = load_trace(write_trace(tmp_path / "t.json", [_x("ProfilerStep#1", 0, 10)]))
    phases = step_phases(trace, [])
    assert phases.steps == [] and phases.notes
    assert "no per-step" in render_html(_sample_report(), phases)


# ---- the Text tab's markdown, as TensorBoard renders it ----------------------------------------------


def test_markdown_renders_in_tensorboard_without_headings_from_snippets() -> None:
    from tensorboard.plugin_util import markdown_to_safe_html  # what the Text plugin calls

    html = markdown_to_safe_html(render_markdown(_sample_report()))
    headings = re.findall(r"<h(\d)>(.*?)</h\1>", html, flags=re.S)
    assert [re.sub(r"<[^>]+>", "", text) for _, text in headings] == [
        "Verdict: sync",
        "Advice",
        "Evidence",
        "Share of step time",
    ]
    blocks = re.findall(r"<pre><code[^>]*>(.*?)</code></pre>", html, flags=re.S)
    assert len(blocks) == 1 and "# or keep it in the progress bar" in blocks[0]
    assert "prog_bar=True, on_step=False" in blocks[0]
    # evidence: two columns (severity, finding), the pipe in a summary escaped, the location kept
    evidence = html.split("<h3>Evidence</h3>", 1)[1].split("</table>", 1)[0]
    assert len(re.findall(r"<th[ >]", evidence)) == 2
    assert "blocks on the device | .item()" in evidence and "<code>train.py:42</code>" in evidence
    assert "# not a heading either" in html


# ---- the HTML report ---------------------------------------------------------------------------------


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, list[tuple[str, str | None]]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, attrs))


def _assert_self_contained(html: str) -> None:
    """Nothing the browser would fetch: no external src/href, no scripts, stylesheets, frames or url()."""
    parser = _Tags()
    parser.feed(html)
    tags = {tag for tag, _ in parser.tags}
    assert "style" in tags
    assert not tags & {"script", "link", "iframe", "object", "embed", "img"}
    for tag, attrs in parser.tags:
        for name, value in attrs:
            if name in ("src", "href", "action", "data", "xlink:href"):
                assert not re.match(r"\s*(https?:)?//", value or "", flags=re.I), (tag, name, value)
    style = html.split("<style>", 1)[1].split("</style>", 1)[0]
    assert "@import" not in style and "url(" not in style


def test_html_report_is_self_contained_with_verdict_chart_and_advice(
    input_fit: tuple[Report, StepPhases], tmp_path: Path
) -> None:
    report, phases = input_fit
    out = write_picture(report, phases, tmp_path)
    assert out.html == tmp_path / HTML_FILENAME
    html = out.html.read_text(encoding="utf-8")
    _assert_self_contained(html)
    assert ">input</span>" in html and "input-bound: the device waits for the DataLoader" in html
    assert f"confidence <b>{report.confidence:.0%}</b>" in html
    rec = report.recommendations[0]
    assert rec.title in html and "num_workers" in html
    assert rec.snippet.replace("'", "&#x27;").replace('"', "&quot;") in html
    # one stacked rect per non-zero phase of every step, plus a tooltip naming the step
    drawn = sum(1 for s in phases.steps for v in s.ms.values() if v > 0)
    assert html.count("<svg ") == 1 and html.count("<rect ") == drawn
    assert f"step {phases.steps[0].step}: data wait" in html


def test_html_escapes_user_text() -> None:
    report = _sample_report()
    report.findings[0].summary = "<img src=http://example.com/x.png> & more"
    html = render_html(report, None)
    _assert_self_contained(html)
    assert "&lt;img src=http://example.com/x.png&gt; &amp; more" in html


# ---- the PNG -----------------------------------------------------------------------------------------


def test_png_decodes_with_the_right_size(input_fit: tuple[Report, StepPhases]) -> None:
    pytest.importorskip("matplotlib")
    from matplotlib.image import imread

    from lightning_bottleneck.output.image import IMAGE_SIZE, render_png, render_rgb

    report, phases = input_fit
    png = render_png(report, phases)
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    pixels = imread(io.BytesIO(png), format="png")
    assert pixels.shape[:2] == (IMAGE_SIZE[1], IMAGE_SIZE[0])
    rgb = render_rgb(report, phases)
    assert rgb.shape == (IMAGE_SIZE[1], IMAGE_SIZE[0], 3) and rgb.dtype == np.uint8
    data_wait_red = np.array([0xE1, 0x57, 0x59])
    assert (np.abs(rgb.astype(int) - data_wait_red).sum(axis=2) < 8).mean() > 0.02  # the bars are drawn
    assert render_png(report, None)[:8] == b"\x89PNG\r\n\x1a\n"  # no per-step data: still a picture
    # a palette PNG (IHDR colour type 3), well under the RGB one: TensorBoard's writer checksums it in pure
    # Python holding the GIL on a thread of the training process (issue 18)
    pytest.importorskip("PIL")
    assert png[25] == 3, png[25]
    from PIL import Image

    rgb_png = io.BytesIO()
    Image.fromarray(rgb).save(rgb_png, format="PNG")
    assert len(png) < 0.5 * rgb_png.tell(), (len(png), rgb_png.tell())


def test_image_goes_to_tensorboard_images_tab(input_fit: tuple[Report, StepPhases], tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from torch.utils.tensorboard import SummaryWriter

    from lightning_bottleneck.output.image import IMAGE_SIZE

    report, phases = input_fit
    writer = SummaryWriter(log_dir=str(tmp_path))
    out = write_picture(report, phases, tmp_path, writer=writer, global_step=25)
    writer.close()
    assert out.image_logged and not out.notes
    acc = EventAccumulator(str(tmp_path), size_guidance={"images": 0})
    acc.Reload()
    assert IMAGE_TAG in acc.Tags()["images"]
    (image,) = acc.Images(IMAGE_TAG)
    assert (image.width, image.height, image.step) == (*IMAGE_SIZE, 25)
    assert image.encoded_image_string[:8] == b"\x89PNG\r\n\x1a\n"


def test_without_matplotlib_the_image_is_skipped_with_a_note(
    input_fit: tuple[Report, StepPhases], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import lightning_bottleneck.output.picture as picture

    class Writer:
        def add_image(self, *args: Any, **kwargs: Any) -> None:
            raise AssertionError("no image without matplotlib")

    monkeypatch.setattr(picture, "image_available", lambda: False)
    out = write_picture(*input_fit, tmp_path, writer=Writer())
    assert not out.image_logged and out.notes and "matplotlib" in out.notes[0]
    assert out.html is not None and out.html.is_file()  # the HTML needs no plotting library


# ---- a real browser ----------------------------------------------------------------------------------

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


@pytest.mark.skipif(CHROMIUM is None, reason="needs a chromium binary (Debian: apt-get install chromium)")
def test_html_renders_in_headless_chromium(input_fit: tuple[Report, StepPhases], tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from matplotlib.image import imread

    report, phases = input_fit
    out = write_picture(report, phases, tmp_path)
    shot = tmp_path / "shot.png"
    with tempfile.TemporaryDirectory() as profile:
        subprocess.run(
            [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
             "--disable-component-update", "--disable-sync", "--no-first-run", f"--user-data-dir={profile}",
             f"--screenshot={shot}", "--window-size=1280,900", out.html.as_uri()],  # type: ignore[union-attr]
            check=True, capture_output=True, timeout=120,
        )  # fmt: skip
    pixels = (imread(str(shot))[..., :3] * 255).round().astype(int)
    assert pixels.shape[:2] == (900, 1280)
    assert len(np.unique(pixels.reshape(-1, 3), axis=0)) > 50  # text, bars, tables: not a blank page
    data_wait_red = np.array([0xE1, 0x57, 0x59])
    assert (np.abs(pixels - data_wait_red).sum(axis=2) < 12).sum() > 2000  # the stacked bars are painted
