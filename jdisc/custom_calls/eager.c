/* jdisc's eager call path in C: one call from Python per jdisc call.
 *
 * call(plan, args[, given]) checks each argument (a single-device CPU jax.Array, or a C-contiguous
 * numpy array, of the compiled dtype and rank), reads its shape and data address, binds the
 * dimension variables (the program's jd_prepare, which checks every shape), allocates the
 * outputs as numpy arrays and runs the program (jd_run, without the GIL). It returns the
 * outputs, or None when an argument needs the general path in Python (anything else: Python
 * scalars, other dtypes, non-contiguous arrays, a deleted array...), which then reports
 * what is wrong. `given` (optional, one entry per output, None or a numpy array) supplies an
 * output's buffer (a donated input's), used when its shape and dtype are the output's. Built
 * once per Python and numpy version (custom_calls/eager.py).
 *
 * plan = (jd_prepare address, jd_run address, number of dimension variables, the jax.Array
 *         type, input dtypes, input ranks, output dtypes, output ranks, the exception raised
 *         for a failed shape check, the exception raised for a failed run)
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#include <numpy/arrayobject.h>
#include <stdint.h>

typedef int (*prepare_fn)(const int64_t *, int64_t *, int64_t *, char *, int64_t);
typedef int (*run_fn)(const int64_t *, void *const *, void *const *, char *, int64_t);

enum { MAX_IO = 64, MAX_DIMS = 512, ERR_LEN = 2048 };

/* The data address and shape of one argument; 0 on success, 1 for "take the general path",
 * -1 with a Python exception set. */
static int argument(PyObject *x, PyObject *array_type, PyObject *dtype, Py_ssize_t rank,
                    void **data, int64_t *shape) {
    if (PyArray_Check(x)) {
        PyArrayObject *a = (PyArrayObject *)x;
        if (PyArray_NDIM(a) != rank || !PyArray_IS_C_CONTIGUOUS(a) ||
                !PyArray_EquivTypes(PyArray_DESCR(a), (PyArray_Descr *)dtype))
            return 1;
        for (Py_ssize_t i = 0; i < rank; i++) shape[i] = (int64_t)PyArray_DIM(a, (int)i);
        *data = PyArray_DATA(a);
        return 0;
    }
    if ((PyObject *)Py_TYPE(x) != array_type) return 1;
    PyObject *dt = PyObject_GetAttrString(x, "dtype");
    if (!dt) { PyErr_Clear(); return 1; }
    int same = dt == dtype || PyObject_RichCompareBool(dt, dtype, Py_EQ) == 1;
    Py_DECREF(dt);
    if (!same) { PyErr_Clear(); return 1; }
    PyObject *sh = PyObject_GetAttrString(x, "shape");
    if (!sh || !PyTuple_Check(sh) || PyTuple_GET_SIZE(sh) != rank) {
        Py_XDECREF(sh); PyErr_Clear(); return 1;
    }
    for (Py_ssize_t i = 0; i < rank; i++) shape[i] = PyLong_AsLongLong(PyTuple_GET_ITEM(sh, i));
    Py_DECREF(sh);
    if (PyErr_Occurred()) { PyErr_Clear(); return 1; }
    /* jax dispatches asynchronously: wait for the producer, then read the address */
    PyObject *r = PyObject_CallMethod(x, "block_until_ready", NULL);
    if (!r) { PyErr_Clear(); return 1; }
    Py_DECREF(r);
    PyObject *p = PyObject_CallMethod(x, "unsafe_buffer_pointer", NULL);
    if (!p) { PyErr_Clear(); return 1; }   /* sharded, deleted, ...: the general path says */
    *data = PyLong_AsVoidPtr(p);
    Py_DECREF(p);
    if (PyErr_Occurred()) { PyErr_Clear(); return 1; }
    return 0;
}

static PyObject *call(PyObject *self, PyObject *const *argv, Py_ssize_t argc) {
    (void)self;
    if (argc < 2 || argc > 3 || !PyTuple_Check(argv[0]) || PyTuple_GET_SIZE(argv[0]) != 10 ||
            !PyList_Check(argv[1]) || (argc == 3 && !PyTuple_Check(argv[2]))) {
        PyErr_SetString(PyExc_TypeError, "call(plan: tuple, args: list[, given: tuple])");
        return NULL;
    }
    PyObject *plan = argv[0], *args = argv[1], *given = argc == 3 ? argv[2] : NULL;
    prepare_fn prepare = (prepare_fn)PyLong_AsVoidPtr(PyTuple_GET_ITEM(plan, 0));
    run_fn run = (run_fn)PyLong_AsVoidPtr(PyTuple_GET_ITEM(plan, 1));
    Py_ssize_t n_dims = PyLong_AsSsize_t(PyTuple_GET_ITEM(plan, 2));
    PyObject *array_type = PyTuple_GET_ITEM(plan, 3);
    PyObject *in_dtypes = PyTuple_GET_ITEM(plan, 4), *in_ranks = PyTuple_GET_ITEM(plan, 5);
    PyObject *out_dtypes = PyTuple_GET_ITEM(plan, 6), *out_ranks = PyTuple_GET_ITEM(plan, 7);
    Py_ssize_t n_in = PyList_GET_SIZE(args), n_out = PyTuple_GET_SIZE(out_dtypes);
    if (PyErr_Occurred()) return NULL;
    if (n_in != PyTuple_GET_SIZE(in_dtypes) || n_in > MAX_IO || n_out > MAX_IO ||
            n_dims > MAX_DIMS)
        Py_RETURN_NONE;
    void *ins[MAX_IO + 1], *outs[MAX_IO + 1];
    int64_t in_dims[MAX_DIMS + 1], out_dims[MAX_DIMS + 1], dims[MAX_DIMS + 1];
    Py_ssize_t n_in_dims = 0, n_out_dims = 0;
    for (Py_ssize_t i = 0; i < n_in; i++) {
        Py_ssize_t rank = PyLong_AsSsize_t(PyTuple_GET_ITEM(in_ranks, i));
        if (n_in_dims + rank > MAX_DIMS) Py_RETURN_NONE;
        int r = argument(PyList_GET_ITEM(args, i), array_type, PyTuple_GET_ITEM(in_dtypes, i),
                         rank, &ins[i], in_dims + n_in_dims);
        if (r < 0) return NULL;
        if (r > 0) Py_RETURN_NONE;
        n_in_dims += rank;
    }
    for (Py_ssize_t j = 0; j < n_out; j++)
        n_out_dims += PyLong_AsSsize_t(PyTuple_GET_ITEM(out_ranks, j));
    if (n_out_dims > MAX_DIMS) Py_RETURN_NONE;
    char err[ERR_LEN];
    err[0] = 0;
    if (prepare(in_dims, dims, out_dims, err, ERR_LEN)) {
        PyErr_SetString(PyTuple_GET_ITEM(plan, 8), err);
        return NULL;
    }
    PyObject *result = PyList_New(n_out);
    if (!result) return NULL;
    Py_ssize_t pos = 0;
    for (Py_ssize_t j = 0; j < n_out; j++) {
        int rank = (int)PyLong_AsLong(PyTuple_GET_ITEM(out_ranks, j));
        npy_intp shape[NPY_MAXDIMS];
        if (rank > NPY_MAXDIMS) { Py_DECREF(result); Py_RETURN_NONE; }
        for (int d = 0; d < rank; d++) shape[d] = (npy_intp)out_dims[pos + d];
        pos += rank;
        PyArray_Descr *descr = (PyArray_Descr *)PyTuple_GET_ITEM(out_dtypes, j);
        PyObject *g = given && j < PyTuple_GET_SIZE(given) ? PyTuple_GET_ITEM(given, j) : NULL;
        if (g && PyArray_Check(g) && PyArray_NDIM((PyArrayObject *)g) == rank &&
                PyArray_IS_C_CONTIGUOUS((PyArrayObject *)g) &&
                PyArray_ISWRITEABLE((PyArrayObject *)g) &&
                PyArray_EquivTypes(PyArray_DESCR((PyArrayObject *)g), descr)) {
            int same = 1;
            for (int d = 0; d < rank; d++)
                same = same && PyArray_DIM((PyArrayObject *)g, d) == shape[d];
            if (same && PyArray_NBYTES((PyArrayObject *)g) > 0) {
                Py_INCREF(g);
                outs[j] = PyArray_DATA((PyArrayObject *)g);
                PyList_SET_ITEM(result, j, g);
                continue;
            }
        }
        Py_INCREF(descr);   /* stolen by the constructor */
        PyObject *o = PyArray_NewFromDescr(&PyArray_Type, descr, rank, shape, NULL, NULL, 0,
                                           NULL);
        if (!o) { Py_DECREF(result); return NULL; }
        outs[j] = PyArray_DATA((PyArrayObject *)o);
        PyList_SET_ITEM(result, j, o);
    }
    int status;
    Py_BEGIN_ALLOW_THREADS
    status = run(dims, ins, outs, err, ERR_LEN);
    Py_END_ALLOW_THREADS
    if (status) {
        Py_DECREF(result);
        PyErr_SetString(PyTuple_GET_ITEM(plan, 9), err);
        return NULL;
    }
    return result;
}

static PyMethodDef methods[] = {
    {"call", (PyCFunction)(void (*)(void))call, METH_FASTCALL,
     "call(plan, args) -> list of numpy outputs, or None for the general path"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_jdisc_eager", NULL, -1, methods};

PyMODINIT_FUNC PyInit__jdisc_eager(void) {
    import_array();
    return PyModule_Create(&module);
}
