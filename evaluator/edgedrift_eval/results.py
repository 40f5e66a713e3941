"""Typed results of the evaluator: :class:`RunResult` (one prequential run) and :class:`SweepEntry` (one
configuration aggregated over label offsets).

Their ``as_dict`` is the JSON form written to ``runs.json`` and ``results.json``: the keys, values and
key order the evaluator's files have always had, so the files and their readers stay as they were.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from edgedrift.models.losses import FloatArray

#: A monitor's statistics as a run keeps them: numbers and flags only.
MonitorStats = dict[str, int | float | bool]
#: Tuned hyper-parameters of the incremental learners, by learner name.
LearnerParams = dict[str, dict[str, float]]
#: The swept parameter of a strategy, ``{name: value}``; empty when it has none.
Params = dict[str, float]


@dataclass(frozen=True)
class RunResult:
    """One prequential run: a strategy with one parameter value under one label offset."""

    strategy: str
    params: Params
    offset: int
    n_scored: int
    n_labeled: int
    #: Cost of one learner update: ``O(d)``, ``O(d^2)``, ``O(1)`` (baselines), ``river``, ``none``, ...
    update_order: str
    #: :func:`edgedrift.metrics.classification_report` or ``regression_report`` of the scored part.
    metrics: dict[str, float]
    recomputes: int
    bytes_up: int
    bytes_down: int
    #: For each recompute, the index of the first sample predicted after it.
    recompute_at: list[int]
    edge_us_per_sample: float
    train_ms_total: float
    wall_s: float
    #: Bytes of the edge's state at the end of the run (learner, monitor, window arrays).
    edge_state_bytes: int = 0
    #: CPU seconds of the cloud per recompute (training, and the search of a re-tuning recompute).
    cloud_cpu_s_per_recompute: float = 0.0
    #: The batch model's tuned C (runs of the edge loop only).
    C: float | None = None
    learner_params: LearnerParams | None = None
    #: The monitor's final statistics (runs of the edge loop only).
    monitor: MonitorStats | None = None
    #: Every scored prediction, kept only by ``run_one(..., curves=True)``; never written to JSON.
    predictions: FloatArray | None = field(default=None, repr=False, compare=False)

    @property
    def param(self) -> float | None:
        """The swept parameter's value, or None."""
        return next(iter(self.params.values()), None)

    def metric(self, name: str) -> float:
        """One metric by name (``accuracy``, ``kappa``, ``rmse``, ...)."""
        return self.metrics[name]

    def scored_predictions(self) -> FloatArray:
        """The prediction of every scored sample; a ValueError when the run did not keep them."""
        if self.predictions is None:
            raise ValueError(f"run {self.strategy} {self.params} kept no predictions (use curves=True)")
        return self.predictions

    def as_dict(self) -> dict[str, object]:
        """One row of ``runs.json`` (``C``, ``learner_params`` and ``monitor`` only when known)."""
        row: dict[str, object] = {
            "strategy": self.strategy,
            "params": self.params,
            "offset": self.offset,
            "n_scored": self.n_scored,
            "n_labeled": self.n_labeled,
        }
        if self.C is not None:
            row["C"] = self.C
        if self.learner_params is not None:
            row["learner_params"] = self.learner_params
        row["update_order"] = self.update_order
        row.update(self.metrics)
        if self.monitor is not None:
            row["monitor"] = self.monitor
        row.update(
            recomputes=self.recomputes,
            bytes_up=self.bytes_up,
            bytes_down=self.bytes_down,
            recompute_at=self.recompute_at,
            edge_us_per_sample=self.edge_us_per_sample,
            edge_state_bytes=self.edge_state_bytes,
            cloud_cpu_s_per_recompute=self.cloud_cpu_s_per_recompute,
            train_ms_total=self.train_ms_total,
            wall_s=self.wall_s,
        )
        return row


@dataclass(frozen=True)
class SweepEntry:
    """One configuration (strategy and parameter value): means and standard deviations over offsets."""

    strategy: str
    params: Params
    n_offsets: int
    n_scored: int
    recomputes: float
    recomputes_max: int
    bytes_up: float
    bytes_down: float
    edge_us_per_sample: float
    update_order: str
    #: The tuned C of each offset's run (None for runs without a batch model).
    C: list[float | None]
    learner_params: LearnerParams
    #: Metric name -> mean over the offsets.
    mean: dict[str, float]
    #: Metric name -> standard deviation over the offsets.
    sd: dict[str, float]
    #: Per offset: ``offset``, ``recomputes`` and each metric.
    offsets: list[dict[str, float]]
    edge_state_bytes: float = 0.0
    cloud_cpu_s_per_recompute: float = 0.0

    @property
    def param(self) -> float | None:
        """The swept parameter's value, or None."""
        return next(iter(self.params.values()), None)

    def metric(self, name: str) -> float:
        """The mean of one metric over the offsets."""
        return self.mean[name]

    def metric_sd(self, name: str) -> float:
        """The standard deviation of one metric over the offsets."""
        return self.sd[name]

    def as_dict(self) -> dict[str, object]:
        """One entry of ``results.json``: each metric ``m`` as ``m`` (mean) and ``m_sd``."""
        entry: dict[str, object] = {
            "strategy": self.strategy,
            "params": self.params,
            "n_offsets": self.n_offsets,
            "n_scored": self.n_scored,
            "recomputes": self.recomputes,
            "recomputes_max": self.recomputes_max,
            "bytes_up": self.bytes_up,
            "bytes_down": self.bytes_down,
            "edge_us_per_sample": self.edge_us_per_sample,
            "edge_state_bytes": self.edge_state_bytes,
            "cloud_cpu_s_per_recompute": self.cloud_cpu_s_per_recompute,
            "update_order": self.update_order,
            "C": self.C,
            "learner_params": self.learner_params,
        }
        for name, value in self.mean.items():
            entry[name] = value
            entry[f"{name}_sd"] = self.sd[name]
        entry["offsets"] = self.offsets
        return entry
