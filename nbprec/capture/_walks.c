/*
 * nbprec.capture._walks: the capture's two walks, in C.
 *
 * stack_key: the walk of StackCollector.key (nbprec/capture/stacks.py). A statistics capture walks the
 * interpreter stack at every op it records, from the op outwards to the frame that called the innermost running
 * module (on a transformers model, 10 to 20 frames an op, about 450 walks a training step of MiniLM). In Python
 * each frame costs an attribute read or two, a dictionary lookup and a list append; here a few pointer reads.
 *
 * stack_key(frame, stop, outer, files, codes, size, is_user) returns what the Python method returns:
 * (id(code), f_lasti, ...) for each frame from `frame` outwards whose file is the user's (files[filename],
 * or is_user(filename) when it is not cached: the method caches it), innermost first; reaching `stop`, the key
 * ends with `outer`; at most `size` items. Every code object named is kept in `codes` (id -> code), so that an
 * id is never reused while a key names it.
 *
 * graph_boundary: the walk of BackwardWatch._boundary (nbprec/capture/backward.py), over the autograd nodes a
 * call made, from its output nodes back to the edges that lead to its inputs. A module call's walk goes over
 * every node of the ops inside it (about 1,500 nodes a MiniLM step); each costs a next_functions tuple that
 * torch builds, a sequence number, a lookup and a set, which the interpreter's overhead doubles.
 *
 * graph_boundary(starts, in_map, threshold, leaves) returns what the Python method returns: for each node
 * reached (from `starts`, through nodes whose sequence number is above `threshold`, never through AccumulateGrad
 * nodes, whose number is 2^64 - 1) that has edges to the call's inputs, id(node) -> (node, [(edge index,
 * slots), ...]); in_map maps (id(node), output_nr) of each input's edge to its slots, and, when `leaves`, a
 * leaf input's (id(tensor), -1) to its slots, found through the AccumulateGrad node's `variable`.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <frameobject.h>

static PyObject *py_stack_key(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 7) {
        PyErr_SetString(PyExc_TypeError,
                        "stack_key(frame, stop, outer, files, codes, size, is_user) takes 7 arguments");
        return NULL;
    }
    PyObject *frame = args[0], *stop = args[1], *outer = args[2], *files = args[3], *codes = args[4];
    PyObject *is_user = args[6];
    Py_ssize_t size = PyLong_AsSsize_t(args[5]);
    if (size == -1 && PyErr_Occurred()) return NULL;
    if ((frame != Py_None && !PyFrame_Check(frame)) || !PyTuple_Check(outer) || !PyDict_Check(files) ||
        !PyDict_Check(codes) || size < 0) {
        PyErr_SetString(PyExc_TypeError, "stack_key: a frame or None, a tuple, two dicts and a size >= 0");
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

#define LEAF_SEQ 0xFFFFFFFFFFFFFFFFULL /* the sequence number of AccumulateGrad nodes */

static PyObject *s_next_functions, *s_sequence_nr, *s_variable;

/* in_map's slots for (id(obj), nr) (borrowed), or NULL: not there (or an error, which is set). */
static PyObject *slots_of(PyObject *in_map, PyObject *obj, long nr)
{
    PyObject *ident = PyLong_FromVoidPtr(obj);
    PyObject *number = ident ? PyLong_FromLong(nr) : NULL;
    PyObject *key = number ? PyTuple_Pack(2, ident, number) : NULL;
    Py_XDECREF(ident);
    Py_XDECREF(number);
    if (key == NULL) return NULL;
    PyObject *slots = PyDict_GetItemWithError(in_map, key);
    Py_DECREF(key);
    return slots;
}

/* Append (k, slots) to boundary[id(node)], made (node, []) first if needed. */
static int add_link(PyObject *boundary, PyObject *node, Py_ssize_t k, PyObject *slots)
{
    PyObject *ident = PyLong_FromVoidPtr(node);
    if (ident == NULL) return -1;
    PyObject *entry = PyDict_GetItemWithError(boundary, ident); /* borrowed */
    if (entry == NULL) {
        if (PyErr_Occurred()) goto error;
        PyObject *links = PyList_New(0);
        entry = links ? PyTuple_Pack(2, node, links) : NULL;
        Py_XDECREF(links);
        if (entry == NULL) goto error;
        int failed = PyDict_SetItem(boundary, ident, entry);
        Py_DECREF(entry); /* the dict holds it */
        if (failed < 0) goto error;
    }
    Py_DECREF(ident);
    PyObject *link = Py_BuildValue("(nO)", k, slots);
    if (link == NULL) return -1;
    int failed = PyList_Append(PyTuple_GET_ITEM(entry, 1), link);
    Py_DECREF(link);
    return failed;
error:
    Py_DECREF(ident);
    return -1;
}

/* Visit one node: its edges to the inputs go into boundary, newer nodes not seen yet onto the queue. */
static int visit(PyObject *node, PyObject *in_map, long long threshold, int leaves, PyObject *boundary,
                 PyObject *seen, PyObject *queue)
{
    PyObject *edges = PyObject_GetAttr(node, s_next_functions);
    if (edges == NULL) return -1;
    PyObject *seq_edges = PySequence_Fast(edges, "next_functions is not a sequence");
    Py_DECREF(edges);
    if (seq_edges == NULL) return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq_edges);
    int result = -1;
    for (Py_ssize_t k = 0; k < n; k++) {
        PyObject *edge = PySequence_Fast_GET_ITEM(seq_edges, k);
        if (!PyTuple_Check(edge) || PyTuple_GET_SIZE(edge) != 2) {
            PyErr_SetString(PyExc_TypeError, "next_functions holds something other than (node, nr) pairs");
            goto done;
        }
        PyObject *next = PyTuple_GET_ITEM(edge, 0);
        if (next == Py_None) continue;
        long nr = PyLong_AsLong(PyTuple_GET_ITEM(edge, 1));
        if (nr == -1 && PyErr_Occurred()) goto done;
        PyObject *number = PyObject_CallMethodNoArgs(next, s_sequence_nr);
        if (number == NULL) goto done;
        unsigned long long seq = PyLong_AsUnsignedLongLong(number);
        Py_DECREF(number);
        if (seq == (unsigned long long)-1 && PyErr_Occurred()) goto done;
        PyObject *slots;
        if (seq != LEAF_SEQ) {
            slots = slots_of(in_map, next, nr);
        } else if (leaves) { /* an AccumulateGrad node: a leaf input's, known by the tensor it holds */
            PyObject *variable = PyObject_GetAttr(next, s_variable);
            if (variable == NULL) goto done;
            slots = slots_of(in_map, variable, -1);
            Py_DECREF(variable);
        } else {
            continue;
        }
        if (slots != NULL) {
            if (add_link(boundary, node, k, slots) < 0) goto done;
            continue;
        }
        if (PyErr_Occurred()) goto done;
        if (seq == LEAF_SEQ || (threshold >= 0 && seq <= (unsigned long long)threshold)) continue;
        PyObject *ident = PyLong_FromVoidPtr(next);
        if (ident == NULL) goto done;
        int known = PySet_Contains(seen, ident);
        int failed = known < 0 || (known == 0 && (PySet_Add(seen, ident) < 0 || PyList_Append(queue, next) < 0));
        Py_DECREF(ident);
        if (failed) goto done;
    }
    result = 0;
done:
    Py_DECREF(seq_edges);
    return result;
}

static PyObject *py_graph_boundary(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "graph_boundary(starts, in_map, threshold, leaves) takes 4 arguments");
        return NULL;
    }
    PyObject *starts = args[0], *in_map = args[1];
    if (!PyList_Check(starts) || !PyDict_Check(in_map)) {
        PyErr_SetString(PyExc_TypeError, "graph_boundary: a list of nodes and a dict");
        return NULL;
    }
    long long threshold = PyLong_AsLongLong(args[2]);
    if (threshold == -1 && PyErr_Occurred()) return NULL;
    int leaves = PyObject_IsTrue(args[3]);
    if (leaves < 0) return NULL;
    PyObject *boundary = PyDict_New();
    PyObject *seen = PySet_New(NULL);
    PyObject *queue = PyList_GetSlice(starts, 0, PyList_GET_SIZE(starts));
    if (boundary == NULL || seen == NULL || queue == NULL) goto error;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(starts); i++) {
        PyObject *ident = PyLong_FromVoidPtr(PyList_GET_ITEM(starts, i));
        int failed = ident == NULL || PySet_Add(seen, ident) < 0;
        Py_XDECREF(ident);
        if (failed) goto error;
    }
    while (PyList_GET_SIZE(queue) > 0) { /* depth first, popping the last, as the Python loop does */
        Py_ssize_t last = PyList_GET_SIZE(queue) - 1;
        PyObject *node = Py_NewRef(PyList_GET_ITEM(queue, last));
        if (PyList_SetSlice(queue, last, last + 1, NULL) < 0) {
            Py_DECREF(node);
            goto error;
        }
        int failed = visit(node, in_map, threshold, leaves, boundary, seen, queue);
        Py_DECREF(node);
        if (failed < 0) goto error;
    }
    Py_DECREF(seen);
    Py_DECREF(queue);
    return boundary;
error:
    Py_XDECREF(boundary);
    Py_XDECREF(seen);
    Py_XDECREF(queue);
    return NULL;
}

static PyMethodDef methods[] = {
    {"stack_key", (PyCFunction)(void (*)(void))py_stack_key, METH_FASTCALL,
     "stack_key(frame, stop, outer, files, codes, size, is_user): StackCollector.key's walk (see "
     "nbprec/capture/_walks.c)."},
    {"graph_boundary", (PyCFunction)(void (*)(void))py_graph_boundary, METH_FASTCALL,
     "graph_boundary(starts, in_map, threshold, leaves): BackwardWatch._boundary's walk (see "
     "nbprec/capture/_walks.c)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_walks", "The capture's walks of the interpreter stack and the autograd graph, in C.", -1,
    methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__walks(void)
{
    s_next_functions = PyUnicode_InternFromString("next_functions");
    s_sequence_nr = PyUnicode_InternFromString("_sequence_nr");
    s_variable = PyUnicode_InternFromString("variable");
    if (s_next_functions == NULL || s_sequence_nr == NULL || s_variable == NULL) return NULL;
    return PyModule_Create(&module);
}
