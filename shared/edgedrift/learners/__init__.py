"""Incremental learners for β_cur and for edge-only operation (river-style learn_one / predict_one)."""

from edgedrift.learners.adaptive import AdaptiveSGD
from edgedrift.learners.base import EWStandardizer, IncrementalLearner, OnlineLearner
from edgedrift.learners.one_vs_rest import OneVsRest
from edgedrift.learners.online_bls import OnlineBLS
from edgedrift.learners.second_order import ForgettingNewton
from edgedrift.learners.sgd import SGD, Perceptron
from edgedrift.learners.shrub_ensemble import ShrubEnsemble

__all__ = [
    "SGD",
    "AdaptiveSGD",
    "EWStandardizer",
    "ForgettingNewton",
    "IncrementalLearner",
    "OneVsRest",
    "OnlineBLS",
    "OnlineLearner",
    "Perceptron",
    "ShrubEnsemble",
]
