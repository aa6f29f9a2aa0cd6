/*
 * nbprec.capture._stackkey: the walk of StackCollector.key (nbprec/capture/stacks.py), in C.
 *
 * A statistics capture walks the interpreter stack at every op it records, from the op outwards to the frame
 * that called the innermost running module (on a transformers model, 10 to 20 frames an op, about 450 walks a
 * training step of MiniLM). In Python each frame costs an attribute read or two, a dictionary lookup and a
 * list append; here a few pointer reads.
 *
 * key(frame, stop, outer, files, codes, size, is_user) returns what the Python method returns:
 * (id(code), f_lasti, ...) for each frame from `frame` outwards whose file is the user's (files[filename],
 * or is_user(filename) when it is not cached: the method caches it), innermost first; reaching `stop`, the key
 * ends with `outer`; at most `size` items. Every code object named is kept in `codes` (id -> code), so that an
 * id is never reused while a key names it.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <frameobject.h>

static PyObject *py_key(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 7) {
        PyErr_SetString(PyExc_TypeError, "key(frame, stop, outer, files, codes, size, is_user) takes 7 arguments");
        return NULL;
    }
    PyObject *frame = args[0], *stop = args[1], *outer = args[2], *files = args[3], *codes = args[4];
    PyObject *is_user = args[6];
    Py_ssize_t size = PyLong_AsSsize_t(args[5]);
    if (size == -1 && PyErr_Occurred()) return NULL;
    if ((frame != Py_None && !PyFrame_Check(frame)) || !PyTuple_Check(outer) || !PyDict_Check(files) ||
        !PyDict_Check(codes) || size < 0) {
        PyErr_SetString(PyExc_TypeError, "key: a frame or None, a tuple, two dicts and a size >= 0");
        return NULL;
    }
    PyObject *key = PyList_New(0);
    if (key == NULL) return NULL;
    PyFrameObject *f = frame == Py_None ? NULL : (PyFrameObject *)Py_NewRef(frame);
    while (f != NULL) {
        if ((PyObject *)f == stop) {
            Py_ssize_t n = PyTuple_GET_SIZE(outer);
            for (Py_ssize_t i = 0; i < n; i++)
                if (PyList_Append(key, PyTuple_GET_ITEM(outer, i)) < 0) goto error;
            break;
        }
        PyCodeObject *code = PyFrame_GetCode(f);
        PyObject *filename = code->co_filename;
        PyObject *keep = PyDict_GetItemWithError(files, filename); /* borrowed */
        int user;
        if (keep != NULL) {
            user = PyObject_IsTrue(keep);
        } else if (PyErr_Occurred()) {
            user = -1;
        } else {
            PyObject *found = PyObject_CallOneArg(is_user, filename);
            user = found == NULL ? -1 : PyObject_IsTrue(found);
            Py_XDECREF(found);
        }
        if (user < 0) {
            Py_DECREF(code);
            goto error;
        }
        if (user) {
            PyObject *ident = PyLong_FromVoidPtr(code);
            PyObject *lasti = ident ? PyLong_FromLong(PyFrame_GetLasti(f)) : NULL;
            int failed = lasti == NULL || PyList_Append(key, ident) < 0 || PyList_Append(key, lasti) < 0;
            if (!failed) {
                int known = PyDict_Contains(codes, ident);
                failed = known < 0 || (known == 0 && PyDict_SetItem(codes, ident, (PyObject *)code) < 0);
            }
            Py_XDECREF(ident);
            Py_XDECREF(lasti);
            if (failed) {
                Py_DECREF(code);
                goto error;
            }
            if (PyList_GET_SIZE(key) >= size) {
                Py_DECREF(code);
                break;
            }
        }
        Py_DECREF(code);
        PyFrameObject *back = PyFrame_GetBack(f);
        Py_DECREF(f);
        f = back;
    }
    Py_XDECREF(f);
    Py_ssize_t n = PyList_GET_SIZE(key);
    PyObject *result = PyList_GetSlice(key, 0, n < size ? n : size);
    Py_DECREF(key);
    if (result == NULL) return NULL;
    PyObject *tuple = PyList_AsTuple(result);
    Py_DECREF(result);
    return tuple;

error:
    Py_XDECREF(f);
    Py_DECREF(key);
    return NULL;
}

static PyMethodDef methods[] = {
    {"key", (PyCFunction)(void (*)(void))py_key, METH_FASTCALL,
     "key(frame, stop, outer, files, codes, size, is_user): StackCollector.key's walk (see "
     "nbprec/capture/_stackkey.c)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_stackkey", "StackCollector.key's walk of the interpreter stack, in C.", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__stackkey(void) { return PyModule_Create(&module); }
