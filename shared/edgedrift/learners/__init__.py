"""Incremental learners for β_cur and for edge-only operation (river-style learn_one / predict_one)."""

from edgedrift.learners.adaptive import AdaptiveSGD
from edgedrift.learners.base import EWStandardizer, IncrementalLearner
from edgedrift.learners.second_order import ForgettingNewton
from edgedrift.learners.sgd import SGD, Perceptron

__all__ = ["SGD", "AdaptiveSGD", "EWStandardizer", "ForgettingNewton", "IncrementalLearner", "Perceptron"]
