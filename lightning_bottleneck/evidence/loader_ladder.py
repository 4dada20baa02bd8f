"""What the loader probe measured: one :class:`Rung` per DataLoader setting tried. Pure data (no torch).

Kept apart from :mod:`lightning_bottleneck.measure.loader_probe` (which needs torch) so that the advice
(:mod:`lightning_bottleneck.advice.loader_plan`) and the offline CLI can read a ladder from a report
without importing torch. Like ``torch.utils.benchmark.Measurement``, ``str(ladder)`` prints a table.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# How the loading time is spent, told by CPU time against wall time of the fetch.
BOUND_CPU = "cpu"  # the fetch burns CPU: workers beyond the usable cores cannot help
BOUND_WAIT = "wait"  # the fetch mostly waits (disk, network, sleep): more workers than cores help
BOUND_UNKNOWN = "unknown"


@dataclass
class Rung:
    """One DataLoader setting, timed on a separate loader outside the training loop."""

    num_workers: int
    prefetch_factor: int | None  # None with num_workers=0 (torch's own convention)
    samples_per_s: float  # steady state, after the first round of batches
    startup_s: float  # iterator creation to first batch (worker start-up + first fetch)
    cpu_per_sample_s: float | None  # CPU seconds per sample spent by the loading process(es)
    cpu_share: float | None  # CPU time / (wall time x loading processes) during the steady state
    batches: int  # batches fetched in all, start-up included
    measured_s: float  # length of the steady-state window
    rough: bool = False  # the budget ran out before a full steady-state window
    shutdown_s: float = 0.0  # shutting the workers down after the timing (0 without workers, or not timed)
    spawn_s: float = 0.0  # iterator creation alone (the workers' start), part of startup_s; 0 when not timed
    # with the training step, an epoch's batches (the run's length) from the iterator being up (its workers
    # started) to the last one stepped: an epoch as the fit will run it, its prefetch queue filling from empty
    # (None: not timed, the epoch longer than the rung ran)
    epoch_s: float | None = None
    # with the training step on the CPU, the training process's intra-op threads while this count's workers loaded
    # (measure/host_threads.py: the cores they leave); None: the process's own count
    threads: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "num_workers": self.num_workers,
            "prefetch_factor": self.prefetch_factor,
            "samples_per_s": round(self.samples_per_s, 3),
            "startup_s": round(self.startup_s, 4),
            "cpu_per_sample_s": None if self.cpu_per_sample_s is None else round(self.cpu_per_sample_s, 6),
            "cpu_share": None if self.cpu_share is None else round(self.cpu_share, 3),
            "batches": self.batches,
            "measured_s": round(self.measured_s, 4),
            "rough": self.rough,
            "shutdown_s": round(self.shutdown_s, 4),
            "spawn_s": round(self.spawn_s, 4),
            "epoch_s": None if self.epoch_s is None else round(self.epoch_s, 4),
            "threads": self.threads,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Rung:
        return cls(
            num_workers=int(d["num_workers"]),
            prefetch_factor=d.get("prefetch_factor"),
            samples_per_s=float(d["samples_per_s"]),
            startup_s=float(d["startup_s"]),
            cpu_per_sample_s=d.get("cpu_per_sample_s"),
            cpu_share=d.get("cpu_share"),
            batches=int(d.get("batches", 0)),
            measured_s=float(d.get("measured_s", 0.0)),
            rough=bool(d.get("rough", False)),
            shutdown_s=float(d.get("shutdown_s", 0.0)),
            spawn_s=float(d.get("spawn_s", 0.0)),
            epoch_s=None if d.get("epoch_s") is None else float(d["epoch_s"]),
            threads=None if d.get("threads") is None else int(d["threads"]),
        )

    @property
    def label(self) -> str:
        if self.num_workers == 0:
            return "num_workers=0"
        return f"num_workers={self.num_workers}, prefetch_factor={self.prefetch_factor}"


@dataclass
class LoaderLadder:
    """The loader probe's result: rungs in the order they were measured, and how loading is bound."""

    rungs: list[Rung] = field(default_factory=list)
    bound: str = BOUND_UNKNOWN
    batch_size: int | None = None
    usable_cpus: int | None = None
    elapsed_s: float = 0.0
    budget_s: float = 0.0
    skipped: bool = False  # nothing was measured (IterableDataset, no len(), probe off, ...)
    notes: list[str] = field(default_factory=list)
    #: Worker counts timed *with the training step* (the model trains on the CPU and loading is CPU-bound, so
    #: workers and the step share the cores): ``samples_per_s`` is then the rate of loading and stepping
    #: together, what the run gets; empty when not measured. CPU fields are None (the step's CPU is in them).
    in_training: list[Rung] = field(default_factory=list)
    #: The model's training step timed back-to-back on one probe batch (median ms; no loading between the steps):
    #: how fast the step may run once loading leaves the training process (a thread pool that sleeps through
    #: in-process loading wakes slowly, issue 19's io_wait). None when not timed (no ``train_step`` given).
    step_ms: float | None = None
    #: Worker counts the probe left for the run to time (autotune: the run races them against the count it applies,
    #: one epoch each, on its own steps): where the run confirms the choice, CPU-bound loading times only the core
    #: count with the step (:func:`~lightning_bottleneck.measure.loader_with_step.time_in_training`).
    left_to_run: list[int] = field(default_factory=list)

    def in_training_rung(self, num_workers: int) -> Rung | None:
        """The in-training timing of this worker count (the mean rate when it was timed twice)."""
        found = [r for r in self.in_training if r.num_workers == num_workers]
        if not found:
            return None
        if len(found) == 1:
            return found[0]
        mean = sum(r.samples_per_s for r in found) / len(found)
        return Rung(
            num_workers=num_workers,
            prefetch_factor=found[0].prefetch_factor,
            samples_per_s=mean,
            startup_s=min(r.startup_s for r in found),
            cpu_per_sample_s=None,
            cpu_share=None,
            batches=sum(r.batches for r in found),
            measured_s=sum(r.measured_s for r in found),
            rough=any(r.rough for r in found),
            shutdown_s=min(r.shutdown_s for r in found),
            spawn_s=min(r.spawn_s for r in found),
            epoch_s=_mean([r.epoch_s for r in found if r.epoch_s is not None]),
            threads=found[0].threads,  # a count's timings all run at the threads its workers leave
        )

    def rung(self, num_workers: int, prefetch_factor: int | None = None) -> Rung | None:
        """The fastest rung with this worker count (and prefetch factor, when given)."""
        found = [
            r
            for r in self.rungs
            if r.num_workers == num_workers
            and (prefetch_factor is None or r.prefetch_factor == prefetch_factor)
        ]
        return max(found, key=lambda r: r.samples_per_s) if found else None

    @property
    def best(self) -> Rung | None:
        return max(self.rungs, key=lambda r: r.samples_per_s) if self.rungs else None

    @property
    def ceiling_samples_per_s(self) -> float:
        return self.best.samples_per_s if self.best else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "rungs": [r.to_dict() for r in self.rungs],
            "bound": self.bound,
            "batch_size": self.batch_size,
            "usable_cpus": self.usable_cpus,
            "elapsed_s": round(self.elapsed_s, 3),
            "budget_s": self.budget_s,
            "skipped": self.skipped,
            "notes": list(self.notes),
            "in_training": [r.to_dict() for r in self.in_training],
            "step_ms": None if self.step_ms is None else round(self.step_ms, 4),
            "left_to_run": list(self.left_to_run),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> LoaderLadder:
        return cls(
            rungs=[Rung.from_dict(r) for r in d.get("rungs", [])],
            bound=str(d.get("bound", BOUND_UNKNOWN)),
            batch_size=d.get("batch_size"),
            usable_cpus=d.get("usable_cpus"),
            elapsed_s=float(d.get("elapsed_s", 0.0)),
            budget_s=float(d.get("budget_s", 0.0)),
            skipped=bool(d.get("skipped", False)),
            notes=list(d.get("notes", [])),
            in_training=[Rung.from_dict(r) for r in d.get("in_training", [])],
            step_ms=None if d.get("step_ms") is None else float(d["step_ms"]),
            left_to_run=[int(w) for w in d.get("left_to_run", [])],
        )

    def __str__(self) -> str:
        head = (
            f"LoaderLadder(bound={self.bound}, usable_cpus={self.usable_cpus}, batch_size={self.batch_size})"
        )
        lines = [head]
        if self.skipped:
            lines.append("  not measured")
        else:
            lines.append("  workers  prefetch  samples/s  start-up  CPU/sample  CPU share")
            for r in self.rungs:
                cps = "-" if r.cpu_per_sample_s is None else f"{r.cpu_per_sample_s * 1e3:7.2f} ms"
                share = "-" if r.cpu_share is None else f"{r.cpu_share:6.0%}"
                pf = "-" if r.prefetch_factor is None else str(r.prefetch_factor)
                rough = "  (rough)" if r.rough else ""
                lines.append(
                    f"  {r.num_workers:7d}  {pf:>8}  {r.samples_per_s:9.1f}  {r.startup_s * 1e3:6.0f} ms"
                    f"  {cps:>10}  {share:>9}{rough}"
                )
            if self.in_training:
                lines.append("  with the training step (loading and stepping together):")
                for r in self.in_training:
                    rough = "  (rough)" if r.rough else ""
                    lines.append(
                        f"  {r.num_workers:7d}  {r.prefetch_factor or '-':>8}  {r.samples_per_s:9.1f}"
                        f"  {r.startup_s * 1e3:6.0f} ms{rough}"
                    )
            if self.left_to_run:
                counts = ", ".join(str(w) for w in self.left_to_run)
                lines.append(f"  left for the run to time (autotune): num_workers={counts}")
            if self.step_ms is not None:
                lines.append(f"  the training step back-to-back (no loading between): {self.step_ms:.2f} ms")
            lines.append(f"  measured in {self.elapsed_s:.2f} s of a {self.budget_s:.2f} s budget")
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None
