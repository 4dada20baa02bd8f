"""Every name the package recognises in a trace or a live run, in one place.

Step, label and phase names (written by the callback, read by the analysis), the runtime APIs that
block the host, collective patterns, kernel signatures, and the names the sync hooks give the APIs
they time (read by rules and advice). The callback, the analysis and the advice all read them from here,
so a name added for one is known to all.
"""

from __future__ import annotations

import re

# ---- steps, labels, phases --------------------------------------------------------------------------

#: torch.profiler's span around each ``prof.step()`` interval.
PROFILER_STEP_PREFIX = "ProfilerStep#"
#: torch's span around ``Optimizer.step`` (wraps the closure, i.e. forward and backward, in Lightning's
#: automatic optimization).
OPTIMIZER_STEP_PREFIX = "Optimizer.step#"
#: The environment variable that turns the callback on with no code change (``live/autoload.py``).
ENV_VAR = "LIGHTNING_BOTTLENECK"
#: The package's namespace: the callback's record_function labels, its scalars and its TensorBoard text.
NAMESPACE = "bottleneck/"
#: Phases the callback labels (``bottleneck/<phase>``); the report's ``metrics.trace.phases`` keys.
PHASE_TRAINING_STEP = "training_step"
PHASE_BACKWARD = "backward"
PHASE_OPTIMIZER_STEP = "optimizer_step"
PHASE_DATA_WAIT = "data_wait"
PHASE_VALIDATION = "validation"


def label(phase: str) -> str:
    """The record_function label of a phase, e.g. ``bottleneck/backward``."""
    return NAMESPACE + phase


VALIDATION_LABEL = label(PHASE_VALIDATION)
BACKWARD_LABEL = label(PHASE_BACKWARD)
#: The training thread's DataLoader fetch spans (``enumerate(DataLoader)#<IterClass>.__next__``).
DATALOADER_PREFIX = "enumerate(DataLoader)#"
DATAPIPE_PREFIX = "enumerate(DataPipe)#"
#: record_function labels, never the training thread's own "work" (old-schema traces record them as
#: Operator): torch's own step/loader/optimizer spans, ours, Lightning's profiler's, and the DDP/FSDP
#: wrappers' forward labels (they wrap the whole forward).
LABEL_PREFIXES = (
    PROFILER_STEP_PREFIX,
    "enumerate(DataLoader)",
    "enumerate(DataPipe)",
    OPTIMIZER_STEP_PREFIX,
    "Optimizer.zero_grad#",
    NAMESPACE,
    "[pl][profile]",
    "DistributedDataParallel.forward",
    "FullyShardedDataParallel.",
)

# ---- host-device synchronisation ----------------------------------------------------------------------

#: Runtime calls that block the host until the device (a stream, an event) is done.
SYNC_APIS = frozenset(
    {
        "cudaStreamSynchronize",
        "cudaDeviceSynchronize",
        "cudaEventSynchronize",
        "cuStreamSynchronize",
        "cuCtxSynchronize",
        "cuEventSynchronize",
        "hipStreamSynchronize",
        "hipDeviceSynchronize",
        "hipEventSynchronize",
    }
)
#: Runtime copy calls: they block the host when the copy goes device-to-host.
MEMCPY_APIS = re.compile(r"^(cuda|hip|cu)Memcpy", re.IGNORECASE)
#: Device copy names of device-to-host copies.
D2H = re.compile(r"DtoH|D2H|Device -> (Pageable|Pinned|Host)", re.IGNORECASE)
#: The op every ``.item()``-like read runs.
LOCAL_SCALAR_DENSE = "aten::_local_scalar_dense"

#: Tensor methods the sync hooks time; their "via" name is ``Tensor.<method>``.
TENSOR_READ_METHODS = ("item", "tolist", "__bool__", "__int__", "__float__")  # no arguments
TENSOR_COPY_METHODS = ("cpu", "numpy", "__format__", "__repr__")


def tensor_via(method: str) -> str:
    return f"Tensor.{method}"


#: The "via" names the sync hooks give each API, grouped by the rewrite that removes the sync.
VIA_READ = ("Tensor.item", "Tensor.tolist", "Tensor.numpy", "Tensor.__int__", "Tensor.__float__")
VIA_PRINT = ("Tensor.__format__", "Tensor.__repr__")
VIA_COPY = ("Tensor.cpu", "Tensor.to", "Tensor.copy_")
VIA_BOOL = ("Tensor.__bool__",)
VIA_CUDA_SYNCHRONIZE = "torch.cuda.synchronize"
VIA_ACCELERATOR_SYNCHRONIZE = "torch.accelerator.synchronize"
VIA_SYNC = (
    VIA_CUDA_SYNCHRONIZE,
    "torch.cuda.Stream.synchronize",
    "torch.cuda.Event.synchronize",
    VIA_ACCELERATOR_SYNCHRONIZE,
)
#: The vias that read a device scalar through ``aten::_local_scalar_dense`` (cross-checked with the trace).
VIA_SCALAR_READS = frozenset(
    {"Tensor.item", "Tensor.__format__", "Tensor.__bool__", "Tensor.__int__", "Tensor.__float__"}
)

# ---- communication ----------------------------------------------------------------------------------

#: Host-side collective spans: backend labels (gloo:/nccl:/...), c10d ops, param-comms records, barriers.
COLLECTIVE = re.compile(
    r"^(gloo:|nccl:|rccl:|mpi:|ucc:|c10d::|c10d:|record_param_comms)|barrier", re.IGNORECASE
)
#: The backend's own span of a collective (one per collective call, whatever the op's Python name).
BACKEND_SPAN = re.compile(r"^(gloo|nccl|rccl|mpi|ucc):", re.IGNORECASE)
#: Collectives whose host span only enqueues device work (not a host wait) on GPU traces.
DEVICE_COLLECTIVE_ENQUEUE = re.compile(r"^(nccl:|rccl:)", re.IGNORECASE)
#: DDP's reducer work on the training thread (bucket views, division by world size, copies back).
REDUCER = re.compile(r"reducer::", re.IGNORECASE)
#: Collective kinds, matched on the span/kernel name in this order.
COLLECTIVE_KINDS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("reduce_scatter", re.compile(r"reduce_?scatter|ReduceScatter", re.IGNORECASE)),
    ("all_gather", re.compile(r"all_?gather|AllGather", re.IGNORECASE)),
    ("all_reduce", re.compile(r"all_?reduce|AllReduce", re.IGNORECASE)),
    ("broadcast", re.compile(r"broadcast|Broadcast", re.IGNORECASE)),
    ("barrier", re.compile(r"barrier", re.IGNORECASE)),
    ("send_recv", re.compile(r"send|recv|SendRecv", re.IGNORECASE)),
)


def collective_kind(name: str) -> str:
    for kind, pattern in COLLECTIVE_KINDS:
        if pattern.search(name):
            return kind
    return "other"


# ---- kernel signatures ---------------------------------------------------------------------------------
# Kernel-name checks are substring tests on the lower-cased name (kernel names run to kilobytes of C++
# templates: alternation regexes are slow).

#: Communication kernels (NCCL on CUDA, RCCL on ROCm).
COMM_KERNEL_SIGNATURES = ("nccl", "rccl")

#: Tensor-core kernel signatures: torch-tb-profiler 0.4.3 ``TC_Allowlist`` (from NVIDIA PyProf), plus
#: the Ampere/Hopper/CUTLASS/flash-attention and ROCm MFMA names that list predates.
TENSOR_CORE_SIGNATURES = (
    # tb-profiler / PyProf
    "h884", "s884", "h1688", "s1688", "hmma", "i8816", "16816", "c1688", "dgrad_1x1_stride_2x2",
    "first_layer_wgrad_kernel", "conv1x1", "conv2d_c1_k1", "direct_group", "xmma",
    # Volta..Blackwell cuBLAS / CUTLASS names
    "wgmma", "gmma_", "tensorop", "_tc_", "tf32", "bf16gemm", "hgemm", "sm90_", "sm100_",
    # attention kernels (always tensor cores)
    "flash_fwd", "flash_bwd", "fmha",
    # ROCm matrix cores
    "mfma",
)  # fmt: skip
#: ROCm Tensile/hipBLASLt kernels name their matrix-core instruction ``_MI32x32x8`` etc.
ROCM_MATRIX_INSTRUCTION = re.compile(r"_mi\d+x\d+x\d+")
#: Ops whose kernels could run on tensor cores: torch-tb-profiler's ``TC_OP_Allowlist`` (the autocast
#: fp16 list) plus SDPA.
TENSOR_CORE_ELIGIBLE_OPS = frozenset(
    {
        "aten::_convolution", "aten::conv1d", "aten::conv2d", "aten::conv3d", "aten::conv_tbc",
        "aten::conv_transpose1d", "aten::conv_transpose2d", "aten::conv_transpose3d",
        "aten::convolution", "aten::cudnn_convolution", "aten::cudnn_convolution_transpose",
        "aten::prelu", "aten::addmm", "aten::addmv", "aten::addr", "aten::matmul", "aten::mm",
        "aten::mv", "aten::linear", "aten::addbmm", "aten::baddbmm", "aten::bmm",
        "aten::chain_matmul", "aten::linalg_multi_dot", "aten::_thnn_fused_lstm_cell",
        "aten::_thnn_fused_gru_cell", "aten::lstm_cell", "aten::gru_cell", "aten::rnn_tanh_cell",
        "aten::rnn_relu_cell", "aten::addmm_", "aten::cudnn_convolution_backward",
        "aten::cudnn_convolution_backward_input", "aten::cudnn_convolution_backward_weight",
        "aten::cudnn_convolution_transpose_backward", "aten::convolution_backward",
        "aten::_scaled_dot_product_attention", "aten::scaled_dot_product_attention",
        "aten::_scaled_dot_product_flash_attention", "aten::_scaled_dot_product_efficient_attention",
        "aten::_scaled_dot_product_cudnn_attention", "aten::_flash_attention_forward",
        "aten::_efficient_attention_forward", "aten::_scaled_mm",
    }
)  # fmt: skip
#: Kernel names of GEMM / convolution / attention work (eligible whatever op launched them).
GEMM_LIKE_SIGNATURES = ("gemm", "gemv", "conv", "cudnn", "cutlass", "attention", "fmha", "flash", "cijk_")
#: fp32 GEMMs that run on the CUDA cores (no tensor-core signature): cuBLAS ``sgemm`` family, CUTLASS
#: ``simt`` fp32 kernels, Tensile single-precision (``_SB_``), ``gemmSN``; plus gemm/gemv kernels
#: templated on ``float`` (checked by :data:`FP32_TEMPLATE`).
FP32_GEMM_SIGNATURES = ("sgemm", "simt_s", "_sb_", "gemmsn")
FP32_TEMPLATE = re.compile(r"gem[mv]\w*<[^>]*\bfloat\b")


def is_comm_kernel(name: str) -> bool:
    low = name.lower()
    return any(sig in low for sig in COMM_KERNEL_SIGNATURES)


def uses_tensor_cores(name: str) -> bool:
    low = name.lower()
    if any(sig in low for sig in TENSOR_CORE_SIGNATURES):
        return True
    return "_mi" in low and ROCM_MATRIX_INSTRUCTION.search(low) is not None


def is_gemm_like(name: str) -> bool:
    low = name.lower()
    return any(sig in low for sig in GEMM_LIKE_SIGNATURES)


def is_fp32_gemm(name: str) -> bool:
    low = name.lower()
    if any(sig in low for sig in FP32_GEMM_SIGNATURES):
        return True
    return "float" in low and FP32_TEMPLATE.search(low) is not None


#: CPU ops that do the math (matched on the op name): BLAS/oneDNN matmuls, convolutions, attention,
#: recurrent cells, and oneDNN/MKL-DNN ops whatever their name (``aten::mkldnn_*``, ``aten::_mkldnn_*``,
#: ``mkldnn::*``/``onednn::*`` records, ``_convolution`` and its backward), plus the CPU flash-attention
#: kernels. Composite ops (``aten::linear``, ``aten::matmul``) only dispatch to these, so their own
#: *self* time is dispatch and is judged as such.
MATH_OPS = re.compile(
    r"^(aten::(mm|addmm|_addmm_activation|bmm|baddbmm|addbmm|addmv|mv|dot|vdot|addr|ger|"
    r"_?convolution\w*|conv\w*|cudnn_convolution\w*|slow_conv\w*|thnn_conv\w*|_slow_conv\w*|"
    r"_?mkldnn\w*|mkldnn\w*|_scaled_dot_product\w*|_flash_attention\w*|_efficient_attention\w*|"
    r"_int_mm|_weight_int\w*|_fused_rms_norm\w*|native_layer_norm\w*|native_batch_norm\w*|"
    r"_batch_norm_impl_index\w*|lstm\w*|gru\w*|_thnn_fused\w*|_embedding_bag\w*)"
    r"|mkldnn::|onednn::|ideep::)"
)
#: Ops that never count as host compute whatever their duration: host-device syncs and scalar reads,
#: collectives (their time is communication), and the ops that only wait.
NOT_COMPUTE_OPS = re.compile(
    r"^(aten::(_local_scalar_dense|item|is_nonzero|_nested\w*|wait\w*|record_stream)|c10d|gloo|nccl|"
    r"record_param_comms)"
)


# ---- settings that are not DataLoader arguments ------------------------------------------------------------

#: A loader setting's companion in the training process: ``torch.set_num_threads(n)`` beside the workers, where the
#: step runs on the CPU (measure/host_threads.py). It travels in the same settings dict as the DataLoader arguments
#: it was timed with; :func:`loader_arguments` and :func:`code_line` keep it out of the ``DataLoader(...)`` call.
TORCH_THREADS = "torch_threads"


def loader_arguments(settings: dict[str, object]) -> dict[str, object]:
    """The DataLoader arguments of a loader setting (:data:`TORCH_THREADS` left out)."""
    return {k: v for k, v in settings.items() if k != TORCH_THREADS}


def code_line(settings: dict[str, object], head: list[str]) -> str:
    """The code that applies a loader setting: ``DataLoader(<head>, num_workers=4)``, followed by
    ``; torch.set_num_threads(1)`` where the setting holds :data:`TORCH_THREADS`."""
    args = head + [f"{k}={v!r}" for k, v in loader_arguments(settings).items()]
    line = f"DataLoader({', '.join(args)})"
    if TORCH_THREADS in settings:
        line += f"; torch.set_num_threads({settings[TORCH_THREADS]!r})"
    return line


def settings_words(settings: dict[str, object]) -> str:
    """A loader setting in words: ``num_workers=2, persistent_workers=True, torch.set_num_threads(1)``."""
    words = [f"{k}={v!r}" for k, v in loader_arguments(settings).items()]
    if TORCH_THREADS in settings:
        words.append(f"torch.set_num_threads({settings[TORCH_THREADS]!r})")
    return ", ".join(words)
