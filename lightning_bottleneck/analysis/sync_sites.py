"""Host-device synchronisation call sites found by the live sync hooks (pure data, no torch)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class SyncSite:
    """One user source line that made the host wait for the device.

    ``location`` is ``path/to/file.py:LINE`` (relative to the working directory where possible): the
    first frame outside torch, lightning and this package. ``via`` names the API that synced
    (``"Tensor.item"``, ``"Tensor.__format__"``, ``"torch.cuda.synchronize"``, ...). ``lightning_log``
    is set when Lightning did the sync on the user's behalf for a ``self.log`` call at ``location``.
    """

    location: str
    via: str
    calls: int = 0
    total_ms: float = 0.0  # host time blocked inside the call
    steps: int = 0  # training steps during which the tracker was active
    lightning_log: bool = False
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def calls_per_step(self) -> float:
        return self.calls / self.steps if self.steps else float(self.calls)

    @property
    def mean_ms(self) -> float:
        return self.total_ms / self.calls if self.calls else 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
