"""A fixed number of shrubs (small CART trees) packed in flat numpy arrays, descended all at once.

The Shrub Ensemble keeps up to M + 1 trees on the device and applies all of them to every sample. A tree
document (``edgedrift.models.tree``) stores children by index; here every tree is re-laid out in
breadth-first order with the two children of a split adjacent, and a leaf points to itself (feature 0,
threshold +∞). So all trees descend together, one gather per array and level,
``node ← child[node] + (x[feature[node]] > threshold[node])``, with no leaf test. Only numpy is used:
this module runs on edges.

Tree ``slot`` s holds nodes ``s·cap … s·cap + cap − 1`` of the flat arrays (``cap`` grows with the largest
tree seen); ``child`` holds absolute indices into them.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

from edgedrift import kernels
from edgedrift.models.losses import FloatArray

__all__ = ["PackedForest", "bfs_layout"]

IntArray = NDArray[np.intp]


def bfs_layout(doc: dict[str, Any]) -> tuple[IntArray, int]:
    """Breadth-first order of the nodes reachable from the root, children adjacent; and the tree depth.

    Returns ``order`` (new index j holds old node order[j]); for every split node its two children
    get consecutive new indices, left first, so that descending is ``node = child[node] + (x > t)``.

    Examples
    --------
    A root (0) whose children are stored out of order, the right one (1) a split with leaves 3 and 4:

    >>> doc = {"left": [2, 3, -1, -1, -1], "right": [1, 4, -1, -1, -1]}
    >>> order, depth = bfs_layout(doc)
    >>> order.tolist(), depth
    ([0, 2, 1, 3, 4], 2)
    """
    left, right = list(doc["left"]), list(doc["right"])
    order, level, depth = [0], [0], 0
    while True:
        nxt = [c for o in level if left[o] >= 0 for c in (left[o], right[o])]
        if not nxt:
            return np.asarray(order, dtype=np.intp), depth
        order.extend(nxt)
        level = nxt
        depth += 1


class PackedForest:
    """Up to ``slots`` classification trees in flat arrays, with class-probability leaves.

    Trees occupy slots 0 … m−1 (the caller keeps m); :meth:`write` parses a validated document into a
    slot, :meth:`proba` applies a range of slots to rows, :meth:`compact` drops slots. The leaves hold
    one probability per class of the caller's class list, which :meth:`add_class` extends.

    Parameters
    ----------
    slots
        The number of tree slots.

    Examples
    --------
    >>> import numpy as np
    >>> stump = {"feature": [0, -1, -1], "threshold": [0.5, 0.0, 0.0], "left": [1, -1, -1],
    ...          "right": [2, -1, -1], "value": [[0.5, 0.5], [0.9, 0.1], [0.2, 0.8]]}
    >>> forest = PackedForest(slots=2)
    >>> forest.add_class(0)
    >>> forest.add_class(1)
    >>> forest.write(0, stump, [0, 1])
    >>> forest.proba(np.array([[0.0], [1.0]], dtype=np.float32), m=1)[0].tolist()
    [[0.9, 0.1], [0.2, 0.8]]
    """

    def __init__(self, slots: int) -> None:
        if slots < 1:
            raise ValueError(f"slots must be >= 1, got {slots}")
        self.slots = slots
        #: Insertion number of the tree in each slot, and each tree's depth.
        self.ids = np.zeros(slots, dtype=np.int64)
        self.depths = np.zeros(slots, dtype=np.int64)
        self.next_id = 0
        #: Depth of the deepest live tree: the number of descent steps.
        self.depth = 0
        self.cap = 0
        self.base = np.zeros(slots, dtype=np.intp)
        self.feat = np.zeros((slots, 0), dtype=np.intp)
        self.thr = np.zeros((slots, 0))
        self.child = np.zeros((slots, 0), dtype=np.intp)
        self.val = np.zeros((slots, 0, 0))

    @property
    def n_classes(self) -> int:
        return int(self.val.shape[2])

    @property
    def arrays(self) -> tuple[NDArray[Any], ...]:
        """Every array the forest holds (for memory accounting)."""
        return (self.ids, self.depths, self.base, self.feat, self.thr, self.child, self.val)

    def add_class(self, j: int) -> None:
        """A new class at column j of the leaves' probabilities (0 in every existing leaf)."""
        self.val = np.insert(self.val, j, 0.0, axis=2)

    def ensure_nodes(self, n_nodes: int) -> None:
        """Grow the per-tree node capacity to ``n_nodes``, copying the trees and re-basing their
        absolute child indices (slot·cap + node)."""
        if n_nodes <= self.cap:
            return
        K, C, old = self.slots, self.n_classes, self.cap
        base = np.arange(K, dtype=np.intp) * n_nodes
        feat = np.zeros((K, n_nodes), dtype=np.intp)
        thr = np.full((K, n_nodes), np.inf)
        child = np.zeros((K, n_nodes), dtype=np.intp)
        val = np.zeros((K, n_nodes, C))
        feat[:, :old], thr[:, :old], val[:, :old] = self.feat, self.thr, self.val
        child[:, :old] = self.child - self.base[:, None] + base[:, None]
        self.feat, self.thr, self.child, self.val, self.base = feat, thr, child, val, base
        self.cap = n_nodes

    def write(self, slot: int, doc: dict[str, Any], cols: list[int]) -> None:
        """Parse a validated classification tree document into ``slot``; ``cols[k]`` is the column of its
        k-th class (:func:`~edgedrift.models.tree.validate_tree_document` checks a document)."""
        order, depth = bfs_layout(doc)
        n = order.size
        self.ensure_nodes(n)
        cap, base = self.cap, int(self.base[slot])
        feature = np.asarray(doc["feature"], dtype=np.intp)[order]
        leaf = feature < 0
        new_index = np.empty(len(doc["feature"]), dtype=np.intp)
        new_index[order] = np.arange(n)
        first_child = new_index[np.maximum(np.asarray(doc["left"], dtype=np.intp)[order], 0)]
        self.feat[slot, :n] = np.where(leaf, 0, feature)
        self.thr[slot, :n] = np.where(leaf, np.inf, np.asarray(doc["threshold"], dtype=np.float64)[order])
        self.child[slot, :n] = base + np.where(leaf, np.arange(n), first_child)
        self.feat[slot, n:cap], self.thr[slot, n:cap], self.child[slot, n:cap] = 0, np.inf, base
        self.val[slot] = 0.0
        self.val[slot, :n][:, cols] = np.asarray(doc["value"], dtype=np.float64)[order]
        self.depths[slot] = depth
        self.depth = max(self.depth, depth)
        self.ids[slot] = self.next_id
        self.next_id += 1

    def descend(self, X32: NDArray[np.float32], slots: IntArray) -> IntArray:
        """(len(slots), n): absolute index (slot·cap + node) of the leaf each row of X reaches per tree."""
        n, d = X32.shape
        node = np.repeat(self.base[slots][:, None], n, axis=1)
        feat, thr, child = self.feat.reshape(-1), self.thr.reshape(-1), self.child.reshape(-1)
        x = X32.reshape(-1)
        offset = np.arange(n, dtype=np.intp) * d if n > 1 else None
        for _ in range(self.depth):
            f = feat[node]
            if offset is not None:
                f += offset
            node = child[node] + (x[f] > thr[node])
        return node

    def proba(self, X32: NDArray[np.float32], m: int, first: int = 0) -> FloatArray:
        """(m, n, C): class probabilities of every row under the trees in slots first … first+m−1."""
        slots = np.arange(first, first + m, dtype=np.intp)
        out: FloatArray = self.val.reshape(-1, self.n_classes)[self.descend(X32, slots)]
        return out

    def proba_one_into(self, x32: NDArray[np.float32], m: int, out: FloatArray) -> None:
        """``out[:] = proba(x32[None, :], m)[:, 0, :]`` for one row, in one compiled call where the kernels
        are built (the same descent and leaves; the per-sample predictions of a shrub ensemble)."""
        k = kernels.MODULE
        if k is not None:
            try:
                k.forest_proba_one(
                    x32, self.feat, self.thr, self.child, self.base, self.val, m, self.depth, out
                )
                return
            except kernels.LayoutError:  # arrays the kernel does not take: the numpy code
                pass
        out[:] = self.proba(x32[None, :], m)[:, 0, :]

    def compact(self, keep: IntArray) -> None:
        """Keep the trees in slots ``keep`` (ascending), moved to slots 0 … len(keep)−1."""
        k = keep.size
        for a in (self.ids, self.depths, self.feat, self.thr, self.val):
            a[:k] = a[keep]
        self.child[:k] = self.child[keep] + (self.base[:k] - self.base[keep])[:, None]
        self.depth = int(self.depths[:k].max()) if k else 0
