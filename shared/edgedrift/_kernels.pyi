"""Types of the compiled kernels (``_kernels.c``; see :mod:`edgedrift.kernels`)."""

from numpy import float64
from numpy.typing import NDArray

_F = NDArray[float64]

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
