/* Compiled kernels for the per-labeled-sample hot paths of the edge loop (edgedrift.kernels).
 *
 * Each function does in one call what the numpy reference does in 10-25 small numpy calls, on the
 * caller's preallocated float64 arrays, in the same order of operations; only the dot products may sum
 * in another order than BLAS, so results agree with the numpy path to rounding (tests/unit/test_kernels.py,
 * test_newton_batch_kernel.py, test_gateway_batch_kernels.py).
 *
 *   newton_learn    EWStandardizer.update + x~ + ForgettingNewton._update   (learners/second_order.py)
 *   newton_learn_many  size filter + EWStandardizer.update_many + x~ + ForgettingNewton._update_many
 *                   for a batch (IncrementalLearner.learn_many; learners/base.py, second_order.py)
 *   adaptive_learn  EWStandardizer.update + x~ + AdaptiveSGD._update        (learners/adaptive.py)
 *   newton_replay, adaptive_replay
 *                   a prequential replay (predict_one's score, then learn_one, row after row) with the
 *                   arithmetic of linear_score and newton_learn / adaptive_learn (strategies/tuning.py)
 *   grad_track      DeltaG.add / DeltaG.remove of one sample                (monitors/gradient.py)
 *   raw_weights     the learner's weights in raw feature space              (learners/base.py)
 *   whitened_sq     ||W v||^2, DruidMonitor's statistic before the count    (monitors/druid.py)
 *   linear_score    w . x + b, a linear learner's prediction                 (learners/base.py)
 *   in_range        the range guard's test of one sample                     (guard.py)
 *   rows_outside    the range guard's test of a batch                        (guard.py)
 *   grad_track_many DeltaG.add_many / DeltaG.remove_many                     (monitors/gradient.py)
 *   givens_update   OnlineBLS._rank_one_update's Givens rotations (scipy's BLAS drot) (learners/online_bls.py)
 *   forest_proba_one PackedForest.proba of one row: every tree's descent and leaf (learners/packed_forest.py)
 *   druid_steps     DruidMonitor.update_many's test at every step of a batch (monitors/druid.py)
 *   sample_columns  the columns of a decoded batch of samples            (edgedrift_edge/session/messages.py)
 *   id_find, id_find_many, id_place, id_place_many, id_unplace, id_unplace_many
 *                   the open-addressing table of sample ids of edgedrift_edge.buffers.id_index (linear probing,
 *                   backward-shift deletion; entries are slot + 1 in an int16 or int32 table)
 */
#define PY_SSIZE_T_CLEAN
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#include <Python.h>
#include <limits.h>
#include <math.h>
#include <numpy/arrayobject.h>

enum { LOSS_LOGISTIC = 0, LOSS_SQUARED_HINGE = 1, LOSS_SQUARED = 2 };
/* Return codes of the learners: learned, skipped before anything changed (size), step not taken. */
enum { LEARNED = 0, SKIPPED_SIZE = 1, SKIPPED_STEP = 2 };

/* edgedrift._kernels.LayoutError, a ValueError: an argument the kernel does not take as it is (not a numpy
 * array, another dtype, size or number of dimensions, not C-contiguous, read-only). Only for this error do
 * the callers run the numpy code instead; any other (a wrong argument count, an inconsistent state)
 * propagates, so a kernel that stopped matching its caller fails loudly rather than falling back. */
static PyObject *LayoutError;

/* A C-contiguous float64 array of exactly n elements (writable if asked), or NULL with an error set. */
static double *f64(PyObject *o, npy_intp n, int writable, const char *name)
{
    if (PyErr_Occurred()) /* report the first bad argument */
        return NULL;
    if (!PyArray_Check(o)) {
        PyErr_Format(LayoutError, "%s: expected a numpy array", name);
        return NULL;
    }
    PyArrayObject *a = (PyArrayObject *)o;
    if (PyArray_TYPE(a) != NPY_DOUBLE || !PyArray_IS_C_CONTIGUOUS(a) || PyArray_SIZE(a) != n) {
        PyErr_Format(LayoutError, "%s: expected a C-contiguous float64 array of %zd values", name,
                     (Py_ssize_t)n);
        return NULL;
    }
    if (writable && !PyArray_ISWRITEABLE(a)) {
        PyErr_Format(LayoutError, "%s: array is read-only", name);
        return NULL;
    }
    return (double *)PyArray_DATA(a);
}

static double *f64_or_null(PyObject *o, npy_intp n, int writable, const char *name, int *failed)
{
    if (o == Py_None)
        return NULL;
    double *p = f64(o, n, writable, name);
    if (p == NULL)
        *failed = 1;
    return p;
}

static double dot(const double *a, const double *b, npy_intp n)
{
    double s = 0.0;
    for (npy_intp i = 0; i < n; i++)
        s += a[i] * b[i];
    return s;
}

/* dl/dz of the losses of models/losses.py (dz_one). */
static double loss_dz(int loss, double y, double z)
{
    if (loss == LOSS_LOGISTIC)
        return -y * 0.5 * (1.0 - tanh(0.5 * y * z));
    if (loss == LOSS_SQUARED_HINGE) {
        double m = 1.0 - y * z;
        return m > 0.0 ? -2.0 * y * m : 0.0;
    }
    return -2.0 * (y - z);
}

/* d2l/dz2 (d2z_one). */
static double loss_d2z(int loss, double y, double z)
{
    if (loss == LOSS_LOGISTIC) {
        double t = tanh(0.5 * z);
        return 0.25 * (1.0 - t * t);
    }
    if (loss == LOSS_SQUARED_HINGE)
        return y * z < 1.0 ? 2.0 : 0.0;
    return 2.0;
}

/* The standardiser's update of one sample with weight a (EWStandardizer.update); delta is scratch. */
static void scaler_update(const double *x, npy_intp d, double *mean, double *var, double *inv_std,
                          double *delta, double a, double eps)
{
    for (npy_intp i = 0; i < d; i++)
        delta[i] = x[i] - mean[i];
    for (npy_intp i = 0; i < d; i++)
        mean[i] += a * delta[i];
    for (npy_intp i = 0; i < d; i++) {
        var[i] += a * delta[i] * delta[i];
        var[i] *= 1.0 - a;
        inv_std[i] = 1.0 / sqrt(var[i] + eps);
    }
}

/* x~ = ((x - mean) * inv_std, 1) into xa (IncrementalLearner._features); mean == NULL: x~ = (x, 1). */
static void features(const double *x, npy_intp d, const double *mean, const double *inv_std, double *xa)
{
    if (mean == NULL) {
        for (npy_intp i = 0; i < d; i++)
            xa[i] = x[i];
    } else {
        for (npy_intp i = 0; i < d; i++)
            xa[i] = (x[i] - mean[i]) * inv_std[i];
    }
    xa[d] = 1.0;
}

/* The learners' common first half (IncrementalLearner.learn_one): skip a sample with ||x||^2 + y^2
 * above max_sq (or not finite), then the standardiser's update with weight a (EWStandardizer.update),
 * then x~ = ((x - mean) * inv_std, 1) into xa. mean == NULL: no standardiser, x~ = (x, 1). */
static int prepare(const double *x, npy_intp d, double y, double max_sq, double *mean, double *var,
                   double *inv_std, double *delta, double a, double eps, double *xa)
{
    if (!(dot(x, x, d) + y * y <= max_sq))
        return SKIPPED_SIZE;
    if (mean != NULL)
        scaler_update(x, d, mean, var, inv_std, delta, a, eps);
    features(x, d, mean, inv_std, xa);
    return LEARNED;
}

/* ForgettingNewton._update after prepare(): P <- P/lambda, the cyclic prior term on coordinate j, then the
 * Sherman-Morrison step (newton_learn and newton_replay); LEARNED or SKIPPED_STEP. */
static int newton_step(npy_intp n, double y, int loss, double *w, double *P, const double *m, const double *xa,
                       double *Px, double inv_f, double rho, npy_intp j, double h_min, double step_max,
                       int symmetrize)
{
    for (npy_intp i = 0; i < n * n; i++)
        P[i] *= inv_f;
    if (rho > 0.0) {
        double *Pj = Px; /* P[:, j], kept in Px until Px is computed */
        for (npy_intp i = 0; i < n; i++)
            Pj[i] = P[i * n + j];
        double s = 1.0 + rho * Pj[j];
        double r = rho / s, shift = rho * (w[j] - m[j]) / s;
        for (npy_intp i = 0; i < n; i++)
            for (npy_intp k = 0; k < n; k++)
                P[i * n + k] -= Pj[i] * (Pj[k] * r);
        for (npy_intp i = 0; i < n; i++)
            w[i] -= Pj[i] * shift;
    }
    double z = dot(xa, w, n);
    double c = loss_dz(loss, y, z);
    double h = loss_d2z(loss, y, z);
    if (h_min > h) /* Python's max(h, h_min) */
        h = h_min;
    for (npy_intp i = 0; i < n; i++)
        Px[i] = dot(P + i * n, xa, n);
    double denom = 1.0 / h + dot(xa, Px, n);
    if (!(0.0 < denom && denom < INFINITY))
        return SKIPPED_STEP;
    double step = c / (h * denom);
    if (!(fabs(step) <= step_max))
        return SKIPPED_STEP;
    double inv_denom = 1.0 / denom;
    for (npy_intp i = 0; i < n; i++)
        for (npy_intp k = 0; k < n; k++)
            P[i * n + k] -= Px[i] * (Px[k] * inv_denom);
    for (npy_intp i = 0; i < n; i++)
        w[i] -= Px[i] * step;
    if (symmetrize) {
        for (npy_intp i = 0; i < n; i++)
            for (npy_intp k = i + 1; k < n; k++) {
                double v = (P[i * n + k] + P[k * n + i]) * 0.5;
                P[i * n + k] = v;
                P[k * n + i] = v;
            }
    }
    return LEARNED;
}

/* newton_learn(x, y, loss, w, P, m, xa, Px, mean, var, inv_std, delta, a, eps, inv_forgetting, rho, j,
 *              h_min, step_max, max_sq, symmetrize) -> 0 learned, 1 skipped (size), 2 step not taken.
 * ForgettingNewton._update (P <- P/lambda, the cyclic prior term on coordinate j, then the
 * Sherman-Morrison step), after prepare(); mean is None without a standardiser. */
static PyObject *newton_learn(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 21) {
        PyErr_SetString(PyExc_TypeError, "newton_learn takes 21 arguments");
        return NULL;
    }
    PyArrayObject *xarr = (PyArrayObject *)args[0];
    if (!PyArray_Check(args[0])) {
        PyErr_SetString(LayoutError, "x: expected a numpy array");
        return NULL;
    }
    npy_intp d = PyArray_SIZE(xarr), n = d + 1;
    int bad = 0;
    const double *x = f64(args[0], d, 0, "x");
    double *w = f64(args[3], n, 1, "w"), *P = f64(args[4], n * n, 1, "P"), *m = f64(args[5], n, 0, "m");
    double *xa = f64(args[6], n, 1, "xa"), *Px = f64(args[7], n, 1, "Px");
    double *mean = f64_or_null(args[8], d, 1, "mean", &bad), *var = f64_or_null(args[9], d, 1, "var", &bad);
    double *inv_std = f64_or_null(args[10], d, 1, "inv_std", &bad);
    double *delta = f64_or_null(args[11], d, 1, "delta", &bad);
    if (!x || !w || !P || !m || !xa || !Px || bad || (mean && !(var && inv_std && delta)))
        return PyErr_Occurred() ? NULL : (PyErr_SetString(PyExc_ValueError, "scaler arrays"), NULL);
    double y = PyFloat_AsDouble(args[1]);
    long loss = PyLong_AsLong(args[2]);
    double a = PyFloat_AsDouble(args[12]), eps = PyFloat_AsDouble(args[13]);
    double inv_f = PyFloat_AsDouble(args[14]), rho = PyFloat_AsDouble(args[15]);
    Py_ssize_t j = PyLong_AsSsize_t(args[16]);
    double h_min = PyFloat_AsDouble(args[17]), step_max = PyFloat_AsDouble(args[18]);
    double max_sq = PyFloat_AsDouble(args[19]);
    int symmetrize = PyObject_IsTrue(args[20]);
    if (PyErr_Occurred())
        return NULL;
    if (j < 0 || j >= n) {
        PyErr_SetString(PyExc_ValueError, "j: not a coordinate of w");
        return NULL;
    }

    if (prepare(x, d, y, max_sq, mean, var, inv_std, delta, a, eps, xa) == SKIPPED_SIZE)
        return PyLong_FromLong(SKIPPED_SIZE);
    return PyLong_FromLong(newton_step(n, y, (int)loss, w, P, m, xa, Px, inv_f, rho, j, h_min, step_max, symmetrize));
}

/* dl/dz and d2l/dz2 as the vectorised Loss.dz and Loss.d2z compute them (the mini-batch steps): np.maximum
 * keeps a NaN, and the logistic curvature is p (1 - p) with p = (1 + tanh(z/2)) / 2. */
static double loss_dz_many(int loss, double y, double z)
{
    if (loss == LOSS_SQUARED_HINGE) {
        double m = 1.0 - y * z;
        return -2.0 * y * (m > 0.0 || m != m ? m : 0.0);
    }
    return loss_dz(loss, y, z);
}

static double loss_d2z_many(int loss, double y, double z)
{
    if (loss == LOSS_LOGISTIC) {
        double p = 0.5 * (1.0 + tanh(0.5 * z));
        return p * (1.0 - p);
    }
    return loss_d2z(loss, y, z);
}

/* LU factors with partial pivoting of the m-by-m row-major A, in place (LAPACK's getrf, behind
 * numpy.linalg.solve and inv); piv[c] is the row swapped with row c. 0 when a pivot is exactly zero,
 * where numpy raises LinAlgError ("Singular matrix"). */
static int lu_factor(double *A, npy_intp m, npy_intp *piv)
{
    for (npy_intp c = 0; c < m; c++) {
        npy_intp p = c;
        double big = fabs(A[c * m + c]);
        for (npy_intp r = c + 1; r < m; r++)
            if (fabs(A[r * m + c]) > big) {
                big = fabs(A[r * m + c]);
                p = r;
            }
        piv[c] = p;
        if (A[p * m + c] == 0.0)
            return 0;
        if (p != c)
            for (npy_intp k = 0; k < m; k++) {
                double t = A[c * m + k];
                A[c * m + k] = A[p * m + k];
                A[p * m + k] = t;
            }
        for (npy_intp r = c + 1; r < m; r++) {
            double l = A[r * m + c] / A[c * m + c];
            A[r * m + c] = l;
            for (npy_intp k = c + 1; k < m; k++)
                A[r * m + k] -= l * A[c * m + k];
        }
    }
    return 1;
}

/* B <- A^-1 B for A's LU factors (LAPACK's getrs); B is m-by-nrhs, row-major. */
static void lu_solve(const double *LU, npy_intp m, const npy_intp *piv, double *B, npy_intp nrhs)
{
    for (npy_intp c = 0; c < m; c++)
        if (piv[c] != c)
            for (npy_intp k = 0; k < nrhs; k++) {
                double t = B[c * nrhs + k];
                B[c * nrhs + k] = B[piv[c] * nrhs + k];
                B[piv[c] * nrhs + k] = t;
            }
    for (npy_intp r = 1; r < m; r++)
        for (npy_intp c = 0; c < r; c++)
            for (npy_intp k = 0; k < nrhs; k++)
                B[r * nrhs + k] -= LU[r * m + c] * B[c * nrhs + k];
    for (npy_intp r = m - 1; r >= 0; r--) {
        for (npy_intp c = r + 1; c < m; c++)
            for (npy_intp k = 0; k < nrhs; k++)
                B[r * nrhs + k] -= LU[r * m + c] * B[c * nrhs + k];
        for (npy_intp k = 0; k < nrhs; k++)
            B[r * nrhs + k] /= LU[r * m + r];
    }
}

/* B <- A^-1 (numpy.linalg.inv: getrf, then getrs on the identity); A is overwritten by its factors.
 * 0 when A is singular. */
static int invert(double *A, npy_intp m, npy_intp *piv, double *B)
{
    if (!lu_factor(A, m, piv))
        return 0;
    for (npy_intp i = 0; i < m * m; i++)
        B[i] = 0.0;
    for (npy_intp i = 0; i < m; i++)
        B[i * m + i] = 1.0;
    lu_solve(A, m, piv, B, m);
    return 1;
}

/* The mini-batch step of ForgettingNewton._update_many on the k rows of U (n columns) with weights wt,
 * the first kept of them the features x~, the rest the cyclic prior terms; grad is the batch's gradient.
 * P (the caller's, unchanged) / lambda^kept is the start; the new P is built in Pn and installed, and w
 * moved, only if the solve is not singular, Pn is finite and ||step||^2 <= delta_sq_max. work holds
 * max(2 k n + k^2, 2 n^2) + n doubles, piv max(k, n) entries. */
static int newton_batch_step(double *P, double *w, npy_intp n, double scale, const double *U,
                             const double *wt, npy_intp k, const double *grad, double delta_sq_max,
                             double *Pn, double *work, npy_intp *piv)
{
    for (npy_intp i = 0; i < n * n; i++)
        Pn[i] = P[i] * scale;
    if (k < n) { /* Woodbury: P <- P - (U P)' (U P U' + diag(1/wt))^-1 (U P) */
        double *UP = work, *S = UP + k * n, *sol = S + k * k;
        for (npy_intp r = 0; r < k; r++)
            for (npy_intp b = 0; b < n; b++) {
                double s = 0.0;
                for (npy_intp a = 0; a < n; a++)
                    s += U[r * n + a] * Pn[a * n + b];
                UP[r * n + b] = s;
            }
        for (npy_intp r = 0; r < k; r++)
            for (npy_intp q = 0; q < k; q++)
                S[r * k + q] = dot(UP + r * n, U + q * n, n);
        for (npy_intp r = 0; r < k; r++)
            S[r * k + r] += 1.0 / wt[r];
        for (npy_intp i = 0; i < k * n; i++)
            sol[i] = UP[i];
        if (!lu_factor(S, k, piv))
            return SKIPPED_STEP;
        lu_solve(S, k, piv, sol, n);
        for (npy_intp a = 0; a < n; a++)
            for (npy_intp b = 0; b < n; b++) {
                double s = 0.0;
                for (npy_intp r = 0; r < k; r++)
                    s += UP[r * n + a] * sol[r * n + b];
                Pn[a * n + b] -= s;
            }
    } else { /* information form: P <- (P^-1 + U' diag(wt) U)^-1 */
        double *A = work, *B = A + n * n;
        if (!invert(Pn, n, piv, A))
            return SKIPPED_STEP;
        for (npy_intp a = 0; a < n; a++)
            for (npy_intp b = 0; b < n; b++) {
                double s = 0.0;
                for (npy_intp r = 0; r < k; r++)
                    s += U[r * n + a] * wt[r] * U[r * n + b];
                A[a * n + b] += s;
            }
        if (!invert(A, n, piv, B))
            return SKIPPED_STEP;
        for (npy_intp i = 0; i < n * n; i++)
            Pn[i] = B[i];
    }
    for (npy_intp a = 0; a < n; a++) /* P += P'; P *= 0.5 (the diagonal too: 2 P_aa may overflow) */
        for (npy_intp b = a; b < n; b++) {
            double v = (Pn[a * n + b] + Pn[b * n + a]) * 0.5;
            Pn[a * n + b] = v;
            Pn[b * n + a] = v;
        }
    double *step = work + (k < n ? 2 * k * n + k * k : 2 * n * n);
    for (npy_intp a = 0; a < n; a++)
        step[a] = dot(Pn + a * n, grad, n);
    if (!(isfinite(dot(Pn, Pn, n * n)) && dot(step, step, n) <= delta_sq_max))
        return SKIPPED_STEP;
    for (npy_intp i = 0; i < n * n; i++)
        P[i] = Pn[i];
    for (npy_intp a = 0; a < n; a++)
        w[a] -= step[a];
    return LEARNED;
}

/* newton_learn_many(X, y, loss, w, P, m, mean, var, inv_std, n_seen, alpha, eps, forgetting, rho, j, h_min,
 *                   max_sq, delta_sq_max) -> (kept, status): status 0 learned, 1 no row kept, 2 step not
 * taken. ForgettingNewton.learn_many (IncrementalLearner.learn_many with ForgettingNewton._update_many):
 * the rows with ||x||^2 + y^2 <= max_sq when the whole batch is not (kept of them), the standardiser's
 * update_many (per sample while n_seen < 1/alpha, then the closed form), x~, and the Newton step of
 * newton_batch_step with the prior terms on coordinates j, j + 1, ... (mod d + 1). The caller adds kept
 * to the standardiser's n and counts the skipped rows; mean is None without a standardiser. */
static PyObject *newton_learn_many(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 18) {
        PyErr_SetString(PyExc_TypeError, "newton_learn_many takes 18 arguments");
        return NULL;
    }
    if (!PyArray_Check(args[0])) {
        PyErr_SetString(LayoutError, "X: expected a numpy array");
        return NULL;
    }
    PyArrayObject *Xarr = (PyArrayObject *)args[0];
    if (PyArray_NDIM(Xarr) != 2) {
        PyErr_SetString(LayoutError, "X: expected a 2-D array");
        return NULL;
    }
    npy_intp k = PyArray_DIM(Xarr, 0), d = PyArray_DIM(Xarr, 1), n = d + 1;
    int bad = 0;
    const double *X = f64(args[0], k * d, 0, "X"), *y = f64(args[1], k, 0, "y");
    double *w = f64(args[3], n, 1, "w"), *P = f64(args[4], n * n, 1, "P"), *m = f64(args[5], n, 0, "m");
    double *mean = f64_or_null(args[6], d, 1, "mean", &bad), *var = f64_or_null(args[7], d, 1, "var", &bad);
    double *inv_std = f64_or_null(args[8], d, 1, "inv_std", &bad);
    if (!X || !y || !w || !P || !m || bad || (mean && !(var && inv_std)))
        return PyErr_Occurred() ? NULL : (PyErr_SetString(PyExc_ValueError, "scaler arrays"), NULL);
    long loss = PyLong_AsLong(args[2]);
    Py_ssize_t n_seen = PyLong_AsSsize_t(args[9]);
    double alpha = PyFloat_AsDouble(args[10]), eps = PyFloat_AsDouble(args[11]);
    double forgetting = PyFloat_AsDouble(args[12]), rho = PyFloat_AsDouble(args[13]);
    Py_ssize_t j = PyLong_AsSsize_t(args[14]);
    double h_min = PyFloat_AsDouble(args[15]), max_sq = PyFloat_AsDouble(args[16]);
    double delta_sq_max = PyFloat_AsDouble(args[17]);
    if (PyErr_Occurred())
        return NULL;
    if (j < 0 || j >= n) {
        PyErr_SetString(PyExc_ValueError, "j: not a coordinate of w");
        return NULL;
    }
    if (mean && !(alpha > 0.0)) {
        PyErr_SetString(PyExc_ValueError, "alpha: must be > 0");
        return NULL;
    }

    /* rows: U (k + n rows of n: the kept x~, then the prior terms), wt, c, grad, new mean, Pn, work */
    npy_intp rows = k + n, wsize = 2 * rows * n + rows * rows > 2 * n * n ? 2 * rows * n + rows * rows
                                                                          : 2 * n * n;
    double *buf = PyMem_Malloc(sizeof(double) * (rows * n + 2 * rows + n + d + n * n + wsize + n));
    npy_intp *idx = PyMem_Malloc(sizeof(npy_intp) * (k + rows + 1));
    if (!buf || !idx) {
        PyMem_Free(buf);
        PyMem_Free(idx);
        return PyErr_NoMemory();
    }
    double *U = buf, *wt = U + rows * n, *c = wt + rows, *grad = c + rows, *mu = grad + n, *Pn = mu + d;
    double *work = Pn + n * n;
    npy_intp *keep = idx, *piv = idx + k, kept = 0;
    int status = SKIPPED_SIZE;

    /* the size check, then the filter: sqnorm(X) + y @ y <= max_sq, else row by row */
    if (dot(X, X, k * d) + dot(y, y, k) <= max_sq) {
        for (npy_intp r = 0; r < k; r++)
            keep[kept++] = r;
    } else {
        for (npy_intp r = 0; r < k; r++)
            if (dot(X + r * d, X + r * d, d) + y[r] * y[r] <= max_sq)
                keep[kept++] = r;
    }
    if (kept == 0)
        goto done;

    if (mean != NULL) { /* EWStandardizer.update_many */
        npy_intp r = 0;
        for (; r < kept && (double)n_seen < 1.0 / alpha; r++) {
            n_seen++;
            double a = 1.0 / (double)n_seen > alpha ? 1.0 / (double)n_seen : alpha;
            scaler_update(X + keep[r] * d, d, mean, var, inv_std, mu, a, eps);
        }
        npy_intp rest = kept - r;
        if (rest > 0) {
            double decay = pow(1.0 - alpha, (double)rest), *ew = c;
            for (npy_intp i = 0; i < rest; i++)
                ew[i] = alpha * pow(1.0 - alpha, (double)(rest - 1 - i));
            for (npy_intp i = 0; i < d; i++) {
                double s = 0.0;
                for (npy_intp q = 0; q < rest; q++)
                    s += ew[q] * X[keep[r + q] * d + i];
                mu[i] = decay * mean[i] + s;
            }
            for (npy_intp i = 0; i < d; i++) {
                double s = 0.0, shift = mean[i] - mu[i];
                for (npy_intp q = 0; q < rest; q++) {
                    double e = X[keep[r + q] * d + i] - mu[i];
                    s += ew[q] * (e * e);
                }
                var[i] = decay * (var[i] + shift * shift) + s;
                mean[i] = mu[i];
                inv_std[i] = 1.0 / sqrt(var[i] + eps);
            }
        }
    }

    for (npy_intp r = 0; r < kept; r++)
        features(X + keep[r] * d, d, mean, inv_std, U + r * n);
    for (npy_intp a = 0; a < n; a++)
        grad[a] = 0.0;
    for (npy_intp r = 0; r < kept; r++) {
        double yr = y[keep[r]], z = dot(U + r * n, w, n);
        double h = loss_d2z_many((int)loss, yr, z);
        c[r] = loss_dz_many((int)loss, yr, z);
        wt[r] = h > h_min || h != h ? h : h_min; /* np.maximum(h, h_min) */
    }
    for (npy_intp r = 0; r < kept; r++)
        for (npy_intp a = 0; a < n; a++)
            grad[a] += c[r] * U[r * n + a];
    npy_intp total = kept;
    if (rho > 0.0) { /* the kept prior terms: coordinate (j + i) mod n for the i-th row, counted */
        npy_intp *hits = piv;
        for (npy_intp a = 0; a < n; a++)
            hits[a] = 0;
        for (npy_intp i = 0; i < kept; i++)
            hits[(j + i) % n]++;
        for (npy_intp a = 0; a < n; a++) {
            if (hits[a] == 0)
                continue;
            double rho_a = rho * (double)hits[a];
            grad[a] += rho_a * (w[a] - m[a]);
            for (npy_intp b = 0; b < n; b++)
                U[total * n + b] = b == a ? 1.0 : 0.0;
            wt[total++] = rho_a;
        }
    }
    status = newton_batch_step(P, w, n, pow(forgetting, -(double)kept), U, wt, total, grad, delta_sq_max,
                               Pn, work, piv);
done:
    PyMem_Free(buf);
    PyMem_Free(idx);
    return Py_BuildValue("(ni)", (Py_ssize_t)kept, status);
}

/* AdaptiveSGD._update after prepare() (adaptive_learn and adaptive_replay); LEARNED or SKIPPED_STEP. */
static int adaptive_step(npy_intp n, double y, int loss, double *w, const double *xa, double *g, double *v,
                         double lr, double rho, double v_eps, double step_max, int rmsprop)
{
    double c = loss_dz(loss, y, dot(xa, w, n));
    if (!(fabs(c) <= step_max))
        return SKIPPED_STEP;
    for (npy_intp i = 0; i < n; i++)
        g[i] = xa[i] * c;
    if (rmsprop) {
        for (npy_intp i = 0; i < n; i++) {
            v[i] *= rho;
            v[i] += (1.0 - rho) * g[i] * g[i];
        }
    } else {
        for (npy_intp i = 0; i < n; i++)
            v[i] += g[i] * g[i];
    }
    for (npy_intp i = 0; i < n; i++)
        w[i] -= lr * g[i] / (sqrt(v[i]) + v_eps);
    return LEARNED;
}

/* adaptive_learn(x, y, loss, w, xa, g, v, mean, var, inv_std, delta, a, eps, lr, rho, v_eps, step_max,
 *                max_sq, rmsprop) -> 0 learned, 1 skipped (size), 2 step not taken.
 * AdaptiveSGD._update (RMSProp: v <- rho v + (1 - rho) g^2; AdaGrad: v <- v + g^2;
 * w <- w - lr g / (sqrt(v) + v_eps)), after prepare(). */
static PyObject *adaptive_learn(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 19) {
        PyErr_SetString(PyExc_TypeError, "adaptive_learn takes 19 arguments");
        return NULL;
    }
    if (!PyArray_Check(args[0])) {
        PyErr_SetString(LayoutError, "x: expected a numpy array");
        return NULL;
    }
    npy_intp d = PyArray_SIZE((PyArrayObject *)args[0]), n = d + 1;
    int bad = 0;
    const double *x = f64(args[0], d, 0, "x");
    double *w = f64(args[3], n, 1, "w"), *xa = f64(args[4], n, 1, "xa"), *g = f64(args[5], n, 1, "g");
    double *v = f64(args[6], n, 1, "v");
    double *mean = f64_or_null(args[7], d, 1, "mean", &bad), *var = f64_or_null(args[8], d, 1, "var", &bad);
    double *inv_std = f64_or_null(args[9], d, 1, "inv_std", &bad);
    double *delta = f64_or_null(args[10], d, 1, "delta", &bad);
    if (!x || !w || !xa || !g || !v || bad || (mean && !(var && inv_std && delta)))
        return PyErr_Occurred() ? NULL : (PyErr_SetString(PyExc_ValueError, "scaler arrays"), NULL);
    double y = PyFloat_AsDouble(args[1]);
    long loss = PyLong_AsLong(args[2]);
    double a = PyFloat_AsDouble(args[11]), eps = PyFloat_AsDouble(args[12]);
    double lr = PyFloat_AsDouble(args[13]), rho = PyFloat_AsDouble(args[14]);
    double v_eps = PyFloat_AsDouble(args[15]), step_max = PyFloat_AsDouble(args[16]);
    double max_sq = PyFloat_AsDouble(args[17]);
    int rmsprop = PyObject_IsTrue(args[18]);
    if (PyErr_Occurred())
        return NULL;

    if (prepare(x, d, y, max_sq, mean, var, inv_std, delta, a, eps, xa) == SKIPPED_SIZE)
        return PyLong_FromLong(SKIPPED_SIZE);
    return PyLong_FromLong(adaptive_step(n, y, (int)loss, w, xa, g, v, lr, rho, v_eps, step_max, rmsprop));
}

/* A prequential replay's rows, standardiser and prediction (newton_replay, adaptive_replay): the arguments
 * X (k, d), y (k), z (k, out), raw_w (d), mean, var, inv_std, delta (d or None), alpha, scaler_n, eps,
 * n_learned, max_sq, in that order, then the learner's own. */
typedef struct {
    const double *X, *y;
    double *z, *raw, *mean, *var, *inv_std, *delta;
    npy_intp k, d;
    double alpha, eps, max_sq;
    Py_ssize_t scaler_n, n_learned, skipped;
} Replay;

enum { REPLAY_ARGS = 13 };

static int replay_args(PyObject *const *args, Replay *r)
{
    if (!PyArray_Check(args[0]) || PyArray_NDIM((PyArrayObject *)args[0]) != 2) {
        PyErr_SetString(LayoutError, "X must be a two-dimensional numpy array");
        return -1;
    }
    r->k = PyArray_DIM((PyArrayObject *)args[0], 0);
    r->d = PyArray_DIM((PyArrayObject *)args[0], 1);
    int bad = 0;
    r->X = f64(args[0], r->k * r->d, 0, "X");
    r->y = f64(args[1], r->k, 0, "y");
    r->z = f64(args[2], r->k, 1, "z");
    r->raw = f64(args[3], r->d, 1, "raw_w");
    r->mean = f64_or_null(args[4], r->d, 1, "mean", &bad);
    r->var = f64_or_null(args[5], r->d, 1, "var", &bad);
    r->inv_std = f64_or_null(args[6], r->d, 1, "inv_std", &bad);
    r->delta = f64_or_null(args[7], r->d, 1, "delta", &bad);
    if (!r->X || !r->y || !r->z || !r->raw || bad || (r->mean && !(r->var && r->inv_std && r->delta))) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "scaler arrays");
        return -1;
    }
    r->alpha = PyFloat_AsDouble(args[8]);
    r->scaler_n = PyLong_AsSsize_t(args[9]);
    r->eps = PyFloat_AsDouble(args[10]);
    r->n_learned = PyLong_AsSsize_t(args[11]);
    r->max_sq = PyFloat_AsDouble(args[12]);
    r->skipped = 0;
    return PyErr_Occurred() ? -1 : 0;
}

/* Row i as predict_one then learn_one see it: z[i] = the raw-space score (IncrementalLearner._refresh_raw
 * and score_one's linear_score), then prepare() with the standardiser's weight max(alpha, 1/(n+1)) of
 * _scaler_arrays; returns prepare's status. */
static int replay_row(Replay *r, npy_intp i, const double *w, double *xa)
{
    npy_intp d = r->d;
    const double *x = r->X + i * d;
    double b, a = 0.0;
    if (r->mean == NULL) {
        for (npy_intp c = 0; c < d; c++)
            r->raw[c] = w[c];
        b = w[d];
    } else {
        for (npy_intp c = 0; c < d; c++)
            r->raw[c] = w[c] * r->inv_std[c];
        b = w[d] - dot(r->raw, r->mean, d);
        double first = 1.0 / (double)(r->scaler_n + 1);
        a = first > r->alpha ? first : r->alpha; /* Python's max(alpha, 1 / (n + 1)) */
    }
    r->z[i] = dot(r->raw, x, d) + b;
    return prepare(x, d, r->y[i], r->max_sq, r->mean, r->var, r->inv_std, r->delta, a, r->eps, xa);
}

/* learn_one's counters after row's status. */
static void replay_count(Replay *r, int status)
{
    if (status != SKIPPED_SIZE && r->mean != NULL)
        r->scaler_n++;
    r->n_learned++;
    if (status != LEARNED)
        r->skipped++;
}

/* newton_replay(<replay arguments>, loss, w, P, m, xa, Px, inv_forgetting, rho, h_min, step_max)
 *   -> (n_learned, skipped, scaler_n).
 * predict_one's score of each row into z, then learn_one of it, row after row: a ForgettingNewton's
 * prequential replay in one call, with newton_learn's arithmetic (the same prepare and newton_step). */
static PyObject *newton_replay(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != REPLAY_ARGS + 10) {
        PyErr_SetString(PyExc_TypeError, "newton_replay takes 23 arguments");
        return NULL;
    }
    Replay r;
    if (replay_args(args, &r) < 0)
        return NULL;
    PyObject *const *a = args + REPLAY_ARGS;
    npy_intp n = r.d + 1;
    long loss = PyLong_AsLong(a[0]);
    double *w = f64(a[1], n, 1, "w"), *P = f64(a[2], n * n, 1, "P"), *m = f64(a[3], n, 0, "m");
    double *xa = f64(a[4], n, 1, "xa"), *Px = f64(a[5], n, 1, "Px");
    if (!w || !P || !m || !xa || !Px)
        return NULL;
    double inv_f = PyFloat_AsDouble(a[6]), rho = PyFloat_AsDouble(a[7]);
    double h_min = PyFloat_AsDouble(a[8]), step_max = PyFloat_AsDouble(a[9]);
    if (PyErr_Occurred())
        return NULL;
    for (npy_intp i = 0; i < r.k; i++) {
        int status = replay_row(&r, i, w, xa);
        if (status != SKIPPED_SIZE) {
            npy_intp j = (npy_intp)(r.n_learned % n);
            status = newton_step(n, r.y[i], (int)loss, w, P, m, xa, Px, inv_f, rho, j, h_min, step_max,
                                 r.n_learned % 16 == 0);
        }
        replay_count(&r, status);
    }
    return Py_BuildValue("(nnn)", r.n_learned, r.skipped, r.scaler_n);
}

/* adaptive_replay(<replay arguments>, loss, w, xa, g, v, lr, rho, v_eps, step_max, rmsprop)
 *   -> (n_learned, skipped, scaler_n): newton_replay for AdaptiveSGD (adaptive_learn's arithmetic). */
static PyObject *adaptive_replay(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != REPLAY_ARGS + 10) {
        PyErr_SetString(PyExc_TypeError, "adaptive_replay takes 23 arguments");
        return NULL;
    }
    Replay r;
    if (replay_args(args, &r) < 0)
        return NULL;
    PyObject *const *a = args + REPLAY_ARGS;
    npy_intp n = r.d + 1;
    long loss = PyLong_AsLong(a[0]);
    double *w = f64(a[1], n, 1, "w"), *xa = f64(a[2], n, 1, "xa"), *g = f64(a[3], n, 1, "g");
    double *v = f64(a[4], n, 1, "v");
    if (!w || !xa || !g || !v)
        return NULL;
    double lr = PyFloat_AsDouble(a[5]), rho = PyFloat_AsDouble(a[6]);
    double v_eps = PyFloat_AsDouble(a[7]), step_max = PyFloat_AsDouble(a[8]);
    int rmsprop = PyObject_IsTrue(a[9]);
    if (PyErr_Occurred())
        return NULL;
    for (npy_intp i = 0; i < r.k; i++) {
        int status = replay_row(&r, i, w, xa);
        if (status != SKIPPED_SIZE)
            status = adaptive_step(n, r.y[i], (int)loss, w, xa, g, v, lr, rho, v_eps, step_max, rmsprop);
        replay_count(&r, status);
    }
    return Py_BuildValue("(nnn)", r.n_learned, r.skipped, r.scaler_n);
}

/* grad_track(x, y, loss, raw_coef, raw_intercept, mean, inv_scale, bias, xa, g, g2_max, vec, sign,
 *            metric, mg, radius2, robust, added_sum, added_outer) -> True taken, False skipped.
 * DeltaG._gradient + add (sign +1) or the body of remove (sign -1): g = dl/dz(beta_1) x~ in beta_1's
 * training space; a gradient with g.g above g2_max (or not finite) is skipped; vec +/-= g; with a metric
 * M (robust tracking) g is shrunk to g'Mg <= radius2, robust +/-= g, and an added sample also goes
 * into added_sum and added_outer (g g'). mean None: no standardiser; metric None: no robust tracking;
 * added_sum None: do not record the moments (an eviction). */
static PyObject *grad_track(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 19) {
        PyErr_SetString(PyExc_TypeError, "grad_track takes 19 arguments");
        return NULL;
    }
    if (!PyArray_Check(args[0])) {
        PyErr_SetString(LayoutError, "x: expected a numpy array");
        return NULL;
    }
    npy_intp d = PyArray_SIZE((PyArrayObject *)args[0]), n = d + 1;
    int bad = 0;
    const double *x = f64(args[0], d, 0, "x");
    const double *coef = f64(args[3], d, 0, "raw_coef");
    double *mean = f64_or_null(args[5], d, 0, "mean", &bad);
    double *inv_scale = f64(args[6], d, 0, "inv_scale");
    double *xa = f64(args[8], n, 1, "xa"), *g = f64(args[9], n, 1, "g"), *vec = f64(args[11], n, 1, "vec");
    double *metric = f64_or_null(args[13], n * n, 0, "metric", &bad);
    double *mg = metric ? f64(args[14], n, 1, "mg") : NULL;
    double *robust = metric ? f64(args[16], n, 1, "robust") : NULL;
    double *sum = metric ? f64_or_null(args[17], n, 1, "added_sum", &bad) : NULL;
    double *outer = sum ? f64(args[18], n * n, 1, "added_outer") : NULL;
    if (!x || !coef || !inv_scale || !xa || !g || !vec || bad || (metric && !(mg && robust))
        || (sum && !outer))
        return NULL;
    double y = PyFloat_AsDouble(args[1]);
    long loss = PyLong_AsLong(args[2]);
    double intercept = PyFloat_AsDouble(args[4]), bias = PyFloat_AsDouble(args[7]);
    double g2_max = PyFloat_AsDouble(args[10]), sign = PyFloat_AsDouble(args[12]);
    double radius2 = metric ? PyFloat_AsDouble(args[15]) : 0.0;
    if (PyErr_Occurred())
        return NULL;

    double c = loss_dz((int)loss, y, dot(coef, x, d) + intercept);
    if (mean == NULL) {
        for (npy_intp i = 0; i < d; i++)
            xa[i] = x[i];
    } else {
        for (npy_intp i = 0; i < d; i++)
            xa[i] = (x[i] - mean[i]) * inv_scale[i];
    }
    xa[d] = bias;
    for (npy_intp i = 0; i < n; i++)
        g[i] = xa[i] * c;
    if (!(dot(g, g, n) <= g2_max))
        Py_RETURN_FALSE;
    if (sign > 0.0)
        for (npy_intp i = 0; i < n; i++)
            vec[i] += g[i];
    else
        for (npy_intp i = 0; i < n; i++)
            vec[i] -= g[i];
    if (metric == NULL)
        Py_RETURN_TRUE;
    for (npy_intp i = 0; i < n; i++)
        mg[i] = dot(metric + i * n, g, n);
    double q = dot(g, mg, n);
    if (q > radius2) {
        double f = pow(radius2 / q, 0.5);
        for (npy_intp i = 0; i < n; i++)
            g[i] *= f;
    }
    if (sign > 0.0)
        for (npy_intp i = 0; i < n; i++)
            robust[i] += g[i];
    else
        for (npy_intp i = 0; i < n; i++)
            robust[i] -= g[i];
    if (sum != NULL) {
        for (npy_intp i = 0; i < n; i++)
            sum[i] += g[i];
        for (npy_intp i = 0; i < n; i++)
            for (npy_intp k = 0; k < n; k++)
                outer[i * n + k] += g[i] * g[k];
    }
    Py_RETURN_TRUE;
}

/* raw_weights(w, inv_std, mean, raw_w) -> raw_b: raw-space weights of a standardised learner
 * (IncrementalLearner._refresh_raw): raw_w = w[:-1] * inv_std, raw_b = w[-1] - raw_w . mean. */
static PyObject *raw_weights(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4 || !PyArray_Check(args[3])) {
        PyErr_SetString(PyExc_TypeError, "raw_weights(w, inv_std, mean, raw_w) takes four numpy arrays");
        return NULL;
    }
    npy_intp d = PyArray_SIZE((PyArrayObject *)args[3]);
    const double *w = f64(args[0], d + 1, 0, "w"), *inv_std = f64(args[1], d, 0, "inv_std");
    const double *mean = f64(args[2], d, 0, "mean");
    double *raw = f64(args[3], d, 1, "raw_w");
    if (!w || !inv_std || !mean || !raw)
        return NULL;
    for (npy_intp i = 0; i < d; i++)
        raw[i] = w[i] * inv_std[i];
    return PyFloat_FromDouble(w[d] - dot(raw, mean, d));
}

/* whitened_sq(W, v) -> ||W v||^2 for W of shape (k, len(v)). */
static PyObject *whitened_sq(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !PyArray_Check(args[0]) || !PyArray_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "whitened_sq(W, v) takes two numpy arrays");
        return NULL;
    }
    PyArrayObject *Wa = (PyArrayObject *)args[0];
    npy_intp n = PyArray_SIZE((PyArrayObject *)args[1]);
    if (PyArray_NDIM(Wa) != 2 || PyArray_DIM(Wa, 1) != n) {
        PyErr_SetString(PyExc_ValueError, "whitened_sq: W must have shape (k, len(v))");
        return NULL;
    }
    const double *W = f64(args[0], PyArray_SIZE(Wa), 0, "W"), *v = f64(args[1], n, 0, "v");
    if (!W || !v)
        return NULL;
    double s = 0.0;
    for (npy_intp i = 0; i < PyArray_DIM(Wa, 0); i++) {
        double u = dot(W + i * n, v, n);
        s += u * u;
    }
    return PyFloat_FromDouble(s);
}

/* linear_score(w, x, b) -> w . x + b: a linear learner's raw-space prediction (IncrementalLearner.score_one). */
static PyObject *linear_score(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3 || !PyArray_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "linear_score(w, x, b) takes two numpy arrays and a float");
        return NULL;
    }
    npy_intp d = PyArray_SIZE((PyArrayObject *)args[0]);
    const double *w = f64(args[0], d, 0, "w"), *x = f64(args[1], d, 0, "x");
    double b = PyFloat_AsDouble(args[2]);
    if (!w || !x || (b == -1.0 && PyErr_Occurred()))
        return NULL;
    return PyFloat_FromDouble(dot(w, x, d) + b);
}

/* in_range(x, lo, hi) -> lo <= x <= hi elementwise, all of them (a NaN is out of range; RangeGuard). */
static PyObject *in_range(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3 || !PyArray_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "in_range(x, lo, hi) takes three numpy arrays");
        return NULL;
    }
    npy_intp d = PyArray_SIZE((PyArrayObject *)args[1]);
    const double *x = f64(args[0], d, 0, "x"), *lo = f64(args[1], d, 0, "lo"), *hi = f64(args[2], d, 0, "hi");
    if (!x || !lo || !hi)
        return NULL;
    for (npy_intp i = 0; i < d; i++)
        if (!(x[i] >= lo[i] && x[i] <= hi[i]))
            Py_RETURN_FALSE;
    Py_RETURN_TRUE;
}

/* The rows k and columns d of X (a two-dimensional numpy array) and out's data, a writable C-contiguous
 * array of k values of the numpy type `type`; NULL with an error set otherwise. */
static void *rows_and_out(const char *fn, PyObject *X, PyObject *out, int type, const char *type_name,
                          npy_intp *k, npy_intp *d)
{
    if (!PyArray_Check(X) || PyArray_NDIM((PyArrayObject *)X) != 2) {
        PyErr_Format(LayoutError, "%s: X must be a two-dimensional numpy array", fn);
        return NULL;
    }
    *k = PyArray_DIM((PyArrayObject *)X, 0);
    *d = PyArray_DIM((PyArrayObject *)X, 1);
    PyArrayObject *oa = (PyArrayObject *)out;
    if (!PyArray_Check(out) || PyArray_TYPE(oa) != type || !PyArray_IS_C_CONTIGUOUS(oa)
        || PyArray_SIZE(oa) != *k || !PyArray_ISWRITEABLE(oa)) {
        PyErr_Format(LayoutError, "out: expected a writable C-contiguous %s array of len(X)", type_name);
        return NULL;
    }
    return PyArray_DATA(oa);
}

/* rows_outside(X, lo, hi, out) -> how many rows of X (k, d) have a value outside [lo, hi] (or NaN);
 * out (k bools) says which (RangeGuard.outside without labels). */
static PyObject *rows_outside(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "rows_outside(X, lo, hi, out) takes four numpy arrays");
        return NULL;
    }
    npy_intp k, d;
    npy_bool *out = rows_and_out("rows_outside", args[0], args[3], NPY_BOOL, "bool", &k, &d);
    if (out == NULL)
        return NULL;
    const double *X = f64(args[0], k * d, 0, "X"), *lo = f64(args[1], d, 0, "lo"), *hi = f64(args[2], d, 0, "hi");
    if (!X || !lo || !hi)
        return NULL;
    npy_intp bad = 0;
    for (npy_intp r = 0; r < k; r++) {
        const double *x = X + r * d;
        npy_bool o = 0;
        for (npy_intp i = 0; i < d; i++)
            if (!(x[i] >= lo[i] && x[i] <= hi[i])) {
                o = 1;
                break;
            }
        out[r] = o;
        bad += o;
    }
    return PyLong_FromSsize_t((Py_ssize_t)bad);
}

/* linear_scores(w, X, b, out): out[r] = w . X[r] + b for every row of X (k, d), each summed as
 * linear_score sums it, so a row scores bit for bit as one linear_score call (EdgeLoop.process_many's
 * unlabeled runs). */
static PyObject *linear_scores(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "linear_scores(w, X, b, out) takes three numpy arrays and a float");
        return NULL;
    }
    npy_intp k, d;
    double *out = rows_and_out("linear_scores", args[1], args[3], NPY_DOUBLE, "float64", &k, &d);
    if (out == NULL)
        return NULL;
    const double *w = f64(args[0], d, 0, "w"), *X = f64(args[1], k * d, 0, "X");
    double b = PyFloat_AsDouble(args[2]);
    if (!w || !X || (b == -1.0 && PyErr_Occurred()))
        return NULL;
    for (npy_intp r = 0; r < k; r++)
        out[r] = dot(w, X + r * d, d) + b;
    Py_RETURN_NONE;
}

/* A C-contiguous array of exactly n elements of the numpy type `type` (writable if asked), or NULL with an
 * error set. */
static void *typed(PyObject *o, npy_intp n, int type, int writable, const char *name)
{
    PyArrayObject *a = (PyArrayObject *)o;
    if (!PyArray_Check(o) || PyArray_TYPE(a) != type || !PyArray_IS_C_CONTIGUOUS(a) || PyArray_SIZE(a) != n
        || (writable && !PyArray_ISWRITEABLE(a))) {
        PyErr_Format(PyExc_ValueError, "%s: expected a C-contiguous array of %zd elements of its type", name,
                     (Py_ssize_t)n);
        return NULL;
    }
    return PyArray_DATA(a);
}

/* forest_proba_one(x32, feat, thr, child, base, val, m, depth, out): out (m, C) = the leaf probabilities
 * of one row under the trees in slots 0 .. m-1 of a packed forest (PackedForest.proba of one row): each
 * tree descends `depth` steps, node <- child[node] + (x[feat[node]] > thr[node]), with the nodes' absolute
 * indices (slot * cap + node); x is float32 and compared as float64, as numpy compares them. */
static PyObject *forest_proba_one(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 9 || !PyArray_Check(args[0]) || !PyArray_Check(args[1]) || !PyArray_Check(args[4])
        || !PyArray_Check(args[8])) {
        PyErr_SetString(PyExc_TypeError, "forest_proba_one takes 9 arguments (numpy arrays, m, depth, out)");
        return NULL;
    }
    npy_intp d = PyArray_SIZE((PyArrayObject *)args[0]), nodes = PyArray_SIZE((PyArrayObject *)args[1]);
    npy_intp slots = PyArray_SIZE((PyArrayObject *)args[4]);
    Py_ssize_t m = PyLong_AsSsize_t(args[6]), depth = PyLong_AsSsize_t(args[7]);
    if (PyErr_Occurred())
        return NULL;
    npy_intp out_n = PyArray_SIZE((PyArrayObject *)args[8]);
    if (m < 1 || m > slots || out_n % m != 0 || depth < 0) {
        PyErr_SetString(PyExc_ValueError, "forest_proba_one: m, depth or out do not fit the forest");
        return NULL;
    }
    npy_intp C = out_n / m;
    const float *x = typed(args[0], d, NPY_FLOAT32, 0, "x32");
    const npy_intp *feat = typed(args[1], nodes, NPY_INTP, 0, "feat");
    const double *thr = typed(args[2], nodes, NPY_DOUBLE, 0, "thr");
    const npy_intp *child = typed(args[3], nodes, NPY_INTP, 0, "child");
    const npy_intp *base = typed(args[4], slots, NPY_INTP, 0, "base");
    const double *val = typed(args[5], nodes * C, NPY_DOUBLE, 0, "val");
    double *out = typed(args[8], out_n, NPY_DOUBLE, 1, "out");
    if (!x || !feat || !thr || !child || !base || !val || !out)
        return NULL;
    for (npy_intp t = 0; t < m; t++) {
        npy_intp node = base[t];
        for (Py_ssize_t s = 0; s < depth; s++) {
            if (node < 0 || node >= nodes || feat[node] < 0 || feat[node] >= d) {
                PyErr_SetString(PyExc_ValueError, "forest_proba_one: a node or feature out of range");
                return NULL;
            }
            node = child[node] + ((double)x[feat[node]] > thr[node]);
        }
        if (node < 0 || node >= nodes) {
            PyErr_SetString(PyExc_ValueError, "forest_proba_one: a leaf out of range");
            return NULL;
        }
        for (npy_intp c = 0; c < C; c++)
            out[t * C + c] = val[node * C + c];
    }
    Py_RETURN_NONE;
}

/* givens_update(Rf, v, c_out, dg, drot, hypot) -> None: OnlineBLS._rank_one_update's loop of Givens
 * rotations in one call, with the same operations: BLAS drot (the capsule of
 * scipy.linalg.cython_blas.drot, the routine scipy.linalg.blas.drot calls) on row k of R^ (contiguous at
 * offset k (m + 1) of the flat view Rf) and v[k + 1:], and Python's math.hypot (passed in, called as the
 * Python loop calls it) for r; dg (m values) is the diagonal in and out; v is destroyed. */
typedef void (*drot_fn)(int *, double *, int *, double *, int *, double *, double *);

static PyObject *givens_update(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 6 || !PyArray_Check(args[1]) || !PyCapsule_CheckExact(args[4])) {
        PyErr_SetString(PyExc_TypeError, "givens_update(Rf, v, c_out, dg, drot capsule, hypot)");
        return NULL;
    }
    npy_intp m = PyArray_SIZE((PyArrayObject *)args[1]);
    double *R = f64(args[0], m * m, 1, "Rf"), *v = f64(args[1], m, 1, "v");
    double *c_out = f64(args[2], m, 1, "c_out"), *dg = f64(args[3], m, 1, "dg");
    if (!R || !v || !c_out || !dg)
        return NULL;
    drot_fn drot = (drot_fn)PyCapsule_GetPointer(args[4], PyCapsule_GetName(args[4]));
    if (drot == NULL || m < 1 || m > INT_MAX)
        return PyErr_Occurred() ? NULL : (PyErr_SetString(PyExc_ValueError, "givens_update: m"), NULL);
    PyObject *hypot = args[5];
    double w0 = 1.0;
    npy_intp off = 1;
    int one = 1;
    for (npy_intp k = 0; k < m; k++) {
        double vk = v[k];
        if (k < m - 1 && vk == 0.0) {
            c_out[k] = 0.0;
            off += m + 1;
            continue;
        }
        PyObject *a = PyFloat_FromDouble(dg[k]), *b = PyFloat_FromDouble(vk);
        PyObject *res = (a && b) ? PyObject_CallFunctionObjArgs(hypot, a, b, NULL) : NULL;
        Py_XDECREF(a);
        Py_XDECREF(b);
        if (res == NULL)
            return NULL;
        double r = PyFloat_AsDouble(res);
        Py_DECREF(res);
        if (r == -1.0 && PyErr_Occurred())
            return NULL;
        if (k == m - 1) {
            c_out[k] = vk / r * w0;
            dg[k] = r;
            break;
        }
        double rkk = dg[k];
        dg[k] = r;
        double c = rkk / r, s = vk / r;
        c_out[k] = s * w0;
        w0 *= c;
        int n = (int)(m - k - 1);
        drot(&n, R + off, &one, v + k + 1, &one, &c, &s);
        off += m + 1;
    }
    Py_RETURN_NONE;
}

/* grad_track_many(X, y, loss, raw_coef, raw_intercept, mean, inv_scale, bias, g2_max, vec, sign, metric,
 *                 radius2, robust, added_sum, added_outer, R) -> rows skipped.
 * DeltaG.add_many (sign +1) or remove_many (sign -1) of the rows of X (k, d): the gradients G of
 * DeltaG._gradients (a row with g.g above g2_max, or not finite, is zero and counted), vec +/-= their sum;
 * R (k, d + 1) gets the rows clipped as DeltaG.clip does (G itself without a metric); with a metric
 * robust +/-= R's sum and, when added_sum is given, added_sum += R's sum, added_outer += R'R. As numpy
 * does, each sum is formed first (row by row) and then added to the state. */
static PyObject *grad_track_many(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 17) {
        PyErr_SetString(PyExc_TypeError, "grad_track_many takes 17 arguments");
        return NULL;
    }
    if (!PyArray_Check(args[0]) || PyArray_NDIM((PyArrayObject *)args[0]) != 2) {
        PyErr_SetString(LayoutError, "X: expected a two-dimensional numpy array");
        return NULL;
    }
    npy_intp k = PyArray_DIM((PyArrayObject *)args[0], 0), d = PyArray_DIM((PyArrayObject *)args[0], 1);
    npy_intp n = d + 1;
    int bad = 0;
    const double *X = f64(args[0], k * d, 0, "X"), *y = f64(args[1], k, 0, "y");
    const double *coef = f64(args[3], d, 0, "raw_coef");
    double *mean = f64_or_null(args[5], d, 0, "mean", &bad);
    double *inv_scale = f64(args[6], d, 0, "inv_scale");
    double *vec = f64(args[9], n, 1, "vec");
    double *metric = f64_or_null(args[11], n * n, 0, "metric", &bad);
    double *robust = metric ? f64(args[13], n, 1, "robust") : NULL;
    double *sum = metric ? f64_or_null(args[14], n, 1, "added_sum", &bad) : NULL;
    double *outer = sum ? f64(args[15], n * n, 1, "added_outer") : NULL;
    double *R = f64(args[16], k * n, 1, "R");
    if (!X || !y || !coef || !inv_scale || !vec || bad || (metric && !robust) || (sum && !outer) || !R)
        return NULL;
    long loss = PyLong_AsLong(args[2]);
    double intercept = PyFloat_AsDouble(args[4]), bias = PyFloat_AsDouble(args[7]);
    double g2_max = PyFloat_AsDouble(args[8]), sign = PyFloat_AsDouble(args[10]);
    double radius2 = metric ? PyFloat_AsDouble(args[12]) : 0.0;
    if (PyErr_Occurred())
        return NULL;
    double *gsum = PyMem_Calloc(3 * (size_t)n, sizeof(double)), *rsum = gsum + n, *mg = rsum + n;
    if (gsum == NULL)
        return PyErr_NoMemory();
    npy_intp skipped = 0;
    for (npy_intp r = 0; r < k; r++) {
        const double *x = X + r * d;
        double *g = R + r * n;
        double c = loss_dz((int)loss, y[r], dot(coef, x, d) + intercept);
        if (mean == NULL)
            for (npy_intp i = 0; i < d; i++)
                g[i] = x[i] * c;
        else
            for (npy_intp i = 0; i < d; i++)
                g[i] = ((x[i] - mean[i]) * inv_scale[i]) * c;
        g[d] = bias * c;
        if (!(dot(g, g, n) <= g2_max)) {
            for (npy_intp i = 0; i < n; i++)
                g[i] = 0.0;
            skipped++;
            continue;
        }
        for (npy_intp i = 0; i < n; i++)
            gsum[i] += g[i];
        if (metric == NULL)
            continue;
        for (npy_intp i = 0; i < n; i++)
            mg[i] = dot(metric + i * n, g, n);
        double q = dot(g, mg, n);
        if (q > radius2) {
            double f = sqrt(radius2 / q);
            for (npy_intp i = 0; i < n; i++)
                g[i] *= f;
        }
        for (npy_intp i = 0; i < n; i++)
            rsum[i] += g[i];
    }
    for (npy_intp i = 0; i < n; i++)
        vec[i] += sign * gsum[i];
    if (metric != NULL) {
        for (npy_intp i = 0; i < n; i++)
            robust[i] += sign * rsum[i];
        if (sum != NULL) {
            for (npy_intp i = 0; i < n; i++)
                sum[i] += rsum[i];
            for (npy_intp i = 0; i < n; i++)
                for (npy_intp j = 0; j < n; j++) {
                    double s = 0.0;
                    for (npy_intp r = 0; r < k; r++)
                        s += R[r * n + i] * R[r * n + j];
                    outer[i * n + j] += s;
                }
        }
    }
    PyMem_Free(gsum);
    return PyLong_FromSsize_t((Py_ssize_t)skipped);
}

/* druid_steps(before, R_add, R_ev, W, n_added, n_evicted, n_orig, min_labels, threshold, carry)
 *   -> (tests, exceedances, last statistic, run at the end, longest run)
 * DruidMonitor.update_many's test at every step t = 1..k of a batch: the robust Delta g after step t is
 * before + (R_add rows 1..t) - (R_ev rows evicted by then; the evictions are the batch's last len(R_ev)
 * steps, monitors.base.eviction_steps), its statistic ||W v||^2 / (|D_A| + |D_R|) (DeltaG.counts_after
 * from the batch's starting n_added, n_evicted, n_orig), tested once n_added + t >= min_labels; the run
 * of exceedances continues from carry (consecutive_counts). tests == 0: nothing was tested. */
static PyObject *druid_steps(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 10) {
        PyErr_SetString(PyExc_TypeError, "druid_steps takes 10 arguments");
        return NULL;
    }
    for (int a = 0; a < 4; a++)
        if (!PyArray_Check(args[a])) {
            PyErr_SetString(PyExc_TypeError, "druid_steps: the first four arguments must be numpy arrays");
            return NULL;
        }
    npy_intp n = PyArray_SIZE((PyArrayObject *)args[0]);
    PyArrayObject *Wa = (PyArrayObject *)args[3];
    if (n < 1 || PyArray_NDIM(Wa) != 2 || PyArray_DIM(Wa, 1) != n) {
        PyErr_SetString(PyExc_ValueError, "druid_steps: W must have shape (r, len(before))");
        return NULL;
    }
    npy_intp k = PyArray_SIZE((PyArrayObject *)args[1]) / n, m = PyArray_SIZE((PyArrayObject *)args[2]) / n;
    npy_intp rows = PyArray_DIM(Wa, 0);
    const double *before = f64(args[0], n, 0, "before"), *R_add = f64(args[1], k * n, 0, "R_add");
    const double *R_ev = f64(args[2], m * n, 0, "R_ev"), *W = f64(args[3], rows * n, 0, "W");
    if (!before || !R_add || !R_ev || !W)
        return NULL;
    long long n_added = PyLong_AsLongLong(args[4]), n_evicted = PyLong_AsLongLong(args[5]);
    long long n_orig = PyLong_AsLongLong(args[6]), min_labels = PyLong_AsLongLong(args[7]);
    double threshold = PyFloat_AsDouble(args[8]);
    long long run = PyLong_AsLongLong(args[9]);
    if (PyErr_Occurred())
        return NULL;
    if (m > k) {
        PyErr_SetString(PyExc_ValueError, "druid_steps: more evictions than steps");
        return NULL;
    }
    double *cs_add = PyMem_Calloc(2 * (size_t)n, sizeof(double)), *cs_ev = cs_add + n;
    if (cs_add == NULL)
        return PyErr_NoMemory();
    long long tests = 0, exceedances = 0, longest = 0;
    double stat = 0.0;
    for (npy_intp t = 1; t <= k; t++) {
        const double *ra = R_add + (t - 1) * n;
        for (npy_intp i = 0; i < n; i++)
            cs_add[i] += ra[i];
        long long ev = t - (k - m) > 0 ? t - (k - m) : 0;
        if (ev > 0) {
            const double *re = R_ev + (ev - 1) * n;
            for (npy_intp i = 0; i < n; i++)
                cs_ev[i] += re[i];
        }
        if (n_added + t < min_labels)
            continue;
        long long evicted = n_evicted + ev;
        long long removed = evicted < n_orig ? evicted : n_orig;
        long long gone = evicted - n_orig > 0 ? evicted - n_orig : 0;
        double count = (double)(removed + n_added + t - gone);
        double s = 0.0;
        for (npy_intp r = 0; r < rows; r++) {
            const double *wr = W + r * n;
            double u = 0.0;
            for (npy_intp i = 0; i < n; i++)
                u += wr[i] * ((before[i] + cs_add[i]) - cs_ev[i]);
            s += u * u;
        }
        stat = s / count;
        tests++;
        if (stat > threshold) {
            exceedances++;
            run++;
            if (run > longest)
                longest = run;
        } else
            run = 0;
    }
    PyMem_Free(cs_add);
    return Py_BuildValue("(LLdLL)", tests, exceedances, stat, run, longest);
}

/* sample_columns(items, d, classification, next_seq, unset, X, y, ts) -> the ids, or None.
 * The columns of a decoded batch (edgedrift_edge.session.messages._fast): items are objects with attributes x (a
 * list of d floats), id (an int or str, or unset: next_seq + its position), y and ts (a float or None:
 * NaN); X (n, d), y and ts (n) are filled. None, with the arrays partly written, when a row is not d
 * floats or, for classification, a label is not -1 or +1: the caller then reads the message the general
 * way. */
static PyObject *sample_columns(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    static PyObject *s_x = NULL, *s_id = NULL, *s_y = NULL, *s_ts = NULL;
    if (s_x == NULL) {
        s_x = PyUnicode_InternFromString("x");
        s_id = PyUnicode_InternFromString("id");
        s_y = PyUnicode_InternFromString("y");
        s_ts = PyUnicode_InternFromString("ts");
        if (!s_x || !s_id || !s_y || !s_ts)
            return NULL;
    }
    if (nargs != 8 || !PyList_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError,
                        "sample_columns(items, d, classification, next_seq, unset, X, y, ts) takes a list first");
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(args[0]), d = PyLong_AsSsize_t(args[1]);
    int classification = PyObject_IsTrue(args[2]);
    long long next_seq = PyLong_AsLongLong(args[3]);
    if (PyErr_Occurred())
        return NULL;
    double *X = f64(args[5], n * d, 1, "X"), *y = f64(args[6], n, 1, "y"), *ts = f64(args[7], n, 1, "ts");
    if (!X || !y || !ts)
        return NULL;
    PyObject *unset = args[4];
    PyObject *ids = PyList_New(n);
    if (ids == NULL)
        return NULL;
    for (Py_ssize_t k = 0; k < n; k++) {
        PyObject *item = PyList_GET_ITEM(args[0], k);
        PyObject *x = PyObject_GetAttr(item, s_x);
        if (x == NULL)
            goto fail;
        int ok = PyList_Check(x) && PyList_GET_SIZE(x) == d;
        for (Py_ssize_t i = 0; ok && i < d; i++) {
            PyObject *v = PyList_GET_ITEM(x, i);
            if (PyFloat_CheckExact(v))
                X[k * d + i] = PyFloat_AS_DOUBLE(v);
            else
                ok = 0;
        }
        Py_DECREF(x);
        PyObject *values[2] = {NULL, NULL};
        PyObject *names[2] = {s_y, s_ts};
        double *columns[2] = {y, ts};
        for (int c = 0; ok && c < 2; c++) {
            values[c] = PyObject_GetAttr(item, names[c]);
            if (values[c] == NULL) {
                Py_XDECREF(values[0]);
                goto fail;
            }
            if (values[c] == Py_None)
                columns[c][k] = NAN;
            else if (PyFloat_CheckExact(values[c]))
                columns[c][k] = PyFloat_AS_DOUBLE(values[c]);
            else
                ok = 0;
        }
        Py_XDECREF(values[0]);
        Py_XDECREF(values[1]);
        if (ok && classification && !isnan(y[k]) && y[k] != 1.0 && y[k] != -1.0)
            ok = 0;
        if (!ok) {
            Py_DECREF(ids);
            Py_RETURN_NONE;
        }
        PyObject *sid = PyObject_GetAttr(item, s_id);
        if (sid == NULL)
            goto fail;
        if (sid == unset) {
            Py_DECREF(sid);
            sid = PyLong_FromLongLong(next_seq + k);
            if (sid == NULL)
                goto fail;
        }
        PyList_SET_ITEM(ids, k, sid);
    }
    return ids;
fail:
    Py_DECREF(ids);
    return NULL;
}

/* --- the id table of edgedrift_edge.buffers.id_index ------------------------------------------------------------
 * A power-of-two table of slot + 1 (0 = empty), int16 or int32; the ids' words in two uint64 arrays indexed
 * by slot; an id's home is the top bits of (key ^ check) * golden (Fibonacci hashing, IdIndex). */

#define GOLDEN 0x9E3779B97F4A7C15ULL

typedef struct {
    char *table;
    int wide; /* int32 entries, else int16 */
    npy_intp size;
    const npy_uint64 *keys, *checks;
    npy_intp slots;
} IdTable;

static npy_intp tget(const IdTable *t, npy_intp pos)
{
    return t->wide ? ((npy_int32 *)t->table)[pos] : ((npy_int16 *)t->table)[pos];
}

static void tset(IdTable *t, npy_intp pos, npy_intp value)
{
    if (t->wide)
        ((npy_int32 *)t->table)[pos] = (npy_int32)value;
    else
        ((npy_int16 *)t->table)[pos] = (npy_int16)value;
}

static int words(PyObject *o, const npy_uint64 **out, npy_intp *n, const char *name)
{
    if (!PyArray_Check(o) || PyArray_TYPE((PyArrayObject *)o) != NPY_UINT64 ||
        !PyArray_IS_C_CONTIGUOUS((PyArrayObject *)o)) {
        PyErr_Format(LayoutError, "%s: expected a C-contiguous uint64 array", name);
        return 0;
    }
    *out = (const npy_uint64 *)PyArray_DATA((PyArrayObject *)o);
    *n = PyArray_SIZE((PyArrayObject *)o);
    return 1;
}

/* The table (args[0]) and, with with_words, the slots' words (args[1], args[2]). */
static int id_table(PyObject *const *args, IdTable *t, int with_words)
{
    PyArrayObject *a = (PyArrayObject *)args[0];
    if (!PyArray_Check(args[0]) || !PyArray_IS_C_CONTIGUOUS(a) || !PyArray_ISWRITEABLE(a) ||
        (PyArray_TYPE(a) != NPY_INT16 && PyArray_TYPE(a) != NPY_INT32)) {
        PyErr_SetString(LayoutError, "table: expected a writable C-contiguous int16 or int32 array");
        return 0;
    }
    t->table = PyArray_DATA(a);
    t->wide = PyArray_TYPE(a) == NPY_INT32;
    t->size = PyArray_SIZE(a);
    if (t->size < 1 || (t->size & (t->size - 1))) {
        PyErr_SetString(PyExc_ValueError, "table: its size must be a power of two");
        return 0;
    }
    t->keys = t->checks = NULL;
    t->slots = 0;
    if (with_words) {
        npy_intp nc;
        if (!words(args[1], &t->keys, &t->slots, "keys") || !words(args[2], &t->checks, &nc, "checks"))
            return 0;
        if (nc < t->slots) {
            PyErr_SetString(PyExc_ValueError, "checks: fewer words than keys");
            return 0;
        }
    }
    return 1;
}

static npy_intp home(npy_uint64 key, npy_uint64 check, int shift)
{
    return (npy_intp)(((key ^ check) * GOLDEN) >> shift);
}

/* The slot of (key, check), or -1; -2 when the table holds a slot beyond the words (a caller's bug). */
static npy_intp find(const IdTable *t, npy_uint64 key, npy_uint64 check, int shift)
{
    npy_intp mask = t->size - 1, pos = home(key, check, shift);
    for (npy_intp probes = 0; probes < t->size; probes++) {
        npy_intp s = tget(t, pos);
        if (s == 0)
            return -1;
        if (s > t->slots)
            return -2;
        if (t->keys[s - 1] == key && t->checks[s - 1] == check)
            return s - 1;
        pos = (pos + 1) & mask;
    }
    return -1;
}

/* Put slot + 1 at the first empty position from the home of (key, check); 0 with an error set when full. */
static int put(IdTable *t, npy_intp slot, npy_uint64 key, npy_uint64 check, int shift)
{
    npy_intp mask = t->size - 1, pos = home(key, check, shift);
    for (npy_intp probes = 0; tget(t, pos); probes++) {
        if (probes == t->size) {
            PyErr_SetString(PyExc_ValueError, "table: full");
            return 0;
        }
        pos = (pos + 1) & mask;
    }
    tset(t, pos, slot + 1);
    return 1;
}

static int get_word(PyObject *o, npy_uint64 *out, const char *name)
{
    unsigned long long v = PyLong_AsUnsignedLongLong(o);
    if (v == (unsigned long long)-1 && PyErr_Occurred()) {
        PyErr_Format(PyExc_ValueError, "%s: expected an int in [0, 2**64)", name);
        return 0;
    }
    *out = (npy_uint64)v;
    return 1;
}

static int get_shift(PyObject *o, const IdTable *t, int *out)
{
    long v = PyLong_AsLong(o);
    if (v == -1 && PyErr_Occurred())
        return 0;
    if (v < 1 || v > 63 || ((npy_uint64)1 << (64 - v)) != (npy_uint64)t->size) {
        PyErr_SetString(PyExc_ValueError, "shift: must be 64 - log2(table size)");
        return 0;
    }
    *out = (int)v;
    return 1;
}

/* id_find(table, keys, checks, key, check, shift) -> the slot of the id, or -1 (IdIndex.find). */
static PyObject *id_find(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    IdTable t;
    npy_uint64 key, check;
    int shift;
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "id_find(table, keys, checks, key, check, shift)");
        return NULL;
    }
    if (!id_table(args, &t, 1) || !get_word(args[3], &key, "key") || !get_word(args[4], &check, "check") ||
        !get_shift(args[5], &t, &shift))
        return NULL;
    npy_intp slot = find(&t, key, check, shift);
    if (slot == -2) {
        PyErr_SetString(PyExc_ValueError, "table: an entry points past the words");
        return NULL;
    }
    return PyLong_FromSsize_t(slot);
}

/* id_find_many(table, keys, checks, qkeys, qchecks, shift, out): out[i] = the slot of (qkeys[i],
 * qchecks[i]) or -1 (IdIndex.find_many); out is an int64 array of len(qkeys). */
static PyObject *id_find_many(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    IdTable t;
    const npy_uint64 *qk, *qc;
    npy_intp n, nc;
    int shift;
    if (nargs != 7) {
        PyErr_SetString(PyExc_TypeError, "id_find_many(table, keys, checks, qkeys, qchecks, shift, out)");
        return NULL;
    }
    if (!id_table(args, &t, 1) || !words(args[3], &qk, &n, "qkeys") || !words(args[4], &qc, &nc, "qchecks") ||
        !get_shift(args[5], &t, &shift))
        return NULL;
    PyArrayObject *o = (PyArrayObject *)args[6];
    if (nc != n || !PyArray_Check(args[6]) || PyArray_TYPE(o) != NPY_INT64 || !PyArray_IS_C_CONTIGUOUS(o) ||
        !PyArray_ISWRITEABLE(o) || PyArray_SIZE(o) != n) {
        PyErr_SetString(PyExc_ValueError, "id_find_many: qchecks and out (int64) must match qkeys");
        return NULL;
    }
    npy_int64 *out = (npy_int64 *)PyArray_DATA(o);
    for (npy_intp i = 0; i < n; i++) {
        npy_intp slot = find(&t, qk[i], qc[i], shift);
        if (slot == -2) {
            PyErr_SetString(PyExc_ValueError, "table: an entry points past the words");
            return NULL;
        }
        out[i] = slot;
    }
    Py_RETURN_NONE;
}

/* id_place(table, slot, key, check, shift): put slot + 1 at the first empty position from the id's home
 * (IdIndex._place; the table must have an empty position). */
static PyObject *id_place(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    IdTable t;
    npy_uint64 key, check;
    int shift;
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "id_place(table, slot, key, check, shift)");
        return NULL;
    }
    if (!id_table(args, &t, 0))
        return NULL;
    Py_ssize_t slot = PyLong_AsSsize_t(args[1]);
    if (slot == -1 && PyErr_Occurred())
        return NULL;
    npy_intp limit = t.wide ? NPY_MAX_INT32 : NPY_MAX_INT16;
    if (slot < 0 || slot + 1 > limit) {
        PyErr_SetString(PyExc_ValueError, "slot: out of the table's range");
        return NULL;
    }
    if (!get_word(args[2], &key, "key") || !get_word(args[3], &check, "check") || !get_shift(args[4], &t, &shift))
        return NULL;
    if (!put(&t, slot, key, check, shift))
        return NULL;
    Py_RETURN_NONE;
}

static npy_int64 *slot_array(PyObject *o, npy_intp *n)
{
    PyArrayObject *a = (PyArrayObject *)o;
    if (!PyArray_Check(o) || PyArray_TYPE(a) != NPY_INT64 || !PyArray_IS_C_CONTIGUOUS(a)) {
        PyErr_SetString(LayoutError, "slots: expected a C-contiguous int64 array");
        return NULL;
    }
    *n = PyArray_SIZE(a);
    return (npy_int64 *)PyArray_DATA(a);
}

/* Put slot + 1 at the first empty position from its id's home, by the words in the table's arrays. */
static int place(IdTable *t, npy_intp slot, int shift)
{
    return put(t, slot, t->keys[slot], t->checks[slot], shift);
}

/* Delete slot, shifting the rest of its probe run back; 0 with an error set on an inconsistent table. */
static int unplace(IdTable *t, npy_intp slot, int shift)
{
    npy_intp mask = t->size - 1, hole = home(t->keys[slot], t->checks[slot], shift), probes = 0;
    while (tget(t, hole) != slot + 1) {
        if (++probes == t->size) {
            PyErr_SetString(PyExc_ValueError, "slot: not in the table");
            return 0;
        }
        hole = (hole + 1) & mask;
    }
    npy_intp pos = hole;
    for (;;) {
        pos = (pos + 1) & mask;
        npy_intp s = tget(t, pos);
        if (s == 0)
            break;
        if (s > t->slots) {
            PyErr_SetString(PyExc_ValueError, "table: an entry points past the words");
            return 0;
        }
        npy_intp h = home(t->keys[s - 1], t->checks[s - 1], shift);
        if (((pos - h) & mask) >= ((pos - hole) & mask)) { /* its home is not after the hole */
            tset(t, hole, s);
            hole = pos;
        }
    }
    tset(t, hole, 0);
    return 1;
}

/* id_place_many(table, keys, checks, slots, shift) / id_unplace_many(...): place or delete each slot
 * of the int64 array ``slots``, in order (IdIndex._place / IdIndex._unplace), by the slots' words. */
static PyObject *place_or_unplace_many(PyObject *const *args, Py_ssize_t nargs, int placing)
{
    IdTable t;
    int shift;
    npy_intp n;
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "id_(un)place_many(table, keys, checks, slots, shift)");
        return NULL;
    }
    if (!id_table(args, &t, 1) || !get_shift(args[4], &t, &shift))
        return NULL;
    npy_int64 *slots = slot_array(args[3], &n);
    if (slots == NULL)
        return NULL;
    npy_intp limit = t.wide ? NPY_MAX_INT32 : NPY_MAX_INT16;
    for (npy_intp i = 0; i < n; i++) {
        if (slots[i] < 0 || slots[i] >= t.slots || slots[i] + 1 > limit) {
            PyErr_SetString(PyExc_ValueError, "slots: past the words or the table's range");
            return NULL;
        }
        if (!(placing ? place(&t, slots[i], shift) : unplace(&t, slots[i], shift)))
            return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *id_place_many(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    return place_or_unplace_many(args, nargs, 1);
}

static PyObject *id_unplace_many(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    return place_or_unplace_many(args, nargs, 0);
}

/* id_unplace(table, keys, checks, slot, shift): delete slot from the table, shifting the rest of its probe
 * run back, no tombstones (IdIndex._unplace). */
static PyObject *id_unplace(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    IdTable t;
    int shift;
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "id_unplace(table, keys, checks, slot, shift)");
        return NULL;
    }
    if (!id_table(args, &t, 1) || !get_shift(args[4], &t, &shift))
        return NULL;
    Py_ssize_t slot = PyLong_AsSsize_t(args[3]);
    if (slot == -1 && PyErr_Occurred())
        return NULL;
    if (slot < 0 || slot >= t.slots) {
        PyErr_SetString(PyExc_ValueError, "slot: past the words");
        return NULL;
    }
    if (!unplace(&t, slot, shift))
        return NULL;
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"newton_learn", (PyCFunction)(void (*)(void))newton_learn, METH_FASTCALL,
     "Standardiser update, x~ and one forgetting-Newton step (see edgedrift.kernels)."},
    {"newton_learn_many", (PyCFunction)(void (*)(void))newton_learn_many, METH_FASTCALL,
     "Size filter, standardiser update, x~ and one forgetting-Newton step of a batch (edgedrift.kernels)."},
    {"adaptive_learn", (PyCFunction)(void (*)(void))adaptive_learn, METH_FASTCALL,
     "Standardiser update, x~ and one RMSProp/AdaGrad step (see edgedrift.kernels)."},
    {"newton_replay", (PyCFunction)(void (*)(void))newton_replay, METH_FASTCALL,
     "Prequential replay of a forgetting-Newton learner: each row's score, then its step."},
    {"adaptive_replay", (PyCFunction)(void (*)(void))adaptive_replay, METH_FASTCALL,
     "Prequential replay of an RMSProp/AdaGrad learner: each row's score, then its step."},
    {"grad_track", (PyCFunction)(void (*)(void))grad_track, METH_FASTCALL,
     "Add or remove one sample's gradient in Delta g (see edgedrift.kernels)."},
    {"raw_weights", (PyCFunction)(void (*)(void))raw_weights, METH_FASTCALL,
     "Raw-space weights of a standardised learner; returns the intercept."},
    {"whitened_sq", (PyCFunction)(void (*)(void))whitened_sq, METH_FASTCALL, "||W v||^2."},
    {"linear_score", (PyCFunction)(void (*)(void))linear_score, METH_FASTCALL, "w . x + b."},
    {"linear_scores", (PyCFunction)(void (*)(void))linear_scores, METH_FASTCALL,
     "w . x + b for every row, each as linear_score."},
    {"forest_proba_one", (PyCFunction)(void (*)(void))forest_proba_one, METH_FASTCALL,
     "Leaf probabilities of one row under the first m trees of a packed forest."},
    {"givens_update", (PyCFunction)(void (*)(void))givens_update, METH_FASTCALL,
     "Online-BLS's rank-one Cholesky update by Givens rotations (BLAS drot)."},
    {"in_range", (PyCFunction)(void (*)(void))in_range, METH_FASTCALL, "All of lo <= x <= hi."},
    {"rows_outside", (PyCFunction)(void (*)(void))rows_outside, METH_FASTCALL,
     "Which rows have a value outside [lo, hi]; how many."},
    {"grad_track_many", (PyCFunction)(void (*)(void))grad_track_many, METH_FASTCALL,
     "Add or remove a batch of samples' gradients in Delta g (see edgedrift.kernels)."},
    {"druid_steps", (PyCFunction)(void (*)(void))druid_steps, METH_FASTCALL,
     "DRUiD's test at every step of a batch (see edgedrift.kernels)."},
    {"sample_columns", (PyCFunction)(void (*)(void))sample_columns, METH_FASTCALL,
     "The ids and the x, y, ts columns of a decoded batch of samples."},
    {"id_find", (PyCFunction)(void (*)(void))id_find, METH_FASTCALL, "The slot of an id, or -1."},
    {"id_find_many", (PyCFunction)(void (*)(void))id_find_many, METH_FASTCALL, "id_find for many ids."},
    {"id_place", (PyCFunction)(void (*)(void))id_place, METH_FASTCALL, "Put a slot in the id table."},
    {"id_unplace", (PyCFunction)(void (*)(void))id_unplace, METH_FASTCALL,
     "Delete a slot from the id table (backward shift)."},
    {"id_place_many", (PyCFunction)(void (*)(void))id_place_many, METH_FASTCALL,
     "id_place for many slots, by their words."},
    {"id_unplace_many", (PyCFunction)(void (*)(void))id_unplace_many, METH_FASTCALL,
     "id_unplace for many slots."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "edgedrift._kernels",
                                    "Compiled per-sample kernels of the edge loop.", -1, methods};

PyMODINIT_FUNC PyInit__kernels(void)
{
    import_array();
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    LayoutError = PyErr_NewExceptionWithDoc(
        "edgedrift._kernels.LayoutError",
        "An argument the kernel does not take as it is (the caller runs the numpy code instead).",
        PyExc_ValueError, NULL);
    if (LayoutError == NULL || PyModule_AddObjectRef(m, "LayoutError", LayoutError) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
