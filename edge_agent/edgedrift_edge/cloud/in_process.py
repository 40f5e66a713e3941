"""The cloud's training in this process: a session's trainer for embedding a device in an application,
for notebooks and for tests (docs/embedding.md).

:func:`in_process_trainer` answers every recompute at once, as the cloud trainer would train it: the
request's wire header and window go to the same function the cloud's training endpoint calls
(:func:`edgedrift.training.window.train_window`), so the models are the cloud's, tuned ``C`` included.
It needs the core's batch training (``pip install 'edgedrift-core[training]'``, as the cloud and the
evaluator have it); the agent never imports this module, so the edge image stays without it.

The re-tuning strategies (``druid-tune``, ``periodic-tune``) search the device's labeled history in the
cloud's database: they need the cloud trainer itself.
"""

from __future__ import annotations

import itertools

from edgedrift.models.document import model_from_document
from edgedrift.strategies import get_strategy
from edgedrift_edge.session.trainer import RecomputeRequest, TrainedModel, Trainer

__all__ = ["check_in_process", "in_process_trainer"]


def check_in_process(strategy: str) -> None:
    """ValueError when ``strategy``'s recomputes need the cloud's history (the re-tuning strategies)."""
    if get_strategy(strategy).needs_history:
        raise ValueError(
            f"strategy {strategy!r} re-tunes on the device's history in the cloud's database: run it "
            "against the cloud trainer (edgedrift cloud serve), not in process"
        )


def in_process_trainer() -> Trainer:
    """A session trainer that trains each request in this process and returns the model at once (the
    session installs it before its next sample); versions count from 1."""
    try:
        from edgedrift.training.window import train_window
    except ImportError as exc:  # the edge install: no scikit-learn, LIBLINEAR, SciPy
        raise ImportError(
            f"in-process training needs the core's training extra: pip install 'edgedrift-core[training]' "
            f"({exc})"
        ) from exc
    versions = itertools.count(1)

    def train(request: RecomputeRequest) -> TrainedModel:
        if request.retune is not None:
            raise ValueError("a re-tuning recompute needs the cloud trainer's history")
        outcome = train_window(request.header(), request.X, request.y)
        version = next(versions)
        document = {**outcome.document, "version": version}
        return TrainedModel(
            request_id=request.request_id,
            version=version,
            model=model_from_document(document),
            document=document,
            train_ms=outcome.train_ms,
            bytes_up=0,
            bytes_down=0,
        )

    return train
