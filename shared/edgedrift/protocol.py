"""Evaluation protocols: which samples are labeled, when their labels arrive, what is scored (shared by
the offline evaluator and the replay command, so both label the same samples).

The DRUiD protocol (paper, Section 5.1): every k-th sample (k = 10) is labeled; the first window
(2000 samples = 200 labels) trains the initial model and tunes every hyper-parameter; from then on every
sample is predicted and scored against its true label, but only the labeled ones are learned from.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

import numpy as np
from numpy.typing import NDArray


@dataclass(frozen=True)
class Protocol:
    """A label schedule plus the warm-up window.

    ``schedule="every"``: samples with index ≡ offset (mod every) are labeled; ``"random"``: each sample
    is labeled with probability ``fraction`` (seeded by ``offset``). A label arrives ``delay`` samples
    after its sample (0: right after the prediction, test-then-train). ``window`` is the sliding window
    and warm-up length in samples; the window holds the labeled samples among them. ``batch``: samples
    per message the scored part is fed in (``process_many``, per-sample semantics, so any batch size
    gives the predictions of batch 1; with ``delay=0`` only).
    """

    name: str = "druid"
    schedule: Literal["every", "random"] = "every"
    every: int = 10
    fraction: float = 0.1
    delay: int = 0
    window: int = 2000
    batch: int = 1

    def __post_init__(self) -> None:
        if self.batch < 1:
            raise ValueError(f"batch must be at least 1, got {self.batch}")

    def labeled_mask(self, n: int, offset: int) -> NDArray[np.bool_]:
        if self.schedule == "every":
            mask = np.zeros(n, dtype=bool)
            mask[offset % self.every :: self.every] = True
            return mask
        rng = np.random.default_rng(offset)
        return np.asarray(rng.random(n) < self.fraction)

    @property
    def window_labels(self) -> int:
        """Labels per window (the count-window size in labeled samples)."""
        if self.schedule == "every":
            return max(1, self.window // self.every)
        return max(1, round(self.window * self.fraction))

    def fitted(self, n: int) -> Protocol:
        """This protocol for a stream of ``n`` samples: a stream shorter than twice the window (keystroke's
        1,600 samples, the Usenet streams' 1,500) gets the largest window of whole label periods that
        leaves at least three quarters of it to score, so a short real stream is still evaluated."""
        if n >= 2 * self.window:
            return self
        window = (n // 4) // self.every * self.every
        if window < self.every:
            raise ValueError(f"a stream of {n} samples is too short for labels every {self.every} samples")
        return replace(self, window=window)

    @property
    def offsets(self) -> tuple[int, ...]:
        """The label offsets a full evaluation averages over (all 10 for every-10th)."""
        return tuple(range(self.every)) if self.schedule == "every" else tuple(range(5))


PROTOCOLS: dict[str, Protocol] = {
    "druid": Protocol(),
    "full": Protocol(name="full", every=1),
}


def get_protocol(name: str, **overrides: int | float | None) -> Protocol:
    """A named protocol (``druid``: 10% labels, window 2000; ``full``: every label); None overrides keep."""
    try:
        base = PROTOCOLS[name]
    except KeyError:
        raise ValueError(f"unknown protocol {name!r}; expected one of {sorted(PROTOCOLS)}") from None
    fields = {k: v for k, v in overrides.items() if v is not None}
    return Protocol(**{**base.__dict__, **fields})
