/*
 * nbprec._hugeheap: the command's heap in transparent huge pages, for the payloads it reads.
 *
 * `nbprec compare` reads each payload file into a fresh buffer (a bytes object: glibc's malloc), in its own
 * process and in the processes it forks to measure. Each 4 KiB page of those buffers touched for the first time
 * is a page fault: on a 413 MB msprobe pair about 14,000 of the command's 29,000 faults, most inside the kernel's
 * copy from the page cache (2026-12-04, forty-seventh session, `perf record -e page-faults`). With glibc told to
 * back its heap with transparent huge pages (`GLIBC_TUNABLES=glibc.malloc.hugetlb=1`, which a process cannot set
 * for itself once started) the same command faulted 16,000 times and took 5-8% less time.
 *
 * reserve(nbytes) does the same from inside the process: malloc takes every block up to 32 MiB from the heap
 * (M_MMAP_THRESHOLD), keeps what is freed (M_TRIM_THRESHOLD), and grows the heap by `nbytes` more than it needs
 * (M_TOP_PAD); one allocation larger than the heap's free memory then grows it, and the grown part is marked for
 * huge pages (madvise MADV_HUGEPAGE).
 * Later heap growth is not marked (the kernel makes it a mapping of its own), so `nbytes` should hold what the
 * comparison allocates. Processes forked afterwards inherit the settings and the marked range. Where the kernel
 * gives no huge pages (transparent_hugepage "never"), the marking does nothing. Linux with glibc 2.33 or later
 * only: elsewhere reserve() changes nothing and returns False.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#if defined(__linux__) && defined(__GLIBC__)
#include <malloc.h>
#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>
/* (mallinfo2: glibc 2.33 and later) */
#if defined(MADV_HUGEPAGE) && defined(M_MMAP_THRESHOLD) && defined(M_TRIM_THRESHOLD) && defined(M_TOP_PAD) && \
    (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 33))
#define NBPREC_HUGE_HEAP 1
#endif
#endif

#define MMAP_THRESHOLD (32 << 20) /* glibc's largest (DEFAULT_MMAP_THRESHOLD_MAX on 64-bit) */
#define TRIM_THRESHOLD (1 << 30)
#define FIRST_BLOCK (1 << 20)

PyDoc_STRVAR(reserve_doc,
             "reserve(nbytes) -> bool\n\n"
             "Grow this process's heap by `nbytes` and mark the grown part for transparent huge pages; malloc then\n"
             "takes blocks of up to 32 MiB from the heap and keeps what is freed (see nbprec/_hugeheap.c). True\n"
             "when done; False where it cannot be (not Linux with glibc, malloc or the kernel refusing), with nothing\n"
             "or only malloc's settings changed.");

static PyObject *reserve(PyObject *self, PyObject *arg)
{
    Py_ssize_t nbytes = PyLong_AsSsize_t(arg);
    (void)self;
    if (nbytes == -1 && PyErr_Occurred()) return NULL;
    if (nbytes <= 0 || nbytes > ((Py_ssize_t)1 << 40)) {
        PyErr_Format(PyExc_ValueError, "reserve: %zd bytes is not a size to reserve (1 byte to 1 TiB)", nbytes);
        return NULL;
    }
#ifdef NBPREC_HUGE_HEAP
    {
        const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
        uintptr_t before, lo, hi;
        size_t first;
        void *block;
        if (page == 0 || page & (page - 1)) Py_RETURN_FALSE;
        if (!mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) || !mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD) ||
            !mallopt(M_TOP_PAD, (int)(nbytes < INT_MAX ? nbytes : INT_MAX)))
            Py_RETURN_FALSE;
        /* one block larger than all the heap's free memory, so that no free chunk can hold it: it comes from the
           heap's top, which grows by the block and the pad (a process forked from a warmed-up one, the daemon's,
           holds free chunks of a megabyte and more) */
        first = mallinfo2().fordblks + FIRST_BLOCK;
        if (first >= MMAP_THRESHOLD) Py_RETURN_FALSE; /* (it would be a mapping of its own) */
        before = (uintptr_t)sbrk(0);
        block = malloc(first);
        if (block == NULL) Py_RETURN_FALSE;
        hi = (uintptr_t)sbrk(0) & ~(page - 1);
        lo = ((uintptr_t)block + page - 1) & ~(page - 1);
        free(block);
        if (hi < before + (uintptr_t)nbytes / 2 || hi <= lo) Py_RETURN_FALSE; /* not grown (sbrk refused) */
        if (madvise((void *)lo, hi - lo, MADV_HUGEPAGE) != 0) Py_RETURN_FALSE;
        Py_RETURN_TRUE;
    }
#else
    Py_RETURN_FALSE;
#endif
}

static PyMethodDef methods[] = {
    {"reserve", reserve, METH_O, reserve_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    "nbprec._hugeheap",
    "The command's heap in transparent huge pages (see nbprec/_hugeheap.c).",
    -1,
    methods,
};

PyMODINIT_FUNC PyInit__hugeheap(void) { return PyModule_Create(&module); }
