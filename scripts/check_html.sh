#!/usr/bin/env bash
# Render bottleneck_report.html in headless Chromium (no network) and check the screenshot is not blank.
#
#   scripts/check_html.sh                          # trains the input-bound demo, writes its HTML, checks it
#   scripts/check_html.sh RUN_DIR_OR_HTML [SHOT]   # a run folder (bottleneck_report.json + traces) or a page
#
# Needs chromium (Debian: apt-get install chromium) and matplotlib (to read the PNG back). Exit 0: rendered.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python}
CHROME=$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)
[ -n "$CHROME" ] || { echo "check_html: no chromium on PATH (apt-get install chromium)" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
target=${1:-}
shot=${2:-$work/bottleneck_report.png}
if [ -z "$target" ]; then
    "$PY" examples/input_bound.py --root "$work/runs" >"$work/train.log" 2>&1 \
        || { cat "$work/train.log" >&2; exit 1; }
    target=$(dirname "$(find "$work/runs" -name bottleneck_report.json | head -n1)")
fi
if [ -d "$target" ]; then
    # The offline path: report + the last trace of the run -> the page, as write_picture does it.
    "$PY" - "$target" <<'PY'
import sys
from pathlib import Path
from lightning_bottleneck.analysis.step_phases import step_phases_from_file
from lightning_bottleneck.output.picture import write_picture
from lightning_bottleneck.report import Report

run = Path(sys.argv[1])
report = Report.read(run / "bottleneck_report.json")
phases = step_phases_from_file(report.trace_files[-1]) if report.trace_files else None
print("wrote", write_picture(report, phases, run).html)
PY
    html="$target/bottleneck_report.html"
else
    html=$target
fi
# --proxy-server to a closed port: any request off this machine fails, as it would offline.
"$CHROME" --headless --no-sandbox --disable-gpu --disable-background-networking --disable-component-update \
    --disable-sync --no-first-run --proxy-server=127.0.0.1:9 --user-data-dir="$work/profile" \
    --screenshot="$shot" --window-size=1280,1000 "file://$(realpath "$html")" >"$work/chrome.log" 2>&1 \
    || { cat "$work/chrome.log" >&2; exit 1; }
"$PY" - "$shot" <<'PY'
import sys
import numpy as np
from matplotlib.image import imread

pixels = (imread(sys.argv[1])[..., :3] * 255).round().astype(int)
colours = len(np.unique(pixels.reshape(-1, 3), axis=0))
bars = int((np.abs(pixels - np.array([0xE1, 0x57, 0x59])).sum(axis=2) < 12).sum())  # data-wait red
print(f"screenshot {sys.argv[1]}: {pixels.shape[1]}x{pixels.shape[0]}, {colours} colours, {bars} data-wait pixels")
sys.exit(0 if colours > 50 else 1)
PY
