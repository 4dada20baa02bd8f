"""Named thresholds used by the rules. Every value says where it comes from.

Shares are fractions of step time unless stated otherwise.
"""

from __future__ import annotations

# --- input -----------------------------------------------------------------------------------------
# torch-tb-profiler's Overview recommends more DataLoader workers when DataLoader time exceeds 5% of
# the step (torch_tb_profiler/profiler/data.py: ``dataloader_ratio > 0.05``). TensorFlow's profiler
# calls a run "moderately input-bound" above 5% and "highly input-bound" above 20% of step time
# (tensorflow/core/profiler/convert/op_stats_to_input_pipeline_analysis.cc).
INPUT_SHARE_MEDIUM = 0.05
INPUT_SHARE_HIGH = 0.20
# The first fetch of an epoch (worker start-up) counts as a stall when it exceeds this many median
# steady-state data waits *and* this absolute floor; below the floor start-up is noise on any machine
# (a fork of a DataLoader worker costs a few ms on Linux).
EPOCH_STALL_RATIO = 5.0
EPOCH_STALL_MIN_MS = 50.0
# The model's consumption rate is read at this percentile of (step - data wait) over the timed steps, not
# the median: profiled steps and steps slowed by other processes on a shared machine make the busy time
# look longer than the model needs (issue 9 measured 26x slower window steps under contention), and
# under-estimating consumption under-provisions workers, which costs more than one idle worker does.
CONSUMPTION_QUANTILE = 25.0

# --- sync ------------------------------------------------------------------------------------------
# Host time blocked on the device is device time lost the same way DataLoader waits are, so the input
# thresholds above apply unchanged (same sources).
SYNC_SHARE_MEDIUM = 0.05
SYNC_SHARE_HIGH = 0.20

# --- communication ---------------------------------------------------------------------------------
# torch-tb-profiler recommends gradient compression / accumulation when communication exceeds 10% of
# step time (torch_tb_profiler/profiler/data.py: ``communication_ratio > 0.1``).
COMM_SHARE_MEDIUM = 0.10
COMM_SHARE_HIGH = 0.30  # 3x the tb-profiler trigger: the wait then rivals the work itself

# --- overhead --------------------------------------------------------------------------------------
# torch-tb-profiler flags GPU utilization below 50% ("GPU has low utilization ... increase batch size",
# profiler/data.py ``gpu_utilization < 0.5``). When the device is idle for reasons other than input,
# sync or communication, the host cannot feed it: launch/Python overhead. The same 50% / 30% split is
# used for the host-side (CPU-only) overhead share: dispatch-dominated short ops + Python gaps.
OVERHEAD_SHARE_MEDIUM = 0.30
OVERHEAD_SHARE_HIGH = 0.50
# The bigger-batch advice multiplies the batch by this: doubling halves the per-sample share of what a step pays
# once whatever its batch (Python, dispatch, launches, optimizer step over the parameters).
BATCH_GROWTH = 2

# Half of all kernel time in kernels shorter than the trace core's SHORT_KERNEL_US: a CUDA launch costs
# a few microseconds of host time (NVIDIA, "Getting Started with CUDA Graphs"), as much as such kernels
# run, so the GPU can only be kept busy if the host never falls behind: the launch-bound signature.
SHORT_KERNEL_SHARE_MEDIUM = 0.5

# --- compute ---------------------------------------------------------------------------------------
# A busy device is the healthy state; compute becomes the verdict when nothing else is worth fixing.
# torch-tb-profiler's AMP rule fires when tensor-core-eligible ops launch kernels but none run on
# tensor cores (profiler/data.py, compute capability >= 7.0).
COMPUTE_SHARE_MEDIUM = 0.50
COMPUTE_SHARE_HIGH = 0.80
TENSOR_CORE_ELIGIBLE_MIN = 0.10  # below this share of kernel time, AMP cannot pay off noticeably

# --- memory ----------------------------------------------------------------------------------------
# torch-tb-profiler warns when peak memory exceeds 90% of device capacity (profiler/data.py
# ``peak_mem > total_mem * 0.9``). Any cudaMalloc retry means the caching allocator had to free
# and retry (torch.cuda.memory_stats ``num_alloc_retries``), which the CUDA notes call a sign of
# memory pressure that costs synchronisations.
MEMORY_PEAK_SHARE_HIGH = 0.90
MEMORY_ALLOC_RETRIES_MEDIUM = 1

# --- verdict ---------------------------------------------------------------------------------------
# Fraction of a bucket's time its usual fix recovers; the primary verdict is the bucket whose fix saves
# the most step time (share x recoverable).
RECOVERABLE = {
    # Enough workers with prefetching hide loading entirely (PyTorch performance tuning guide,
    # "enable async data loading and augmentation").
    "input": 1.0,
    # Removing or deferring a sync removes the wait (the work itself still runs asynchronously).
    "sync": 1.0,
    # Overlap/bucketing/accumulation hide most of an exposed all-reduce, not all of it (DDP paper,
    # Li et al., VLDB 2020: overlap recovers the bulk of communication time).
    "communication": 0.7,
    # torch.compile / CUDA graphs remove most but not all launch and dispatch cost.
    "overhead": 0.7,
    # bf16/fp16 autocast roughly doubles matmul throughput on tensor cores (NVIDIA mixed-precision
    # training guide), i.e. recovers about half of compute time. Used only while that fix is open:
    # see COMPUTE_RECOVERABLE_NO_AMP below.
    "compute": 0.5,
}
# The high end of that estimate for torch.compile on per-op overhead (the low end is no gain: it is not measured):
# all of the per-op overhead, the most a graph of fused kernels can remove (the device's compute stays). A bound must
# hold, and the overhead share it multiplies comes from one profiled window: 0.85 (compile removed 74-81% of an
# overhead-bound step in `python benchmarks/prediction_bounds.py --compile`) was exceeded on the 2026-12-03
# scoreboard, tiny_ops up to 3.78x, applied 5.01x (the run before: up to 3.74x, applied 3.65x).
OVERHEAD_RECOVERABLE_MAX = 1.0
# When mixed precision is already on (or cannot help: a CPU without native bf16, or kernels already on
# tensor cores), what is left for compute is torch.compile's fusion: the PyTorch 2 paper (Ansel et al.,
# ASPLOS 2024) reports a geometric-mean training speed-up of about 1.3x on A100, i.e. ~25% less time.
COMPUTE_RECOVERABLE_NO_AMP = 0.25
# Fewer profiled steps than this (and fewer timed steps than TIMED_STEPS_MIN) make the verdict "unknown".
PROFILED_STEPS_MIN = 1
TIMED_STEPS_MIN = 3
# Confidence is scaled down when the window is shorter than this many steps (torch.profiler's own
# docs use schedule(wait=1, warmup=1, active=3) as the smallest useful window).
CONFIDENT_STEPS = 3
# An "unknown" verdict is never reported with more confidence than this: the same floor
# ``confidence_of`` gives a verdict with no bucket past its threshold.
UNKNOWN_CONFIDENCE_MAX = 0.2

# --- ranking by time saved (rules/ranking.py) --------------------------------------------------------
# Communication levers, as the fraction of the *exposed* collective time per step each one recovers.
# Gradient accumulation over k batches all-reduces once per k batches (Lightning runs DDP's no_sync on
# the other k-1), so it saves (k-1)/k of the exposed all-reduce: the factor is computed, not tabled.
# Larger DDP buckets and bucket views cut per-call latency and one gradient copy, not the bytes moved: the
# DDP paper (Li et al., VLDB 2020, bucket-size sweep) moves per-iteration time by tens of percent at
# most, so a fifth of the exposed time is the estimate.
COMM_BUCKETS_RECOVERABLE = 0.2
# A 16-bit compression hook halves the bytes each all-reduce moves (torch ddp_comm_hooks docs); a
# bandwidth-bound all-reduce then takes about half as long, a latency-bound one barely less, and the casts
# cost something: 0.3 sits between.
COMM_COMPRESS_RECOVERABLE = 0.3
# Confidence. Two fixes whose savings are within this ratio are a tie within the run-to-run spread of a
# shared machine (issue 9 measured the same lever at 2.36x and 0.90x, quiet vs busy): the verdict is
# then never reported above UNCERTAIN_CONFIDENCE_MAX; nor when the machine was contended, the window
# not representative of the run (analysis/representative.py), or the trace's timing had to be repaired.
TOP_TWO_RATIO_MIN = 1.3
UNCERTAIN_CONFIDENCE_MAX = 0.9
# The project's one "no change" band: a step-time change smaller than this fraction is not reported by
# `lightning-bottleneck compare` (profiled windows hold a handful of steps; their median moves by a few percent
# between identical runs on a quiet machine), a trial lever must measure above 1 + this to be advised
# (torch.utils.benchmark's ``Compare`` highlights differences from about that size too).
NO_CHANGE_BAND = 0.03
# A bucket whose best fix saves less than this share of the step cannot be told from no change, so it does not
# overrule where the time goes: the share-based verdict stands (issue 19: on a busy machine the loader probe saw
# no loader fix for a step 45% in data wait, and a logging fix saving 0.3% of the step made the verdict
# rest_of_fit).
VERDICT_SAVING_MIN = NO_CHANGE_BAND
# A verdict resting on estimates (the RECOVERABLE table) rather than a measured trial stays below this.
ESTIMATED_CONFIDENCE_MAX = 0.95
# Step-time spread (p90 / median) above this makes every share a blend of different steps: the confidence
# is scaled by SPREAD_RATIO_OK / spread (never below SPREAD_FACTOR_MIN). 1.5 is the OUTLIER-free spread of
# a steady loop on this project's shared 2-core machine with another process busy (tests/test_verdicts.py).
SPREAD_RATIO_OK = 1.5
SPREAD_FACTOR_MIN = 0.5

# --- what the printed figure is (advice/ranked.py, issue 28) -------------------------------------------------
# A measured range is printed as a prediction only when it is no wider than this (hi/lo): a point within 20% either
# way spans 1.2 x 1.2 = 1.44, the width the scoreboard (`benchmarks/advice_payoff.py`) accepts for a point. A wider
# range, or a figure not measured on this run, is printed as what it is: a ceiling, "up to X (not measured)".
MEASURED_RANGE_WIDTH_MAX = 1.44

# --- plausible timing (trace/time_unit.py) -------------------------------------------------------------
# Kineto writes microseconds. A trace whose clock is in another unit (milliseconds or nanoseconds written
# as if microseconds) is judged from its own cheapest ops: metadata ops (aten::view, aten::empty,
# aten::as_strided, aten::t, aten::detach, ...) only dispatch and record, so with the profiler on they
# take about a microsecond. Their median on the project's real traces (/work/shared/traces: A100, V100,
# MI250, CPU-only, ns-resolution; PyTorch 1.8 to 2.x) is 0.53-26 us, and over all aten ops 4.4-49 us.
# Read as milliseconds those medians become 0.0005-0.05 us, read as nanoseconds 530-49,000 us: a median
# below TIMING_OP_MEDIAN_MIN_US or above TIMING_OP_MEDIAN_MAX_US is not microseconds (each bound leaves a
# 2x-5x margin on both sides).
TIMING_OP_MEDIAN_MIN_US = 0.1
TIMING_OP_MEDIAN_MAX_US = 250.0
# The median is evidence only over this many ops (a trace with a handful of ops says nothing about its
# clock: cpu_only_rank34 has 4); metadata ops first, else every aten op.
TIMING_MIN_OPS = 20
# Without enough ops, a training step outside this range is implausible but its unit cannot be inferred:
# the smallest Lightning step with the profiler on (forward, backward, optimizer step of a one-layer model)
# takes well over 100 us, and no profiled window holds a step of more than an hour.
TIMING_STEP_MIN_US = 20.0
TIMING_STEP_MAX_US = 3.6e9
# --- the rest of the fit (rules/fit.py): shares of the whole fit's wall time, not of a step -----------
# A part of fit outside the training step (validation, checkpointing, logging, another callback, the sanity
# check) is material from 10% of the fit: the same 10% torch-tb-profiler uses for time the device spends
# not computing (profiler/data.py ``communication_ratio > 0.1``); a quarter of the fit (the run at least
# 1.33x slower than without it) is severity high.
FIT_PART_SHARE_MEDIUM = 0.10
FIT_PART_SHARE_HIGH = 0.25
# The interval advised for validation, checkpoints and logging is the smallest one that brings the part under
# this share of the fit: INPUT_SHARE_MEDIUM's 5%, the share below which the rules call a cost not worth fixing.
FIT_PART_TARGET_SHARE = 0.05
# ... but an interval is never stretched more than this factor in one piece of advice: an order of magnitude
# keeps the validation signal / checkpoint spacing the user chose recognisable (the measured example:
# a checkpoint every 5 steps -> every 50 made that run 5.5-5.9x faster; fewer is a decision for the user).
FIT_INTERVAL_GROWTH_MAX = 10
# Lightning's own default ``log_every_n_steps`` (Trainer docs): when logging is material, a run logging more often
# is advised this interval (or the target share's, whichever is larger), at most FIT_INTERVAL_GROWTH_MAX times
# its own interval.
LIGHTNING_LOG_EVERY_N_STEPS = 50
# AsyncCheckpointIO (lightning.pytorch.plugins.io) runs ``torch.save`` on a worker thread: the file write releases
# the GIL, the pickling of the state dict does not, so on a busy host about half of a save stays on the training
# thread (an estimate until measured: the scoreboard's checkpoint workloads sweep it).
ASYNC_CHECKPOINT_RECOVERABLE = 0.5
# Saves of the same checkpoint vary in wall time: checkpoint_heavy's 128 MB saves took 0.19-0.39 s within one bare
# fit (max/min 1.9-2.0 in every fit, with the callback too), not always the first one slowest, and the advised fit's
# single save 0.21 s in one run, 0.37-0.41 s in others (issue 19: `benchmarks/prediction_bounds.py --saves`). A
# fewer-saves lever keeps some saves, which may cost anything in that spread, so past this max/min ratio of single
# saves its saving is a range (the kept saves at the slowest to the fastest save seen) instead of a point at the
# mean: 1.2 is the scoreboard's 20%.
SAVE_SPREAD_RANGE_MIN = 1.2
# The val loader is probed (its num_workers measured) when its wait is at least this share of validation: the
# same 50% split as the loader probe's CPU_BOUND_SHARE (a fetch waiting more than half its time is wait-bound).
VAL_LOADER_WAIT_SHARE_MIN = 0.5
# Removing a callback's work outright is a code change; the advice's estimate is that a hook called less often
# (or made cheaper) gives back this fraction of its time: the same 0.9 as an interval stretched 10x
# (FIT_INTERVAL_GROWTH_MAX), the largest change the other fit advice makes in one step.
CALLBACK_RECOVERABLE = 0.9
# A heavy callback hook also slows the training step after it (its working set evicts the model's from the caches;
# freed pages fault back in), which no timing of the hook sees: calling it less often saves that too. The ledger
# cannot tell it apart, so a callback lever's saving is a range: from the hook's own time up to this multiple of
# it on top, and never more than the run's step took over the same step timed back-to-back (the trials'
# baseline). Measured (issue 19): heavy_callback's 2.85 ms hook, called every step, cost 4.5-5.4 ms a call in
# bare fits (0.6-0.9x its time on top); `python benchmarks/prediction_bounds.py` (its model and hook alone) gave
# +0.8-1.4 ms after a 2.0 ms hook in one run and +0.04-0.15 ms in two later ones the same day: the after-effect
# depends on the machine's state, so the bound is read from the run itself and only capped here.
HOOK_INDIRECT_MAX_SHARE = 1.0
# Validation runs between training steps slow the steps and Lightning's loop around them the same way (self.log
# took 0.9 ms a call with validation every 10 batches, 0.5-0.6 ms with it every 100): a fewer-validations lever's
# saving is a range up to the avoided runs' share of the step's excess over back-to-back, at most this share of
# the validation time it saves. Measured (issue 19, `python benchmarks/prediction_bounds.py --validation`):
# val_slow_loader's fit without 9 of 10 validations ran the rest of its fit 0.08x, 0.11x and -0.01x of the
# avoided validation time faster; about twice the largest seen.
VALIDATION_INDIRECT_MAX_SHARE = 0.25
# A loader change's high end also has the training steps' slow tail (the ledger's mean step over the timer's median)
# speed up, when that tail is at least this share of the median: the 10% run-to-run spread of a step timing on a
# shared machine (LADDER_GAIN_MIN's). worker_restart (issue 19): 7.9 ms mean, 6.1 ms median with 2 workers.
SLOW_TAIL_MIN = 0.1
# self.log(..., sync_dist=True) all-reduces each value at every call (Lightning #17988: seconds per call); without
# it a call only stores the value: the all-reduce is most of the call's time (0.9: the same share as a callback
# called 10x less often, CALLBACK_RECOVERABLE).
SELF_LOG_SYNC_RECOVERABLE = 0.9
