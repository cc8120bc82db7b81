/* jdisc's eager call path in C: one call from Python per jdisc call.
 *
 * Program(plan) holds one loaded program's call, its plan read once. Calling it checks each
 * argument (a single-device CPU jax.Array, a C-contiguous numpy array or a numpy scalar, of
 * the compiled dtype and rank), reads its shape and data address, binds the dimension
 * variables (the program's jd_prepare, which checks every shape), allocates the outputs as
 * numpy arrays and runs the program (jd_run, without the GIL). Anything else (Python
 * scalars, other dtypes, non-contiguous arrays, a deleted array...) gives None before anything
 * runs: the general path in Python then takes the call, and reports what is wrong.
 *
 *   program(args) -> the outputs as jax.Arrays, uncommitted on the default device, or None.
 *       Also None, before anything runs, where the results are not that: a committed
 *       jax.Array argument, a default device set by jax.default_device, a plan without the
 *       jax.Array maker. Results of at least `large_min` bytes go through `large` (DLPack,
 *       no copy); the rest through jax's batched device put, called from here.
 *   program.numpy(args, given=None) -> the outputs as numpy arrays, or None. `given` (one
 *       entry per output, None or a numpy array) supplies an output's buffer (a donated
 *       input's), used when its shape and dtype are the output's.
 *   program.wrap(j, array) -> `array` (a numpy array of output j's dtype and rank) as
 *       program(args) would return it: what the caller's probe of the maker checks.
 *
 * plan = (jd_prepare address, jd_run address, number of dimension variables, the jax.Array
 *         type, input dtypes, input ranks, output dtypes, output ranks, the exception raised
 *         for a failed shape check, the exception raised for a failed run, maker or None)
 * maker = (default-device state: its .value is None when no default device is set, the
 *          default device's sharding, [the default device], the batched device put, the
 *          arguments after its first four, make_aval(shape, dtype), large(array), large_min)
 *
 * Program(plan) is None where the C path cannot serve the program (over MAX_IO inputs or
 * outputs, over MAX_DIMS dimensions): the ctypes path then does. MAX_IO was 64 until
 * 2026-12-07, and a haiku ResNet's training step (120 parameter and state leaves in, 79 out)
 * took the ctypes path: 0.78 ms a call where jax.jit took 0.30 (benchmarks/zoo_speed.py). The
 * arrays a call keeps on the stack come to about 37 KB. Built once per Python and numpy
 * version (custom_calls/eager.py).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#include <numpy/arrayobject.h>
#if NPY_ABI_VERSION < 0x02000000
#define PyDataType_ELSIZE(descr) ((descr)->elsize)     /* numpy 1.x headers */
#endif
#include <stddef.h>
#include <stdint.h>

typedef int (*prepare_fn)(const int64_t *, int64_t *, int64_t *, char *, int64_t);
typedef int (*run_fn)(const int64_t *, void *const *, void *const *, char *, int64_t);

enum { MAX_IO = 256, MAX_DIMS = 1024, ERR_LEN = 2048, MAX_PUT_ARGS = 12, MAX_AVALS = 4096,
       OUT_ALIGN = 64, OUT_ALIGN_MIN = 4096 };

/* attribute and method names, interned once */
static PyObject *s_dtype, *s_shape, *s_aval, *s_committed, *s_block, *s_pointer, *s_value;

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    prepare_fn prepare;
    run_fn run;
    Py_ssize_t n_dims, n_in, n_out, n_in_dims, n_out_dims;
    int in_ranks[MAX_IO], out_ranks[MAX_IO];
    PyObject *plan;             /* the plan tuple: owns every object below */
    PyObject *array_type, *in_dtypes, *out_dtypes, *shape_error, *run_error;
    /* the jax.Array maker; state NULL when the plan has none */
    PyObject *state, *sharding, *devices, *put, *make_aval, *large;
    PyObject *put_args[MAX_PUT_ARGS];
    Py_ssize_t n_put_args;
    int64_t large_min;
    PyObject *avals[MAX_IO];    /* per output: shape tuple -> aval, a dict */
} Program;

/* A new C-contiguous array for an output. From OUT_ALIGN_MIN bytes on, its data is aligned to
 * OUT_ALIGN bytes (a view into a slightly larger byte array): XLA takes such a buffer over
 * without a copy (DLPack), while numpy's own large arrays start 16 bytes into a page and XLA
 * copied each one (a 16 MiB result: a 16 MiB memmove per call). A new reference, or NULL with
 * an exception set. */
static PyObject *new_output(PyArray_Descr *descr, int rank, npy_intp *shape) {
    npy_intp n = 1;
    for (int d = 0; d < rank; d++) n *= shape[d];
    npy_intp nbytes = n * (npy_intp)PyDataType_ELSIZE(descr);
    Py_INCREF(descr);   /* stolen by the constructor */
    if (nbytes < OUT_ALIGN_MIN)
        return PyArray_NewFromDescr(&PyArray_Type, descr, rank, shape, NULL, NULL, 0, NULL);
    npy_intp raw_bytes = nbytes + OUT_ALIGN;
    PyObject *raw = PyArray_SimpleNew(1, &raw_bytes, NPY_UINT8);
    if (!raw) { Py_DECREF(descr); return NULL; }
    char *data = PyArray_DATA((PyArrayObject *)raw);
    data += (OUT_ALIGN - (uintptr_t)data % OUT_ALIGN) % OUT_ALIGN;
    PyObject *o = PyArray_NewFromDescr(&PyArray_Type, descr, rank, shape, NULL, data,
                                       NPY_ARRAY_CARRAY, NULL);
    if (!o) { Py_DECREF(raw); return NULL; }
    if (PyArray_SetBaseObject((PyArrayObject *)o, raw) < 0) { Py_DECREF(o); return NULL; }
    return o;
}

/* The data address and shape of one argument; 0 on success, 1 for "take the general path"
 * (2 for a committed jax.Array when `uncommitted_only`), -1 with a Python exception set. A
 * numpy scalar of the compiled dtype (a rank-0 leaf: a loop's trip count, a temperature) is
 * copied into `scalar`, which the call reads. */
static int argument(PyObject *x, PyObject *array_type, PyObject *dtype, int rank,
                    int uncommitted_only, void **data, int64_t *shape, double *scalar) {
    if (rank == 0 && PyArray_IsScalar(x, Generic)) {
        PyArray_Descr *d = PyArray_DescrFromScalar(x);
        int same = d && PyDataType_ELSIZE(d) <= (int)(4 * sizeof(double)) &&
                   PyArray_EquivTypes(d, (PyArray_Descr *)dtype);
        Py_XDECREF(d);
        if (!same) { PyErr_Clear(); return 1; }
        PyArray_ScalarAsCtype(x, scalar);
        *data = scalar;
        return 0;
    }
    if (PyArray_Check(x)) {
        PyArrayObject *a = (PyArrayObject *)x;
        if (PyArray_NDIM(a) != rank || !PyArray_IS_C_CONTIGUOUS(a) ||
                !PyArray_EquivTypes(PyArray_DESCR(a), (PyArray_Descr *)dtype))
            return 1;
        for (int i = 0; i < rank; i++) shape[i] = (int64_t)PyArray_DIM(a, i);
        *data = PyArray_DATA(a);
        return 0;
    }
    if ((PyObject *)Py_TYPE(x) != array_type) return 1;
    if (uncommitted_only) {
        PyObject *c = PyObject_GetAttr(x, s_committed);
        if (!c) { PyErr_Clear(); return 1; }
        int committed = c != Py_False;
        Py_DECREF(c);
        if (committed) return 2;
    }
    /* the array's dtype and shape are its aval's (jax's own properties read them there):
       plain attributes, a Python property call each less */
    PyObject *aval = PyObject_GetAttr(x, s_aval);
    if (!aval) { PyErr_Clear(); return 1; }
    PyObject *dt = PyObject_GetAttr(aval, s_dtype);
    if (!dt) { Py_DECREF(aval); PyErr_Clear(); return 1; }
    int same = dt == dtype || PyObject_RichCompareBool(dt, dtype, Py_EQ) == 1;
    Py_DECREF(dt);
    if (!same) { Py_DECREF(aval); PyErr_Clear(); return 1; }
    PyObject *sh = PyObject_GetAttr(aval, s_shape);
    Py_DECREF(aval);
    if (!sh || !PyTuple_Check(sh) || PyTuple_GET_SIZE(sh) != rank) {
        Py_XDECREF(sh); PyErr_Clear(); return 1;
    }
    for (int i = 0; i < rank; i++) shape[i] = PyLong_AsLongLong(PyTuple_GET_ITEM(sh, i));
    Py_DECREF(sh);
    if (PyErr_Occurred()) { PyErr_Clear(); return 1; }
    /* jax dispatches asynchronously: wait for the producer, then read the address */
    PyObject *r = PyObject_CallMethodNoArgs(x, s_block);
    if (!r) { PyErr_Clear(); return 1; }
    Py_DECREF(r);
    PyObject *p = PyObject_CallMethodNoArgs(x, s_pointer);
    if (!p) { PyErr_Clear(); return 1; }   /* sharded, deleted, ...: the general path says */
    *data = PyLong_AsVoidPtr(p);
    Py_DECREF(p);
    if (PyErr_Occurred()) { PyErr_Clear(); return 1; }
    return 0;
}

/* Run the program on `args` (a list or tuple): a new list of numpy outputs, Py_None (a new
 * reference) for the general path, or NULL with an exception set. */
static PyObject *run_numpy(Program *p, PyObject *args, PyObject *given, int uncommitted_only) {
    if (!PyList_Check(args) && !PyTuple_Check(args)) Py_RETURN_NONE;
    Py_ssize_t n_in = p->n_in, n_out = p->n_out;
    if (PySequence_Fast_GET_SIZE(args) != n_in) Py_RETURN_NONE;
    void *ins[MAX_IO + 1], *outs[MAX_IO + 1];
    double scalars[MAX_IO + 1][4];     /* numpy scalar arguments, as the call reads them */
    int64_t in_dims[MAX_DIMS + 1], out_dims[MAX_DIMS + 1], dims[MAX_DIMS + 1];
    Py_ssize_t pos = 0;
    for (Py_ssize_t i = 0; i < n_in; i++) {
        /* read again each time: the checks run Python code, which may change a list */
        if (PySequence_Fast_GET_SIZE(args) != n_in) Py_RETURN_NONE;
        int r = argument(PySequence_Fast_GET_ITEM(args, i), p->array_type,
                         PyTuple_GET_ITEM(p->in_dtypes, i), p->in_ranks[i], uncommitted_only,
                         &ins[i], in_dims + pos, scalars[i]);
        if (r < 0) return NULL;
        if (r > 0) Py_RETURN_NONE;
        pos += p->in_ranks[i];
    }
    char err[ERR_LEN];
    err[0] = 0;
    if (p->prepare(in_dims, dims, out_dims, err, ERR_LEN)) {
        PyErr_SetString(p->shape_error, err);
        return NULL;
    }
    PyObject *result = PyList_New(n_out);
    if (!result) return NULL;
    pos = 0;
    for (Py_ssize_t j = 0; j < n_out; j++) {
        int rank = p->out_ranks[j];
        npy_intp shape[NPY_MAXDIMS];
        for (int d = 0; d < rank; d++) shape[d] = (npy_intp)out_dims[pos + d];
        pos += rank;
        PyArray_Descr *descr = (PyArray_Descr *)PyTuple_GET_ITEM(p->out_dtypes, j);
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
        PyObject *o = new_output(descr, rank, shape);
        if (!o) { Py_DECREF(result); return NULL; }
        outs[j] = PyArray_DATA((PyArrayObject *)o);
        PyList_SET_ITEM(result, j, o);
    }
    int status;
    Py_BEGIN_ALLOW_THREADS
    status = p->run(dims, ins, outs, err, ERR_LEN);
    Py_END_ALLOW_THREADS
    if (status) {
        Py_DECREF(result);
        PyErr_SetString(p->run_error, err);
        return NULL;
    }
    return result;
}

/* Output j (a numpy array of its dtype and rank) as an uncommitted jax.Array on the default
 * device: a new reference, or NULL with an exception set. */
static PyObject *to_array(Program *p, Py_ssize_t j, PyObject *arr) {
    PyArrayObject *a = (PyArrayObject *)arr;
    if ((int64_t)PyArray_NBYTES(a) >= p->large_min)
        return PyObject_CallOneArg(p->large, arr);
    int rank = PyArray_NDIM(a);
    PyObject *key = PyTuple_New(rank);
    if (!key) return NULL;
    for (int d = 0; d < rank; d++) {
        PyObject *n = PyLong_FromSsize_t(PyArray_DIM(a, d));
        if (!n) { Py_DECREF(key); return NULL; }
        PyTuple_SET_ITEM(key, d, n);
    }
    PyObject *avals = p->avals[j];
    PyObject *aval = PyDict_GetItemWithError(avals, key);      /* borrowed */
    if (aval) {
        Py_INCREF(aval);
    } else {
        if (PyErr_Occurred()) { Py_DECREF(key); return NULL; }
        PyObject *make[2] = {key, PyTuple_GET_ITEM(p->out_dtypes, j)};
        aval = PyObject_Vectorcall(p->make_aval, make, 2, NULL);
        if (!aval) { Py_DECREF(key); return NULL; }
        if (PyDict_GET_SIZE(avals) >= MAX_AVALS) PyDict_Clear(avals);
        if (PyDict_SetItem(avals, key, aval)) { Py_DECREF(key); Py_DECREF(aval); return NULL; }
    }
    Py_DECREF(key);
    PyObject *xs = PyTuple_Pack(1, arr);
    if (!xs) { Py_DECREF(aval); return NULL; }
    PyObject *stack[4 + MAX_PUT_ARGS] = {aval, p->sharding, xs, p->devices};
    for (Py_ssize_t k = 0; k < p->n_put_args; k++) stack[4 + k] = p->put_args[k];
    PyObject *out = PyObject_Vectorcall(p->put, stack, 4 + p->n_put_args, NULL);
    Py_DECREF(xs);
    Py_DECREF(aval);
    return out;
}

static PyObject *program_call(PyObject *self, PyObject *const *argv, size_t nargsf,
                              PyObject *kwnames) {
    Program *p = (Program *)self;
    if (PyVectorcall_NARGS(nargsf) != 1 || kwnames) {
        PyErr_SetString(PyExc_TypeError, "Program(args: list | tuple)");
        return NULL;
    }
    if (!p->state) Py_RETURN_NONE;
    PyObject *device = PyObject_GetAttr(p->state, s_value);
    if (!device) return NULL;
    int default_set = device != Py_None;
    Py_DECREF(device);
    if (default_set) Py_RETURN_NONE;     /* jax.default_device(...): Python places them */
    PyObject *outs = run_numpy(p, argv[0], NULL, 1);
    if (!outs || outs == Py_None) return outs;
    for (Py_ssize_t j = 0; j < p->n_out; j++) {
        PyObject *arr = PyList_GET_ITEM(outs, j);
        PyObject *o = to_array(p, j, arr);
        if (!o) { Py_DECREF(outs); return NULL; }
        PyList_SET_ITEM(outs, j, o);
        Py_DECREF(arr);
    }
    return outs;
}

static PyObject *program_numpy(PyObject *self, PyObject *const *argv, Py_ssize_t argc) {
    if (argc < 1 || argc > 2 || (argc == 2 && argv[1] != Py_None && !PyTuple_Check(argv[1]))) {
        PyErr_SetString(PyExc_TypeError, "numpy(args: list | tuple, given: tuple | None)");
        return NULL;
    }
    return run_numpy((Program *)self, argv[0], argc == 2 && argv[1] != Py_None ? argv[1] : NULL,
                     0);
}

static PyObject *program_wrap(PyObject *self, PyObject *const *argv, Py_ssize_t argc) {
    Program *p = (Program *)self;
    Py_ssize_t j = argc == 2 ? PyLong_AsSsize_t(argv[0]) : -1;
    if (j == -1 && PyErr_Occurred()) return NULL;
    if (j < 0 || j >= p->n_out || !PyArray_Check(argv[1]) || !p->state ||
            PyArray_NDIM((PyArrayObject *)argv[1]) != p->out_ranks[j] ||
            !PyArray_EquivTypes(PyArray_DESCR((PyArrayObject *)argv[1]),
                                (PyArray_Descr *)PyTuple_GET_ITEM(p->out_dtypes, j))) {
        PyErr_SetString(PyExc_TypeError, "wrap(j, numpy array of output j's dtype and rank), "
                                         "with a plan that has a maker");
        return NULL;
    }
    return to_array(p, j, argv[1]);
}

static int read_ranks(PyObject *ranks, Py_ssize_t n, int *out, Py_ssize_t *total) {
    *total = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        long r = PyLong_AsLong(PyTuple_GET_ITEM(ranks, i));
        if (r == -1 && PyErr_Occurred()) return -1;
        if (r < 0 || r > NPY_MAXDIMS) return 1;
        out[i] = (int)r;
        *total += r;
    }
    return *total > MAX_DIMS;
}

static PyObject *program_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    PyObject *plan;
    if (kwargs || !PyArg_ParseTuple(args, "O!", &PyTuple_Type, &plan)) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "Program(plan: tuple)");
        return NULL;
    }
#define ITEM(i) PyTuple_GET_ITEM(plan, i)
    if (PyTuple_GET_SIZE(plan) != 11 || !PyTuple_Check(ITEM(4)) || !PyTuple_Check(ITEM(5)) ||
            !PyTuple_Check(ITEM(6)) || !PyTuple_Check(ITEM(7)) ||
            PyTuple_GET_SIZE(ITEM(4)) != PyTuple_GET_SIZE(ITEM(5)) ||
            PyTuple_GET_SIZE(ITEM(6)) != PyTuple_GET_SIZE(ITEM(7))) {
        PyErr_SetString(PyExc_ValueError, "a plan is 11 entries (eager.c's header)");
        return NULL;
    }
    Py_ssize_t n_in = PyTuple_GET_SIZE(ITEM(4)), n_out = PyTuple_GET_SIZE(ITEM(6));
    for (Py_ssize_t i = 0; i < n_in + n_out; i++) {
        PyObject *d = i < n_in ? PyTuple_GET_ITEM(ITEM(4), i)
                               : PyTuple_GET_ITEM(ITEM(6), i - n_in);
        if (!PyArray_DescrCheck(d)) {
            PyErr_SetString(PyExc_TypeError, "plan dtypes must be numpy dtypes");
            return NULL;
        }
    }
    if (n_in > MAX_IO || n_out > MAX_IO) Py_RETURN_NONE;     /* ctypes serves such programs */
    Program *p = (Program *)type->tp_alloc(type, 0);
    if (!p) return NULL;
    p->vectorcall = program_call;
    p->plan = plan;
    Py_INCREF(plan);
    p->prepare = (prepare_fn)PyLong_AsVoidPtr(ITEM(0));
    p->run = (run_fn)PyLong_AsVoidPtr(ITEM(1));
    p->n_dims = PyLong_AsSsize_t(ITEM(2));
    p->array_type = ITEM(3);
    p->in_dtypes = ITEM(4);
    p->out_dtypes = ITEM(6);
    p->shape_error = ITEM(8);
    p->run_error = ITEM(9);
    p->n_in = n_in;
    p->n_out = n_out;
    if (PyErr_Occurred()) { Py_DECREF(p); return NULL; }
    int bad = read_ranks(ITEM(5), n_in, p->in_ranks, &p->n_in_dims);
    if (!bad) bad = read_ranks(ITEM(7), n_out, p->out_ranks, &p->n_out_dims);
    if (bad < 0) { Py_DECREF(p); return NULL; }
    if (bad || p->n_dims > MAX_DIMS || !p->prepare || !p->run) { Py_DECREF(p); Py_RETURN_NONE; }
    PyObject *maker = ITEM(10);
    if (maker != Py_None) {
        PyObject *extra = PyTuple_Check(maker) && PyTuple_GET_SIZE(maker) == 8 ?
                          PyTuple_GET_ITEM(maker, 4) : NULL;
        if (!extra || !PyTuple_Check(extra) || PyTuple_GET_SIZE(extra) > MAX_PUT_ARGS) {
            PyErr_SetString(PyExc_ValueError, "a maker is 8 entries (eager.c's header)");
            Py_DECREF(p);
            return NULL;
        }
        p->large_min = PyLong_AsLongLong(PyTuple_GET_ITEM(maker, 7));
        if (PyErr_Occurred()) { Py_DECREF(p); return NULL; }
        for (Py_ssize_t j = 0; j < n_out; j++) {
            p->avals[j] = PyDict_New();
            if (!p->avals[j]) { Py_DECREF(p); return NULL; }
        }
        p->state = PyTuple_GET_ITEM(maker, 0);
        p->sharding = PyTuple_GET_ITEM(maker, 1);
        p->devices = PyTuple_GET_ITEM(maker, 2);
        p->put = PyTuple_GET_ITEM(maker, 3);
        p->n_put_args = PyTuple_GET_SIZE(extra);
        for (Py_ssize_t k = 0; k < p->n_put_args; k++)
            p->put_args[k] = PyTuple_GET_ITEM(extra, k);
        p->make_aval = PyTuple_GET_ITEM(maker, 5);
        p->large = PyTuple_GET_ITEM(maker, 6);
    }
#undef ITEM
    return (PyObject *)p;
}

static void program_dealloc(PyObject *self) {
    Program *p = (Program *)self;
    for (Py_ssize_t j = 0; j < MAX_IO; j++) Py_XDECREF(p->avals[j]);
    Py_XDECREF(p->plan);
    Py_TYPE(self)->tp_free(self);
}

static PyMethodDef program_methods[] = {
    {"numpy", (PyCFunction)(void (*)(void))program_numpy, METH_FASTCALL,
     "numpy(args, given=None) -> list of numpy outputs, or None for the general path"},
    {"wrap", (PyCFunction)(void (*)(void))program_wrap, METH_FASTCALL,
     "wrap(j, array) -> output j's array as a jax.Array, as a call makes it"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject ProgramType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "_jdisc_eager.Program",
    .tp_basicsize = sizeof(Program),
    .tp_dealloc = program_dealloc,
    .tp_vectorcall_offset = offsetof(Program, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "Program(plan): program(args) -> jax.Arrays | None; .numpy(args, given=None)",
    .tp_methods = program_methods,
    .tp_new = program_new,
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, .m_name = "_jdisc_eager", .m_size = -1};

PyMODINIT_FUNC PyInit__jdisc_eager(void) {
    import_array();
    if (!(s_dtype = PyUnicode_InternFromString("dtype")) ||
            !(s_shape = PyUnicode_InternFromString("shape")) ||
            !(s_aval = PyUnicode_InternFromString("aval")) ||
            !(s_committed = PyUnicode_InternFromString("_committed")) ||
            !(s_block = PyUnicode_InternFromString("block_until_ready")) ||
            !(s_pointer = PyUnicode_InternFromString("unsafe_buffer_pointer")) ||
            !(s_value = PyUnicode_InternFromString("value")))
        return NULL;
    if (PyType_Ready(&ProgramType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    Py_INCREF(&ProgramType);
    if (PyModule_AddObject(m, "Program", (PyObject *)&ProgramType) < 0) {
        Py_DECREF(&ProgramType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
