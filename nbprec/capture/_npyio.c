/*
 * nbprec.capture._npyio: the capture's payload files, written by C threads that never take the GIL.
 *
 *     w = Writer(folder, threads, ring)    folder: bytes (os.fsencode); threads: those filling files (one more
 *                                         creates them); ring: bytes of the snapshot ring
 *     w.save(name, header, data)          copy data (a C-contiguous buffer), queue folder/name = header + data
 *     w.link(name, source)                queue folder/name as a hard link of folder/source, saved or linked
 *                                         before (a record of values already written: no data, no new inode)
 *     w.close()                           wait until every file is written; raise the first error
 *
 * save() takes a snapshot of the payload (the model may change the tensor as soon as it returns): one memcpy,
 * with the GIL released, into a ring of `ring` bytes mapped once per writer. Snapshots are placed one after
 * the other and their space is reused once written, oldest first, so a capture touches at most `ring` bytes
 * of memory for its snapshots, however many it takes: memory touched for the first time costs a page fault
 * per 4 KiB (in a virtual machine up to ten times a warm copy), so the ring asks for transparent huge pages.
 * A payload larger than the ring gets memory of its own once everything before it is written.
 *
 * One thread creates the files, in order, and hands each open file to the `threads` others, which write the
 * header and the data with one writev() and close it. Creating files is serialised by the kernel anyway (it
 * locks the folder) and on some file systems is the slow part (ext4 without a journal skips the inodes freed
 * in the last 30 s one by one), while writing is a copy into the page cache: one creator keeps the others
 * copying meanwhile, and never spins on the folder's lock against a second creator. No Python object is
 * touched, so these threads never wait for the GIL and the capture's thread never waits for them, except
 * when the ring is full (save() then waits, without the GIL) and in close().
 *
 * A file is made under a name that no longer exists: a name left by an earlier capture into the same folder
 * (overwrite=True) is removed first, never written through, since it may be a hard link of another file.
 * A link is made by the creator too, so it follows its source's creation (the filler may still be writing
 * the source: both names are the same file).
 *
 * An error (a full disk, a folder that is gone) removes the partial file and is kept, with the file's path,
 * until save() or close() raises it as an OSError (errno, strerror, path); files queued meanwhile are
 * skipped. POSIX only (threads, mmap, open/writev/close); elsewhere nbprec writes payloads from a Python
 * thread.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

#ifndef O_CLOEXEC
#define O_CLOEXEC 0
#endif
#ifndef MAP_ANONYMOUS
#define MAP_ANONYMOUS MAP_ANON
#endif

#define MAX_THREADS 8
#define ALIGN 64 /* snapshots start on cache lines */
#define COPY_NOGIL_FROM ((size_t)1 << 16)

typedef struct Job {
    struct Job *next;      /* in the queue of files to create, then in that of files to fill */
    struct Job *ring_next; /* in the ring's list of snapshots, oldest first */
    char *data;            /* the snapshot (NULL for an empty payload) */
    size_t nbytes;
    size_t offset, span; /* place in the ring; span 0: memory of its own (or none) */
    int done, fd;
    size_t header_len;
    char *header;    /* points into path[] */
    char *link_from; /* a link job: folder/source, in path[] after the path; NULL for a file to write */
    char path[];     /* folder/name, NUL, then the header or the link's source */
} Job;

typedef struct {
    Job *head, *tail;
} Queue;

typedef struct {
    PyObject_HEAD
    char *folder;
    size_t folder_len;
    pthread_mutex_t lock;
    pthread_cond_t work; /* a file to create was queued, or close() began */
    pthread_cond_t fill; /* a file to fill was queued, or the creator has finished */
    pthread_cond_t room; /* a job finished */
    Queue to_create, to_fill;
    int created_all;     /* the creator thread has ended: no file will be queued to fill any more */
    size_t pending;      /* bytes of payloads queued or being written */
    char *ring;          /* mapped at the first save() */
    size_t ring_size, ring_head;
    Job *oldest, *newest; /* snapshots in the ring, in the order they were placed */
    int error;            /* errno of the first failure not yet raised, 0 if none */
    char *error_path;
    int stopping, closed, n_threads, started;
    pthread_t threads[MAX_THREADS + 1]; /* the creator, then the threads that fill files */
} Writer;

static void push(Queue *q, Job *job)
{
    job->next = NULL;
    if (q->tail != NULL)
        q->tail->next = job;
    else
        q->head = job;
    q->tail = job;
}

static Job *pop(Queue *q)
{
    Job *job = q->head;
    if (job != NULL) {
        q->head = job->next;
        if (q->head == NULL) q->tail = NULL;
    }
    return job;
}

/* -- the ring ------------------------------------------------------------------------------------------- */
/* Place `need` bytes in the ring (lock held): the offset, or -1 when there is no room now. */
static Py_ssize_t ring_place(Writer *w, size_t need)
{
    size_t head = w->ring_head, size = w->ring_size, offset;
    if (w->oldest == NULL)
        offset = 0, head = 0; /* empty: start again at the beginning */
    else {
        size_t tail = w->oldest->offset; /* the oldest snapshot not yet written */
        if (head > tail) {                /* free: [head, size) and [0, tail) */
            if (size - head >= need)
                offset = head;
            else if (tail >= need)
                offset = 0;
            else
                return -1;
        } else if (tail - head >= need) /* wrapped: free is [head, tail); head == tail is full */
            offset = head;
        else
            return -1;
    }
    if (offset + need > size) return -1;
    w->ring_head = offset + need;
    return (Py_ssize_t)offset;
}

/* A written job leaves (lock held); the ring's space is reused once every older snapshot is written too. */
static void release(Writer *w, Job *job)
{
    job->done = 1;
    if (job->span == 0) {
        if (job->data != NULL) free(job->data);
        free(job);
        return;
    }
    while (w->oldest != NULL && w->oldest->done) {
        Job *old = w->oldest;
        w->oldest = old->ring_next;
        if (w->oldest == NULL) w->newest = NULL;
        free(old);
    }
}

/* -- the writer threads -------------------------------------------------------------------------------- */
/* A failure while writing `job` (lock held): the first is kept until raised. */
static void failed(Writer *w, const Job *job, int err)
{
    if (err != 0 && w->error == 0) {
        w->error = err;
        free(w->error_path);
        w->error_path = strdup(job->path);
    }
}

/* A job leaves the writer (lock held), written or not. */
static void finished(Writer *w, Job *job)
{
    w->pending -= job->nbytes;
    release(w, job);
    pthread_cond_broadcast(&w->room);
}

/* Write header + data into the created file and close it; 0 or the errno of the failure (file removed). */
static int fill_file(const Job *job, int fd)
{
    struct iovec iov[2] = {{(void *)job->header, job->header_len}, {job->data, job->nbytes}};
    struct iovec *next = iov;
    int count = job->nbytes ? 2 : 1, err = 0;
    while (count > 0) {
        ssize_t done = writev(fd, next, count);
        if (done < 0) {
            if (errno == EINTR) continue;
            err = errno;
            break;
        }
        while (count > 0 && (size_t)done >= next->iov_len) { /* whole pieces written */
            done -= (ssize_t)next->iov_len;
            next++;
            count--;
        }
        if (count > 0) { /* a short write: the rest of this piece */
            next->iov_base = (char *)next->iov_base + done;
            next->iov_len -= (size_t)done;
        }
    }
    if (close(fd) != 0 && err == 0 && errno != EINTR) err = errno;
    if (err != 0) unlink(job->path);
    return err;
}

/* Create job->path, new (a name left by an earlier capture is removed first: it may be a hard link of
   another file); 0 with *fd set, or the errno of the failure. */
static int create_file(const Job *job, int *fd)
{
    int removed = 0;
    for (;;) {
        *fd = open(job->path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (*fd >= 0) return 0;
        if (errno == EINTR) continue;
        if (errno != EEXIST || removed) return errno;
        if (unlink(job->path) != 0 && errno != ENOENT) return errno;
        removed = 1;
    }
}

/* Make job->path a hard link of job->link_from (replacing a name left by an earlier capture); 0 or errno. */
static int make_link(const Job *job)
{
    int removed = 0;
    for (;;) {
        if (link(job->link_from, job->path) == 0) return 0;
        if (errno == EINTR) continue;
        if (errno != EEXIST || removed) return errno;
        if (unlink(job->path) != 0 && errno != ENOENT) return errno;
        removed = 1;
    }
}

/* The creator: opens the files (and makes the links) in order and queues the files to be filled. */
static void *creator_main(void *arg)
{
    Writer *w = (Writer *)arg;
    pthread_mutex_lock(&w->lock);
    for (;;) {
        while (w->to_create.head == NULL && !w->stopping) pthread_cond_wait(&w->work, &w->lock);
        Job *job = pop(&w->to_create);
        if (job == NULL) break; /* closing, and nothing left */
        int skip = w->error != 0; /* after a failure, nothing more is written until it is raised */
        pthread_mutex_unlock(&w->lock);
        int fd = -1, err = 0;
        if (!skip) err = job->link_from != NULL ? make_link(job) : create_file(job, &fd);
        pthread_mutex_lock(&w->lock);
        if (fd < 0) { /* a link (made, or failed), a failure, or skipped */
            failed(w, job, err);
            finished(w, job);
        } else {
            job->fd = fd;
            push(&w->to_fill, job);
            pthread_cond_signal(&w->fill);
        }
    }
    w->created_all = 1;
    pthread_cond_broadcast(&w->fill);
    pthread_mutex_unlock(&w->lock);
    return NULL;
}

/* The others: fill the created files. */
static void *filler_main(void *arg)
{
    Writer *w = (Writer *)arg;
    pthread_mutex_lock(&w->lock);
    for (;;) {
        while (w->to_fill.head == NULL && !w->created_all) pthread_cond_wait(&w->fill, &w->lock);
        Job *job = pop(&w->to_fill);
        if (job == NULL) break; /* the creator has ended, and nothing left */
        pthread_mutex_unlock(&w->lock);
        int err = fill_file(job, job->fd);
        pthread_mutex_lock(&w->lock);
        failed(w, job, err);
        finished(w, job);
    }
    pthread_mutex_unlock(&w->lock);
    return NULL;
}

/* Start the creator and the fillers (lock held); -1 with errno set unless the creator and one filler run. */
static int start_threads(Writer *w)
{
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old); /* signals stay with Python's threads */
    int err = 0;
    for (; w->started < w->n_threads + 1; w->started++) {
        err = pthread_create(&w->threads[w->started], NULL, w->started ? filler_main : creator_main, w);
        if (err != 0) break;
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (w->started < 2) {
        errno = err;
        return -1;
    }
    return 0;
}

/* -- Python interface ---------------------------------------------------------------------------------- */
/* Raise (and forget) the first failure, if any; returns -1 when an exception was set. */
static int raise_error(Writer *w)
{
    pthread_mutex_lock(&w->lock);
    int err = w->error;
    char *path = w->error_path;
    w->error = 0;
    w->error_path = NULL;
    pthread_mutex_unlock(&w->lock);
    if (err == 0) return 0;
    PyObject *name = PyUnicode_DecodeFSDefault(path ? path : "");
    free(path);
    if (name == NULL) return -1;
    PyObject *exc = PyObject_CallFunction(PyExc_OSError, "isO", err, strerror(err), name);
    Py_DECREF(name);
    if (exc != NULL) {
        PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
        Py_DECREF(exc);
    }
    return -1;
}

static PyObject *Writer_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    static char *keywords[] = {"folder", "threads", "ring", NULL}; /* threads: those filling files */
    Py_buffer folder;
    int threads = 1;
    Py_ssize_t ring = (Py_ssize_t)64 << 20;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "y*|in", keywords, &folder, &threads, &ring)) return NULL;
    if (threads < 1 || threads > MAX_THREADS || ring < ALIGN) {
        PyBuffer_Release(&folder);
        PyErr_Format(PyExc_ValueError, "need 1 to %d threads and a ring of at least %d bytes", MAX_THREADS, ALIGN);
        return NULL;
    }
    Writer *w = (Writer *)type->tp_alloc(type, 0);
    if (w == NULL) {
        PyBuffer_Release(&folder);
        return NULL;
    }
    w->folder = malloc((size_t)folder.len + 1);
    if (w->folder == NULL) {
        PyBuffer_Release(&folder);
        Py_DECREF(w);
        return PyErr_NoMemory();
    }
    memcpy(w->folder, folder.buf, (size_t)folder.len);
    w->folder[folder.len] = '\0';
    w->folder_len = (size_t)folder.len;
    PyBuffer_Release(&folder);
    pthread_mutex_init(&w->lock, NULL);
    pthread_cond_init(&w->work, NULL);
    pthread_cond_init(&w->fill, NULL);
    pthread_cond_init(&w->room, NULL);
    w->n_threads = threads;
    w->ring_size = (size_t)ring / ALIGN * ALIGN;
    return (PyObject *)w;
}

/* Map the ring (GIL held, lock not held); -1 with MemoryError set. */
static int map_ring(Writer *w)
{
    void *p = mmap(NULL, w->ring_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        PyErr_NoMemory();
        return -1;
    }
#ifdef MADV_HUGEPAGE
    madvise(p, w->ring_size, MADV_HUGEPAGE); /* advice only: without it the ring works the same */
#endif
    w->ring = p;
    return 0;
}

/* Memory for the snapshot of `job` (nbytes > 0), waiting without the GIL while the ring is full; -1 with an
   exception set (MemoryError, or the failure of an earlier file). */
static int reserve(Writer *w, Job *job)
{
    size_t n = job->nbytes, need = (n + ALIGN - 1) / ALIGN * ALIGN;
    int own = need > w->ring_size || need < n; /* too large for the ring: memory of its own */
    if (!own && w->ring == NULL && map_ring(w) < 0) return -1;
    Py_ssize_t offset = -1;
    int failed = 0;
    pthread_mutex_lock(&w->lock);
    if (!own) offset = ring_place(w, need);
    if ((own && w->pending > 0) || (!own && offset < 0)) {
        pthread_mutex_unlock(&w->lock);
        Py_BEGIN_ALLOW_THREADS;
        pthread_mutex_lock(&w->lock);
        for (;;) {
            if (w->error != 0) {
                failed = 1;
                break;
            }
            if (own ? w->pending == 0 : (offset = ring_place(w, need)) >= 0) break;
            pthread_cond_wait(&w->room, &w->lock);
        }
        pthread_mutex_unlock(&w->lock);
        Py_END_ALLOW_THREADS;
        if (failed) return raise_error(w);
        pthread_mutex_lock(&w->lock);
    }
    if (!own) {
        job->offset = (size_t)offset;
        job->span = need;
        job->data = w->ring + offset;
        if (w->newest != NULL)
            w->newest->ring_next = job;
        else
            w->oldest = job;
        w->newest = job;
    }
    pthread_mutex_unlock(&w->lock);
    if (own) {
        job->data = malloc(n);
        if (job->data == NULL) {
            PyErr_NoMemory();
            return -1;
        }
    }
    return 0;
}

/* Queue `job` for the creator (GIL held), starting the threads at the first job; None, or NULL with an
   OSError set when they cannot start (the job is dropped). */
static PyObject *enqueue(Writer *w, Job *job)
{
    pthread_mutex_lock(&w->lock);
    if (w->started < 2 && start_threads(w) < 0) { /* a creator without a filler would wait for ever */
        int err = errno, started = w->started;
        w->stopping = 1; /* stop the creator, if it started: nothing was queued */
        pthread_cond_broadcast(&w->work);
        pthread_mutex_unlock(&w->lock);
        Py_BEGIN_ALLOW_THREADS;
        for (int i = 0; i < started; i++) pthread_join(w->threads[i], NULL);
        Py_END_ALLOW_THREADS;
        pthread_mutex_lock(&w->lock);
        w->started = w->stopping = w->created_all = 0;
        release(w, job); /* the first job: nothing older holds the ring */
        pthread_mutex_unlock(&w->lock);
        errno = err;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    push(&w->to_create, job);
    w->pending += job->nbytes;
    pthread_cond_signal(&w->work);
    pthread_mutex_unlock(&w->lock);
    Py_RETURN_NONE;
}

/* Checks before a job is queued: the arguments' count, a writer not closed, no failure left to raise; -1 with an
   exception set. */
static int ready(Writer *w, Py_ssize_t nargs, Py_ssize_t want, const char *usage)
{
    if (nargs != want) {
        PyErr_SetString(PyExc_TypeError, usage);
        return -1;
    }
    if (w->closed) {
        PyErr_SetString(PyExc_ValueError, "the payload writer is closed");
        return -1;
    }
    return raise_error(w);
}

PyDoc_STRVAR(save_doc, "save(name, header, data)\n\nCopy ``data`` (a C-contiguous buffer) and queue the file "
                       "``folder/name`` holding ``header`` then ``data``; raises the first failure not yet raised.");

static PyObject *Writer_save(Writer *w, PyObject *const *args, Py_ssize_t nargs)
{
    if (ready(w, nargs, 3, "save() takes exactly 3 arguments (name, header, data)") < 0) return NULL;
    Py_buffer name, header, data;
    if (PyObject_GetBuffer(args[0], &name, PyBUF_SIMPLE) < 0) return NULL;
    if (PyObject_GetBuffer(args[1], &header, PyBUF_SIMPLE) < 0) {
        PyBuffer_Release(&name);
        return NULL;
    }
    if (PyObject_GetBuffer(args[2], &data, PyBUF_C_CONTIGUOUS) < 0) {
        PyBuffer_Release(&name);
        PyBuffer_Release(&header);
        return NULL;
    }
    size_t n = (size_t)data.len, path_len = w->folder_len + 1 + (size_t)name.len;
    Job *job = calloc(1, sizeof(Job) + path_len + 1 + (size_t)header.len);
    if (job == NULL) {
        PyErr_NoMemory();
        goto fail;
    }
    memcpy(job->path, w->folder, w->folder_len);
    job->path[w->folder_len] = '/';
    memcpy(job->path + w->folder_len + 1, name.buf, (size_t)name.len);
    job->path[path_len] = '\0';
    job->header = job->path + path_len + 1;
    memcpy(job->header, header.buf, (size_t)header.len);
    job->header_len = (size_t)header.len;
    job->nbytes = n;
    if (n > 0) {
        if (reserve(w, job) < 0) {
            free(job); /* not in the ring: reserve() failed before placing it */
            goto fail;
        }
        if (n >= COPY_NOGIL_FROM) {
            Py_BEGIN_ALLOW_THREADS;
            memcpy(job->data, data.buf, n);
            Py_END_ALLOW_THREADS;
        } else {
            memcpy(job->data, data.buf, n);
        }
    }
    PyBuffer_Release(&name);
    PyBuffer_Release(&header);
    PyBuffer_Release(&data);
    return enqueue(w, job);
fail:
    PyBuffer_Release(&name);
    PyBuffer_Release(&header);
    PyBuffer_Release(&data);
    return NULL;
}

PyDoc_STRVAR(link_doc, "link(name, source)\n\nQueue ``folder/name`` as a hard link of ``folder/source``, a file "
                       "saved or linked before; raises the first failure not yet raised.");

static PyObject *Writer_link(Writer *w, PyObject *const *args, Py_ssize_t nargs)
{
    if (ready(w, nargs, 2, "link() takes exactly 2 arguments (name, source)") < 0) return NULL;
    Py_buffer name, source;
    if (PyObject_GetBuffer(args[0], &name, PyBUF_SIMPLE) < 0) return NULL;
    if (PyObject_GetBuffer(args[1], &source, PyBUF_SIMPLE) < 0) {
        PyBuffer_Release(&name);
        return NULL;
    }
    size_t path_len = w->folder_len + 1 + (size_t)name.len, from_len = w->folder_len + 1 + (size_t)source.len;
    Job *job = calloc(1, sizeof(Job) + path_len + 1 + from_len + 1);
    if (job == NULL) {
        PyBuffer_Release(&name);
        PyBuffer_Release(&source);
        return PyErr_NoMemory();
    }
    char *from = job->path + path_len + 1;
    memcpy(job->path, w->folder, w->folder_len);
    job->path[w->folder_len] = '/';
    memcpy(job->path + w->folder_len + 1, name.buf, (size_t)name.len);
    memcpy(from, w->folder, w->folder_len);
    from[w->folder_len] = '/';
    memcpy(from + w->folder_len + 1, source.buf, (size_t)source.len);
    job->link_from = from;
    job->fd = -1;
    PyBuffer_Release(&name);
    PyBuffer_Release(&source);
    return enqueue(w, job);
}

/* Stop the threads once every queued file is written, and unmap the ring (called without the GIL). */
static void finish(Writer *w)
{
    pthread_mutex_lock(&w->lock);
    w->stopping = 1;
    pthread_cond_broadcast(&w->work);
    int started = w->started;
    pthread_mutex_unlock(&w->lock);
    for (int i = 0; i < started; i++) pthread_join(w->threads[i], NULL);
    pthread_mutex_lock(&w->lock);
    w->started = 0;
    while (w->oldest != NULL) { /* only if no thread ever started */
        Job *old = w->oldest;
        w->oldest = old->ring_next;
        free(old);
    }
    w->newest = NULL;
    if (w->ring != NULL) munmap(w->ring, w->ring_size);
    w->ring = NULL;
    pthread_mutex_unlock(&w->lock);
}

PyDoc_STRVAR(close_doc, "close()\n\nWait until every queued file is written, stop the threads, and raise the "
                        "first failure not yet raised (an OSError naming the file).");

static PyObject *Writer_close(Writer *w, PyObject *unused)
{
    (void)unused;
    if (!w->closed) {
        w->closed = 1;
        Py_BEGIN_ALLOW_THREADS;
        finish(w);
        Py_END_ALLOW_THREADS;
    }
    if (raise_error(w) < 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *Writer_pending(Writer *w, void *closure)
{
    (void)closure;
    pthread_mutex_lock(&w->lock);
    size_t pending = w->pending;
    pthread_mutex_unlock(&w->lock);
    return PyLong_FromSize_t(pending);
}

static void Writer_dealloc(Writer *w)
{
    if (!w->closed) { /* never closed: the files are still written; a failure can only be dropped */
        w->closed = 1;
        Py_BEGIN_ALLOW_THREADS;
        finish(w);
        Py_END_ALLOW_THREADS;
    }
    free(w->error_path);
    free(w->folder);
    pthread_mutex_destroy(&w->lock);
    pthread_cond_destroy(&w->work);
    pthread_cond_destroy(&w->fill);
    pthread_cond_destroy(&w->room);
    Py_TYPE(w)->tp_free((PyObject *)w);
}

static PyMethodDef Writer_methods[] = {
    {"save", (PyCFunction)(void (*)(void))Writer_save, METH_FASTCALL, save_doc},
    {"link", (PyCFunction)(void (*)(void))Writer_link, METH_FASTCALL, link_doc},
    {"close", (PyCFunction)Writer_close, METH_NOARGS, close_doc},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Writer_getset[] = {
    {"pending", (getter)Writer_pending, NULL, "Bytes of payloads queued or being written.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyDoc_STRVAR(Writer_doc, "Writer(folder, threads=1, ring=64 MiB)\n\n"
                         "Writes payload files (and hard links) into ``folder`` (bytes) from C threads: one creating them, "
                         "``threads`` filling them; see nbprec/capture/_npyio.c.");

static PyTypeObject WriterType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "nbprec.capture._npyio.Writer",
    .tp_basicsize = sizeof(Writer),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = Writer_doc,
    .tp_new = Writer_new,
    .tp_dealloc = (destructor)Writer_dealloc,
    .tp_methods = Writer_methods,
    .tp_getset = Writer_getset,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_npyio", "Payload files written by C threads (see nbprec/capture/_npyio.c).", -1, NULL,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__npyio(void)
{
    if (PyType_Ready(&WriterType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    Py_INCREF(&WriterType);
    if (PyModule_AddObject(m, "Writer", (PyObject *)&WriterType) < 0) {
        Py_DECREF(&WriterType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
