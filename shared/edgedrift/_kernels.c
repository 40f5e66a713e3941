/* Compiled kernels for the per-labeled-sample hot paths of the edge loop (edgedrift.kernels).
 *
 * Each function does in one call what the numpy reference does in 10-25 small numpy calls, on the
 * caller's preallocated float64 arrays, in the same order of operations; only the dot products may sum
 * in another order than BLAS, so results agree with the numpy path to rounding (tests/unit/test_kernels.py).
 *
 *   newton_learn    EWStandardizer.update + x~ + ForgettingNewton._update   (learners/second_order.py)
 *   adaptive_learn  EWStandardizer.update + x~ + AdaptiveSGD._update        (learners/adaptive.py)
 *   grad_track      DeltaG.add / DeltaG.remove of one sample                (monitors/gradient.py)
 *   raw_weights     the learner's weights in raw feature space              (learners/base.py)
 *   whitened_sq     ||W v||^2, DruidMonitor's statistic before the count    (monitors/druid.py)
 */
#define PY_SSIZE_T_CLEAN
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#include <Python.h>
#include <math.h>
#include <numpy/arrayobject.h>

enum { LOSS_LOGISTIC = 0, LOSS_SQUARED_HINGE = 1, LOSS_SQUARED = 2 };
/* Return codes of the learners: learned, skipped before anything changed (size), step not taken. */
enum { LEARNED = 0, SKIPPED_SIZE = 1, SKIPPED_STEP = 2 };

/* A C-contiguous float64 array of exactly n elements (writable if asked), or NULL with an error set. */
static double *f64(PyObject *o, npy_intp n, int writable, const char *name)
{
    if (PyErr_Occurred()) /* report the first bad argument */
        return NULL;
    if (!PyArray_Check(o)) {
        PyErr_Format(PyExc_TypeError, "%s: expected a numpy array", name);
        return NULL;
    }
    PyArrayObject *a = (PyArrayObject *)o;
    if (PyArray_TYPE(a) != NPY_DOUBLE || !PyArray_IS_C_CONTIGUOUS(a) || PyArray_SIZE(a) != n) {
        PyErr_Format(PyExc_ValueError, "%s: expected a C-contiguous float64 array of %zd values", name,
                     (Py_ssize_t)n);
        return NULL;
    }
    if (writable && !PyArray_ISWRITEABLE(a)) {
        PyErr_Format(PyExc_ValueError, "%s: array is read-only", name);
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

/* The learners' common first half (IncrementalLearner.learn_one): skip a sample with ||x||^2 + y^2
 * above max_sq (or not finite), then the standardiser's update with weight a (EWStandardizer.update),
 * then x~ = ((x - mean) * inv_std, 1) into xa. mean == NULL: no standardiser, x~ = (x, 1). */
static int prepare(const double *x, npy_intp d, double y, double max_sq, double *mean, double *var,
                   double *inv_std, double *delta, double a, double eps, double *xa)
{
    if (!(dot(x, x, d) + y * y <= max_sq))
        return SKIPPED_SIZE;
    if (mean == NULL) {
        for (npy_intp i = 0; i < d; i++)
            xa[i] = x[i];
    } else {
        for (npy_intp i = 0; i < d; i++)
            delta[i] = x[i] - mean[i];
        for (npy_intp i = 0; i < d; i++)
            mean[i] += a * delta[i];
        for (npy_intp i = 0; i < d; i++) {
            var[i] += a * delta[i] * delta[i];
            var[i] *= 1.0 - a;
            inv_std[i] = 1.0 / sqrt(var[i] + eps);
        }
        for (npy_intp i = 0; i < d; i++)
            xa[i] = (x[i] - mean[i]) * inv_std[i];
    }
    xa[d] = 1.0;
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
        PyErr_SetString(PyExc_TypeError, "x: expected a numpy array");
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
    double c = loss_dz((int)loss, y, z);
    double h = loss_d2z((int)loss, y, z);
    if (h_min > h) /* Python's max(h, h_min) */
        h = h_min;
    for (npy_intp i = 0; i < n; i++)
        Px[i] = dot(P + i * n, xa, n);
    double denom = 1.0 / h + dot(xa, Px, n);
    if (!(0.0 < denom && denom < INFINITY))
        return PyLong_FromLong(SKIPPED_STEP);
    double step = c / (h * denom);
    if (!(fabs(step) <= step_max))
        return PyLong_FromLong(SKIPPED_STEP);
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
    return PyLong_FromLong(LEARNED);
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
        PyErr_SetString(PyExc_TypeError, "x: expected a numpy array");
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
    double c = loss_dz((int)loss, y, dot(xa, w, n));
    if (!(fabs(c) <= step_max))
        return PyLong_FromLong(SKIPPED_STEP);
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
    return PyLong_FromLong(LEARNED);
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
        PyErr_SetString(PyExc_TypeError, "x: expected a numpy array");
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

static PyMethodDef methods[] = {
    {"newton_learn", (PyCFunction)(void (*)(void))newton_learn, METH_FASTCALL,
     "Standardiser update, x~ and one forgetting-Newton step (see edgedrift.kernels)."},
    {"adaptive_learn", (PyCFunction)(void (*)(void))adaptive_learn, METH_FASTCALL,
     "Standardiser update, x~ and one RMSProp/AdaGrad step (see edgedrift.kernels)."},
    {"grad_track", (PyCFunction)(void (*)(void))grad_track, METH_FASTCALL,
     "Add or remove one sample's gradient in Delta g (see edgedrift.kernels)."},
    {"raw_weights", (PyCFunction)(void (*)(void))raw_weights, METH_FASTCALL,
     "Raw-space weights of a standardised learner; returns the intercept."},
    {"whitened_sq", (PyCFunction)(void (*)(void))whitened_sq, METH_FASTCALL, "||W v||^2."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "edgedrift._kernels",
                                    "Compiled per-sample kernels of the edge loop.", -1, methods};

PyMODINIT_FUNC PyInit__kernels(void)
{
    import_array();
    return PyModule_Create(&module);
}
