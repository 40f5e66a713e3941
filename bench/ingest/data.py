"""The benchmark's stream: seeded Sine1+ encoded as the replay command does, in consecutive id ranges."""

from __future__ import annotations

import json
import math
from typing import Any

from edgedrift.data import sine1plus


class Data:
    """A seeded Sine1+ stream, cut into consecutive id ranges (every sample id is used once)."""

    def __init__(self, n: int, d: int, seed: int) -> None:
        length = 100_000
        self.stream = sine1plus(
            d=d, n_concepts=max(1, math.ceil(n / length)), concept_length=length, seed=seed
        )
        self.next = 0

    def take(self, n: int, batch: int, label_every: int = 10) -> list[bytes]:
        """``n`` samples as the replay command encodes them: singles or ``{"samples": [...]}`` batches."""
        X = self.stream.X[self.next : self.next + n].tolist()
        y = self.stream.y[self.next : self.next + n].tolist()
        if len(X) < n:
            raise ValueError("the stream is too short")
        base, self.next = self.next, self.next + n
        items: list[dict[str, Any]] = []
        for i in range(n):
            sample: dict[str, Any] = {"id": base + i, "x": X[i]}
            if (base + i) % label_every == 0:
                sample["y"] = y[i]
            items.append(sample)
        dumps = json.JSONEncoder(separators=(",", ":")).encode
        if batch == 1:
            return [dumps(s).encode() for s in items]
        return [dumps({"samples": items[k : k + batch]}).encode() for k in range(0, n, batch)]
