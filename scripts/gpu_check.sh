#!/usr/bin/env bash
# One call on a lent GPU machine (see DEVELOPERS.md): the GPU tests, the GPU sync example, and a small real
# GPU trace per scenario for the test suite. Writes everything under ${OUT:-/tmp/gpu_out}.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu_out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-deps -e . 2>&1 | tail -1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$OUT/gpu.txt"
python3 -m pytest -q -m gpu tests 2>&1 | tee "$OUT/gpu_tests.log"
# trial path on CUDA: autocast bf16/fp16, TF32 (float32_matmul_precision=high), compile within its budget
python3 benchmarks/trial_levers.py --device cuda --budget 10 --compile-budget 120 2>&1 | tee "$OUT/trial_levers.log"
python3 examples/gpu_sync_item.py 2>&1 | tee "$OUT/gpu_sync_item.log"
python3 examples/gpu_sync_item.py --no-item 2>&1 | tee "$OUT/gpu_sync_no_item.log"
for s in input overhead compute; do
  python3 examples/scenarios.py "$s" --root "$OUT/runs" --accelerator gpu 2>&1 | tail -15 | tee "$OUT/scenario_$s.log"
done
find "$OUT/runs" -name '*.pt.trace.json.gz' -size -4M -exec cp {} "$OUT/" \; 2>/dev/null
ls -la "$OUT"
