"""Batch training, shared by the cloud trainer and the offline evaluator: LIBLINEAR for the linear
models (with C tuning), CART shrubs, SMOTE rebalancing, and :func:`~edgedrift.training.window.train_window`,
the one entry point that turns a window and its header into a model document.

An optional part of ``edgedrift-core``: ``pip install 'edgedrift-core[training]'`` adds liblinear-official,
scikit-learn and imbalanced-learn. The edge agent never imports it (the edge image does not carry them).
"""
