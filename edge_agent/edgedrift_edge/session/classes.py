"""The class names of a device's session: a device configured with ``classes`` speaks class names on the
wire. Its labels are parsed into the codes of :mod:`edgedrift.labels` (±1 for two classes, 0..C−1 for
C ≥ 3; an unknown name is a counted rejection), the core learns and predicts codes, and the predictions
are named before they leave. A mixin of :class:`~edgedrift_edge.session.DeviceSession`; it also keeps the
recent window's confusion cells, from which the reports compute the macro-F1."""

from __future__ import annotations

from typing import Any

from edgedrift.labels import ClassLabels
from edgedrift_edge.buffers.score_window import ScoreWindow
from edgedrift_edge.session.ledger import Prediction, SessionConfig
from edgedrift_edge.session.messages import Rejection, SampleId, Samples, parse_labels, parse_samples


class ClassesMixin:
    """Labels in, predictions out, by class name (see the module docstring)."""

    config: SessionConfig
    n_features: int | None
    next_seq: int
    classes: ClassLabels | None
    n_classes: int
    #: Each recent labeled prediction's cell t·C + p of the confusion matrix (devices with ``classes``).
    recent_cells: ScoreWindow | None

    def _init_classes(self) -> None:
        config = self.config
        self.classes = None if config.classes is None else ClassLabels(config.classes)
        self.n_classes = 2 if self.classes is None else self.classes.n_classes
        self.recent_cells = None if self.classes is None else ScoreWindow(config.accuracy_window)

    def _parse_labels(self, payload: bytes) -> tuple[list[tuple[SampleId, float]], list[Rejection]]:
        return parse_labels(payload, self.config.task, self.config.max_items, self.classes)

    def _parse_samples(self, payload: bytes) -> Samples:
        c = self.config
        return parse_samples(payload, self.n_features, c.task, self.next_seq, c.max_items, self.classes)

    def _named(self, preds: list[Prediction]) -> list[Prediction]:
        """The predictions by class name (the core predicts codes); unchanged without ``classes``."""
        if self.classes is not None:
            decode = self.classes.decode_one
            for pred in preds:
                if pred["y_hat"] is not None:
                    pred["y_hat"] = decode(pred["y_hat"])
        return preds

    def _restore_cells(self, tree: dict[str, Any]) -> None:
        """The confusion cells of a checkpoint (absent in one written before classes, or without them)."""
        cells = tree.get("recent_cells")
        if self.recent_cells is not None and cells is not None:
            self.recent_cells = ScoreWindow(self.config.accuracy_window, cells.tolist())
