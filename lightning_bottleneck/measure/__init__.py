"""The measurement stage: what the callback times on the user's own run after the profiling window.

The loader probe, the trials of compute levers, the busy-machine check and memory sampling, with their typed,
printable results (``loader_ladder``, ``trial_results``, ``contention``, ``memory_trend``). The result types are
torch-free, so the offline side can read them; the probes themselves import torch.
"""
