"""The class names of a device's session: a device configured with ``classes`` speaks class names on the
wire. Its labels are parsed into the codes of :mod:`edgedrift.labels` (±1 for two classes, 0..C−1 for
C ≥ 3; an unknown name is a counted rejection), the core learns and predicts codes, and the predictions
are named before they leave. Owned by :class:`~edgedrift_edge.session.DeviceSession`."""

from __future__ import annotations

from edgedrift.labels import ClassLabels
from edgedrift_edge.session.ledger import Prediction, SessionConfig
from edgedrift_edge.session.messages import Rejection, SampleId, Samples, parse_labels, parse_samples


class ClassNames:
    """Labels in, predictions out, by class name (see the module docstring); without ``classes`` the
    wire speaks the core's codes and nothing is translated."""

    def __init__(self, config: SessionConfig) -> None:
        self.config = config
        self.labels = None if config.classes is None else ClassLabels(config.classes)
        self.n_classes = 2 if self.labels is None else self.labels.n_classes

    def names(self) -> tuple[str, ...] | None:
        """The class names as the cloud's request carries them (None without ``classes``)."""
        return None if self.labels is None else tuple(str(n) for n in self.labels.names)

    def parse_labels(self, payload: bytes) -> tuple[list[tuple[SampleId, float]], list[Rejection]]:
        return parse_labels(payload, self.config.task, self.config.max_items, self.labels)

    def parse_samples(self, payload: bytes, n_features: int | None, next_seq: int) -> Samples:
        c = self.config
        return parse_samples(payload, n_features, c.task, next_seq, c.max_items, self.labels)

    def named(self, preds: list[Prediction]) -> list[Prediction]:
        """The predictions by class name (the core predicts codes); unchanged without ``classes``."""
        if self.labels is not None:
            decode = self.labels.decode_one
            for pred in preds:
                if pred["y_hat"] is not None:
                    pred["y_hat"] = decode(pred["y_hat"])
        return preds
