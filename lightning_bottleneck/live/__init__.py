"""The live side: everything that runs inside a Lightning ``Trainer`` and may import torch and Lightning.

The callback's parts (options, the profiler window, always-on step timing, sync hooks, the verdict cycle,
the rank gather, publishing) live here; they hand evidence to the torch-free core (``analysis``, ``rules``,
``advice``) and show what it returns through ``output``.
"""
