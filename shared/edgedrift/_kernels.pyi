"""Types of the compiled kernels (``_kernels.c``; see :mod:`edgedrift.kernels`)."""

from typing import Any

from numpy import bool_, float32, float64, int16, int32, int64, intp, uint64
from numpy.typing import NDArray

_F = NDArray[float64]
_T = NDArray[int16] | NDArray[int32]
_W = NDArray[uint64]

class LayoutError(ValueError):
    """An argument a kernel does not take as it is: the caller runs the numpy code instead."""

def newton_learn(
    x: _F,
    y: float,
    loss: int,
    w: _F,
    P: _F,
    m: _F,
    xa: _F,
    Px: _F,
    mean: _F | None,
    var: _F | None,
    inv_std: _F | None,
    delta: _F | None,
    a: float,
    eps: float,
    inv_forgetting: float,
    rho: float,
    j: int,
    h_min: float,
    step_max: float,
    max_sq: float,
    symmetrize: bool,
    /,
) -> int: ...
def newton_learn_many(
    X: _F,
    y: _F,
    loss: int,
    w: _F,
    P: _F,
    m: _F,
    mean: _F | None,
    var: _F | None,
    inv_std: _F | None,
    n_seen: int,
    alpha: float,
    eps: float,
    forgetting: float,
    rho: float,
    j: int,
    h_min: float,
    max_sq: float,
    delta_sq_max: float,
    /,
) -> tuple[int, int]: ...
def adaptive_learn(
    x: _F,
    y: float,
    loss: int,
    w: _F,
    xa: _F,
    g: _F,
    v: _F,
    mean: _F | None,
    var: _F | None,
    inv_std: _F | None,
    delta: _F | None,
    a: float,
    eps: float,
    lr: float,
    rho: float,
    v_eps: float,
    step_max: float,
    max_sq: float,
    rmsprop: bool,
    /,
) -> int: ...
def newton_replay(
    X: _F,
    y: _F,
    z: _F,
    raw_w: _F,
    mean: _F | None,
    var: _F | None,
    inv_std: _F | None,
    delta: _F | None,
    alpha: float,
    scaler_n: int,
    eps: float,
    n_learned: int,
    max_sq: float,
    loss: int,
    w: _F,
    P: _F,
    m: _F,
    xa: _F,
    Px: _F,
    inv_forgetting: float,
    rho: float,
    h_min: float,
    step_max: float,
    /,
) -> tuple[int, int, int]: ...
def adaptive_replay(
    X: _F,
    y: _F,
    z: _F,
    raw_w: _F,
    mean: _F | None,
    var: _F | None,
    inv_std: _F | None,
    delta: _F | None,
    alpha: float,
    scaler_n: int,
    eps: float,
    n_learned: int,
    max_sq: float,
    loss: int,
    w: _F,
    xa: _F,
    g: _F,
    v: _F,
    lr: float,
    rho: float,
    v_eps: float,
    step_max: float,
    rmsprop: bool,
    /,
) -> tuple[int, int, int]: ...
def grad_track(
    x: _F,
    y: float,
    loss: int,
    raw_coef: _F,
    raw_intercept: float,
    mean: _F | None,
    inv_scale: _F,
    bias: float,
    xa: _F,
    g: _F,
    g2_max: float,
    vec: _F,
    sign: float,
    metric: _F | None,
    mg: _F | None,
    radius2: float,
    robust: _F,
    added_sum: _F | None,
    added_outer: _F,
    /,
) -> bool: ...
def raw_weights(w: _F, inv_std: _F, mean: _F, raw_w: _F, /) -> float: ...
def whitened_sq(W: _F, v: _F, /) -> float: ...
def linear_score(w: _F, x: _F, b: float, /) -> float: ...
def linear_scores(w: _F, X: _F, b: float, out: _F, /) -> None: ...
def forest_proba_one(
    x32: NDArray[float32],
    feat: NDArray[intp],
    thr: _F,
    child: NDArray[intp],
    base: NDArray[intp],
    val: _F,
    m: int,
    depth: int,
    out: _F,
    /,
) -> None: ...
def givens_update(Rf: _F, v: _F, c_out: _F, dg: _F, drot: object, hypot: object, /) -> None: ...
def in_range(x: _F, lo: _F, hi: _F, /) -> bool: ...
def rows_outside(X: _F, lo: _F, hi: _F, out: NDArray[bool_], /) -> int: ...
def grad_track_many(
    X: _F,
    y: _F,
    loss: int,
    raw_coef: _F,
    raw_intercept: float,
    mean: _F | None,
    inv_scale: _F,
    bias: float,
    g2_max: float,
    vec: _F,
    sign: float,
    metric: _F | None,
    radius2: float,
    robust: _F,
    added_sum: _F | None,
    added_outer: _F,
    R: _F,
    /,
) -> int: ...
def druid_steps(
    before: _F,
    R_add: _F,
    R_ev: _F,
    W: _F,
    n_added: int,
    n_evicted: int,
    n_orig: int,
    min_labels: int,
    threshold: float,
    carry: int,
    /,
) -> tuple[int, int, float, int, int]: ...
def sample_columns(
    items: list[Any], d: int, classification: bool, next_seq: int, unset: object, X: _F, y: _F, ts: _F, /
) -> list[int | str] | None: ...
def id_find(table: _T, keys: _W, checks: _W, key: int, check: int, shift: int, /) -> int: ...
def id_find_many(
    table: _T, keys: _W, checks: _W, qkeys: _W, qchecks: _W, shift: int, out: NDArray[int64], /
) -> None: ...
def id_place(table: _T, slot: int, key: int, check: int, shift: int, /) -> None: ...
def id_unplace(table: _T, keys: _W, checks: _W, slot: int, shift: int, /) -> None: ...
def id_place_many(table: _T, keys: _W, checks: _W, slots: NDArray[int64], shift: int, /) -> None: ...
def id_unplace_many(table: _T, keys: _W, checks: _W, slots: NDArray[int64], shift: int, /) -> None: ...
