"""Closed vocabularies shared by analysis, rules, advice and rendering."""

from __future__ import annotations

from enum import Enum


class Category(str, Enum):
    """The bottleneck buckets. ``value`` is what the JSON report carries."""

    INPUT = "input"
    SYNC = "sync"
    OVERHEAD = "overhead"
    COMPUTE = "compute"
    MEMORY = "memory"
    COMMUNICATION = "communication"
    REST_OF_FIT = "rest_of_fit"  # the time goes outside the training step; the cause is a FitPart
    UNKNOWN = "unknown"

    def __str__(self) -> str:
        return self.value


class Provenance(str, Enum):
    """How a figure (a saving, a predicted speed-up) was obtained: carried by every candidate fix and every
    ranked recommendation (its ``method``; ``value`` is what the JSON report carries). Whether the printed figure is
    a prediction or a bound follows from it: :class:`PredictionKind`."""

    MEASURED = "measured"  # timed on this run: the loader probe, trial steps, the ledger's own timings
    COMPUTED = "computed"  # arithmetic on measured seconds (the ledger's parts, the trace's phases)
    ESTIMATED = "estimated"  # a share of the step times a named fraction (thresholds.py), not measured here

    def __str__(self) -> str:
        return self.value


class PredictionKind(str, Enum):
    """What the figure printed next to an advice is (issue 28): every ranked recommendation with a figure has one.

    ``MEASURED`` and ``MEASURED_RANGE`` are predictions, judged against the applied speed-up (a point within
    20%, a range from end to end); a ``BOUND`` is a ceiling only ("up to X (not measured)"), never called a
    prediction."""

    MEASURED = "measured"  # a point from timings on this run (or arithmetic on them)
    MEASURED_RANGE = "measured_range"  # both ends from timings on this run, hi/lo <= MEASURED_RANGE_WIDTH_MAX
    BOUND = "bound"  # the saving could not be measured (or only too loosely): "up to X"

    def __str__(self) -> str:
        return self.value


class FindingKind(str, Enum):
    """What a finding is about: a bucket (a :class:`Category` value) or a narrower pattern."""

    INPUT = "input"
    SYNC = "sync"
    OVERHEAD = "overhead"
    COMPUTE = "compute"
    MEMORY = "memory"
    COMMUNICATION = "communication"
    REST_OF_FIT = "rest_of_fit"  # a part of fit outside the training step (the FitPart is in the data)
    STRAGGLER = "straggler"  # one rank holds the others back
    EPOCH_START_STALL = "epoch_start_stall"  # DataLoader worker start-up at each epoch

    def __str__(self) -> str:
        return self.value

    @classmethod
    def of(cls, category: Category) -> FindingKind:
        return cls(category.value)


class Severity(str, Enum):
    HIGH = "high"
    MEDIUM = "medium"
    LOW = "low"

    def __str__(self) -> str:
        return self.value

    @property
    def rank(self) -> int:
        return {"high": 0, "medium": 1, "low": 2}[self.value]


class Share(str, Enum):
    """Keys of the report's ``breakdown``: shares of step time. They sum to 1 (``other`` takes the rest)."""

    DATA_WAIT = "data_wait"
    SYNC = "sync"
    COMMUNICATION = "communication"
    COMPUTE = "compute"
    OVERHEAD = "overhead"
    OTHER = "other"

    def __str__(self) -> str:
        return self.value


#: The categories that are a share of step time, and their breakdown key. ``memory`` is not one (it is
#: judged on the allocator's figures and out-of-memory errors), nor is ``unknown``.
BUCKET_SHARES: dict[Category, Share] = {
    Category.INPUT: Share.DATA_WAIT,
    Category.SYNC: Share.SYNC,
    Category.COMMUNICATION: Share.COMMUNICATION,
    Category.COMPUTE: Share.COMPUTE,
    Category.OVERHEAD: Share.OVERHEAD,
}


class Phase(str, Enum):
    """The stacked segments of one step, in drawing order (bottom to top)."""

    DATA_WAIT = "data_wait"
    FORWARD = "forward"
    BACKWARD = "backward"
    OPTIMIZER = "optimizer"
    SYNC = "sync"
    COMMUNICATION = "communication"
    OTHER = "other"

    def __str__(self) -> str:
        return self.value


class FitPart(str, Enum):
    """The parts of ``fit`` in the ledger, in the ledger's order. Their seconds sum to the fit's wall time."""

    TRAINING_STEPS = "training_steps"  # on_train_batch_start .. on_train_batch_end, incl. the batch fetch
    VALIDATION = "validation"  # on_validation_start .. on_validation_end (not the sanity check)
    SANITY_CHECK = "sanity_check"
    CHECKPOINTING = "checkpointing"  # ModelCheckpoint / trainer.save_checkpoint
    LOGGING = "logging"  # logger connector: metric sync/compute, logger.log_metrics/save
    CALLBACKS = "callbacks"  # other callbacks' hooks (self time), by class and hook
    EPOCH_BOUNDARIES = "epoch_boundaries"  # iter(dataloader)/worker start-up, sampler, on_*_epoch_* hooks
    COMPILE_WARMUP = "compile_warmup"  # torch.compile warm-up steps where seen
    DIAGNOSIS = "diagnosis"  # this package's own work: measurement stage, mid-run verdict, report writing
    SETUP_TEARDOWN = "setup_teardown"
    UNACCOUNTED = "unaccounted"

    def __str__(self) -> str:
        return self.value
