/*
 * nbprec.formats._zipdir: where the entries of a stored (uncompressed) zip archive start, in C.
 *
 * A torch.save file is a zip archive of a few entries; reading one tensor needs the archive's directory and
 * the local headers of the entries used. nbprec/formats/_ptzip.py does this in Python too (_zip_entries_py,
 * also the fall-back when this module is not built); this is the same algorithm, about 40 us cheaper per
 * file, which adds up over dumps of 10^5 files. Both must return the same result for every input: the tests
 * hold them to that, on well-formed, ZIP64 and damaged archives.
 *
 * entries(fd, file_size, whole_below=0) -> (head, {name: (data_offset, size)})
 *   head: the file's first HEAD bytes (fewer when the file is shorter), or the whole file when it is shorter
 *   than whole_below bytes (one read instead of three for a small archive: head, tail and payload);
 *   name: the entry's name as stored (bytes, not decoded);
 *   data_offset: where the entry's bytes start, -1 when it is compressed (its method is not "stored", or
 *   its stored size differs from its size); size: its uncompressed size.
 * read_small(path, whole_below, wait=True) -> entries() of a small regular file read whole, or None
 *   path is opened without following a symbolic link (O_NOFOLLOW) and without blocking (O_NONBLOCK: a FIFO
 *   does not hang it), and read only when it is a regular file of 1 to whole_below - 1 bytes; None otherwise
 *   (the caller then takes its checked path, which says what is wrong). The usual payload in one call: open,
 *   fstat, one read (these without the GIL: other threads measure meanwhile, as in a notebook), close.
 *   wait=False: False, without waiting, when part of the file is not in the page cache (the read asks with
 *   RWF_NOWAIT, which starts reading the missing pages from the disk): the caller measures other pairs while
 *   they come, and then reads it again (a dump part of whose pages were evicted would otherwise stop at every
 *   missing page, once per file).
 * read_small_many(paths, whole_below, entries=True, wait=True) -> [read_small() of each, or None where it
 *   would raise] the files opened and read in one pass that holds the GIL for none of them (threads measuring
 *   pairs read a batch's payloads ahead: nbprec/formats/_files.py's read_ahead); wait=False as read_small's.
 * tensor_start(head, entries, dtype, itemsize, shape, describe) -> (start, numel) or None
 *   where the one tensor of a small archive read whole starts, when it is the plain tensor asked for (what
 *   nbprec/formats/_ptzip.py's small_tensor checks, held to its Python twin there by the tests).
 * read_npy(path, whole_below, descr, shape, itemsize, wait=True) -> (data, start), None or False
 *   a small plain .npy payload (nbprec's own dumps) opened as read_small() opens it, read whole and its header
 *   checked, in one call: what nbprec/formats/_npyfile.py's small_npy does in Python (its fall-back when this
 *   module is not built; the tests hold the two to each other). npy_start(data, descr, shape, itemsize) checks
 *   the header of a file already read.
 * entries() and read_small() raise ValueError (the archive is not one this reader understands: the caller falls
 * back to zipfile) or OSError (reading failed). Every offset and length read from the file is checked against the buffer it
 * indexes before it is used: the file may be truncated, damaged or hostile.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#define TAIL 8192        /* bytes read from the end: the directory of a one-tensor archive fits easily */
#define HEAD 4096        /* bytes read from the start: the small entries and the local headers sit there */
#define MAX_ENTRIES 4096             /* more than any torch.save archive has */
#define MAX_DIRECTORY (64ULL << 20) /* bytes of central directory read at most (a hostile size is refused) */
#define EOCD_SIZE 22
#define EOCD64_LOCATOR_SIZE 20
#define EOCD64_SIZE 56
#define CENTRAL_SIZE 46
#define LOCAL_SIZE 30
#define FFFF32 0xFFFFFFFFULL

static uint16_t u16(const unsigned char *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static uint32_t u32(const unsigned char *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}
static uint64_t u64(const unsigned char *p) { return (uint64_t)u32(p) | ((uint64_t)u32(p + 4) << 32); }

/* Read exactly n bytes at offset; 0 on success, -1 with errno (0 for a short read). */
static int read_at(int fd, unsigned char *buf, size_t n, uint64_t offset)
{
    size_t done = 0;
    while (done < n) {
        ssize_t got = pread(fd, buf + done, n - done, (off_t)(offset + done));
        if (got < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        if (got == 0) {
            errno = 0;
            return -1;
        }
        done += (size_t)got;
    }
    return 0;
}

#if defined(RWF_NOWAIT) && defined(__linux__)
/* read_at() of a whole small file, only from the page cache: 0 when read; 1 when part of it is not in the page
   cache (preadv2 with RWF_NOWAIT, which has started reading the missing pages; nothing waits for them); -1 with
   errno as read_at (and read_at itself where the file system does not take RWF_NOWAIT). */
static int read_cached(int fd, unsigned char *buf, size_t n)
{
    static int unsupported_here = 0; /* (set once the file system said it does not take the flag) */
    size_t done = 0;
    while (done < n && !unsupported_here) {
        struct iovec part = {buf + done, n - done};
        ssize_t got = preadv2(fd, &part, 1, (off_t)done, RWF_NOWAIT);
        if (got < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN) return 1;
            if (errno != EOPNOTSUPP && errno != EINVAL) return -1;
            unsupported_here = 1;
            break;
        }
        if (got == 0) {
            errno = 0;
            return -1;
        }
        done += (size_t)got;
        if (done < n) return 1; /* (a short read: the next page is not in the page cache) */
    }
    return done < n ? read_at(fd, buf + done, n - done, done) : 0;
}
#else
static int read_cached(int fd, unsigned char *buf, size_t n) { return read_at(fd, buf, n, 0); }
#endif

/* Sets the Python error for a failed read_at and returns NULL. */
static PyObject *read_failed(size_t n, uint64_t offset)
{
    if (errno == 0)
        return PyErr_Format(PyExc_ValueError, "short read: fewer than %zu bytes at offset %llu", n,
                            (unsigned long long)offset);
    return PyErr_SetFromErrno(PyExc_OSError);
}

static PyObject *unsupported(const char *what) { return PyErr_Format(PyExc_ValueError, "%s", what); }

/* The ZIP64 extra field's values (tag 1) for the fields that say 0xFFFFFFFF, in the order size, stored size,
   header offset; 0 on success, -1 (the caller raises) when there is no usable tag-1 field. */
static int zip64_fields(const unsigned char *extra, size_t extra_len, uint64_t *size, uint64_t *stored,
                        uint64_t *header)
{
    size_t pos = 0;
    while (pos + 4 <= extra_len) {
        size_t tag = u16(extra + pos), length = u16(extra + pos + 2);
        if (pos + 4 + length > extra_len) return -1;
        if (tag == 1) {
            size_t count = length / 8, used = 0;
            uint64_t *fields[3] = {size, stored, header};
            int k;
            for (k = 0; k < 3; k++)
                if (*fields[k] == FFFF32 && used < count) *fields[k] = u64(extra + pos + 4 + 8 * used++);
            return 0;
        }
        pos += 4 + length;
    }
    return -1;
}

/* Find the end of central directory record in tail[0:tail_len]: the last signature that leaves room for the
   fixed record. */
static Py_ssize_t find_eocd(const unsigned char *tail, size_t tail_len)
{
    Py_ssize_t pos;
    if (tail_len < EOCD_SIZE) return -1;
    for (pos = (Py_ssize_t)(tail_len - EOCD_SIZE); pos >= 0; pos--)
        if (memcmp(tail + pos, "PK\x05\x06", 4) == 0) return pos;
    return -1;
}

PyDoc_STRVAR(entries_doc, "entries(fd, file_size, whole_below=0) -> (head, {name: (data_offset, size)})\n\n"
                          "The entries of the zip archive open as `fd` (see nbprec/formats/_zipdir.c).");

/* entries() of the open file fd of file_size bytes (see the top of this file); `read_whole`, when given, is the
   whole file already read (a bytes object of file_size bytes, whose reference this steals), and fd is not used. */
static PyObject *entries_of(int fd, uint64_t file_size, long long whole_below, PyObject *read_whole, int wait)
{
    unsigned char tail_buf[TAIL], head_buf[HEAD], record[EOCD64_SIZE], local_buf[LOCAL_SIZE];
    const unsigned char *tail = tail_buf, *head = head_buf;
    unsigned char *dir_buf = NULL;
    const unsigned char *directory;
    uint64_t tail_len, head_len, start, n_entries, cd_size, cd_offset, k, pos;
    Py_ssize_t end;
    PyObject *whole = NULL, *entries = NULL, *result = NULL;
    tail_len = file_size < TAIL ? file_size : TAIL;
    head_len = file_size < HEAD ? file_size : HEAD;
    if (read_whole != NULL) {
        whole = read_whole;
        head = (const unsigned char *)PyBytes_AS_STRING(whole);
        head_len = file_size;
        tail = head + (file_size - tail_len);
    } else if (whole_below > 0 && file_size < (uint64_t)whole_below) { /* one read: the head is the whole file */
        unsigned char *bytes;
        int failed, error;
        whole = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)file_size);
        if (whole == NULL) return NULL;
        bytes = (unsigned char *)PyBytes_AS_STRING(whole);
        Py_BEGIN_ALLOW_THREADS /* (a fresh object, not yet seen by any other thread) */
        failed = wait ? read_at(fd, bytes, (size_t)file_size, 0) : read_cached(fd, bytes, (size_t)file_size);
        error = errno;
        Py_END_ALLOW_THREADS
        if (failed == 1) { /* not all in the page cache: asked again later */
            Py_DECREF(whole);
            Py_RETURN_FALSE;
        }
        if (failed != 0) {
            errno = error;
            read_failed((size_t)file_size, 0);
            goto done;
        }
        head = bytes;
        head_len = file_size;
        tail = bytes + (file_size - tail_len);
    } else if (read_at(fd, tail_buf, (size_t)tail_len, file_size - tail_len) != 0) {
        return read_failed((size_t)tail_len, file_size - tail_len);
    }

    end = find_eocd(tail, (size_t)tail_len);
    if (end < 0) {
        unsupported("no end-of-central-directory record in the last 8 KiB");
        goto done;
    }
    n_entries = u16(tail + end + 10);
    cd_size = u32(tail + end + 12);
    cd_offset = u32(tail + end + 16);
    if (cd_size == FFFF32 || cd_offset == FFFF32 || n_entries == 0xFFFF) {
        Py_ssize_t loc = end - EOCD64_LOCATOR_SIZE;
        uint64_t eocd64_offset;
        if (loc < 0 || memcmp(tail + loc, "PK\x06\x07", 4) != 0) {
            unsupported("ZIP64 end record expected");
            goto done;
        }
        eocd64_offset = u64(tail + loc + 8);
        if (eocd64_offset > file_size || file_size - eocd64_offset < EOCD64_SIZE) {
            unsupported("bad ZIP64 end record");
            goto done;
        }
        if (read_at(fd, record, EOCD64_SIZE, eocd64_offset) != 0) {
            read_failed(EOCD64_SIZE, eocd64_offset);
            goto done;
        }
        if (memcmp(record, "PK\x06\x06", 4) != 0) {
            unsupported("bad ZIP64 end record");
            goto done;
        }
        n_entries = u64(record + 32);
        cd_size = u64(record + 40);
        cd_offset = u64(record + 48);
    }
    if (cd_offset > file_size || cd_size > file_size - cd_offset || n_entries > MAX_ENTRIES) {
        unsupported("central directory outside the file");
        goto done;
    }
    if (cd_size > MAX_DIRECTORY) {
        unsupported("central directory of more than 64 MiB");
        goto done;
    }

    start = file_size - tail_len;
    if (whole != NULL) {
        directory = head + cd_offset; /* inside the file, checked above */
    } else if (cd_offset >= start && cd_offset - start + cd_size <= tail_len) {
        directory = tail + (cd_offset - start);
    } else {
        dir_buf = PyMem_Malloc(cd_size ? (size_t)cd_size : 1);
        if (dir_buf == NULL) {
            PyErr_NoMemory();
            goto done;
        }
        if (read_at(fd, dir_buf, (size_t)cd_size, cd_offset) != 0) {
            read_failed((size_t)cd_size, cd_offset);
            goto done;
        }
        directory = dir_buf;
    }
    if (whole == NULL && read_at(fd, head_buf, (size_t)head_len, 0) != 0) {
        read_failed((size_t)head_len, 0);
        goto done;
    }

    entries = PyDict_New();
    if (entries == NULL) goto done;
    for (k = 0, pos = 0; k < n_entries; k++) {
        const unsigned char *e = directory + pos, *local;
        uint64_t method, stored, size, header, name_len, extra_len, comment_len, data_offset;
        PyObject *name, *value;
        int set;
        if (pos + CENTRAL_SIZE > cd_size || memcmp(e, "PK\x01\x02", 4) != 0) {
            unsupported("bad central directory entry");
            goto fail;
        }
        method = u16(e + 10);
        stored = u32(e + 20);
        size = u32(e + 24);
        name_len = u16(e + 28);
        extra_len = u16(e + 30);
        comment_len = u16(e + 32);
        header = u32(e + 42);
        if (pos + CENTRAL_SIZE + name_len + extra_len > cd_size) {
            unsupported("bad central directory entry");
            goto fail;
        }
        if ((size == FFFF32 || stored == FFFF32 || header == FFFF32) &&
            zip64_fields(e + CENTRAL_SIZE + name_len, (size_t)extra_len, &size, &stored, &header) != 0) {
            unsupported("ZIP64 sizes without a ZIP64 extra field");
            goto fail;
        }
        if (method != 0 || stored != size) {
            data_offset = (uint64_t)-1;
        } else { /* the data follows the local header, whose name and extra lengths are its own */
            if (header > file_size || file_size - header < LOCAL_SIZE) {
                unsupported("short read: local header past the end of the file");
                goto fail;
            }
            if (header + LOCAL_SIZE <= head_len) {
                local = head + header;
            } else {
                if (read_at(fd, local_buf, LOCAL_SIZE, header) != 0) {
                    read_failed(LOCAL_SIZE, header);
                    goto fail;
                }
                local = local_buf;
            }
            if (memcmp(local, "PK\x03\x04", 4) != 0) {
                unsupported("bad local file header");
                goto fail;
            }
            data_offset = header + LOCAL_SIZE + u16(local + 26) + u16(local + 28);
        }
        name = PyBytes_FromStringAndSize((const char *)e + CENTRAL_SIZE, (Py_ssize_t)name_len);
        if (name == NULL) goto fail;
        value = Py_BuildValue("(LK)", data_offset == (uint64_t)-1 ? -1LL : (long long)data_offset,
                              (unsigned long long)size);
        if (value == NULL) {
            Py_DECREF(name);
            goto fail;
        }
        set = PyDict_SetItem(entries, name, value);
        Py_DECREF(name);
        Py_DECREF(value);
        if (set < 0) goto fail;
        pos += CENTRAL_SIZE + name_len + extra_len + comment_len;
    }
    result = whole != NULL ? Py_BuildValue("(OO)", whole, entries)
                           : Py_BuildValue("(y#O)", (const char *)head, (Py_ssize_t)head_len, entries);
fail:
    Py_XDECREF(entries);
done:
    Py_XDECREF(whole);
    PyMem_Free(dir_buf);
    return result;
}

static PyObject *py_entries(PyObject *self, PyObject *args)
{
    int fd;
    long long file_size, whole_below = 0;
    (void)self;
    if (!PyArg_ParseTuple(args, "iL|L:entries", &fd, &file_size, &whole_below)) return NULL;
    if (file_size < 0) return unsupported("negative file size");
    return entries_of(fd, (uint64_t)file_size, whole_below, NULL, 1);
}

#ifdef O_NOFOLLOW
/* The small file `name` opened as read_small() takes it (no symbolic link followed, no blocking, a regular file of
   1 to whole_below - 1 bytes): its descriptor, its size in *size; -1 for any other (nothing left open). Called
   without the GIL. */
static int open_small(const char *name, long long whole_below, long long *size)
{
    struct stat info;
    int fd = open(name, O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return -1;
    if (fstat(fd, &info) != 0 || !S_ISREG(info.st_mode) || info.st_size <= 0 || info.st_size >= whole_below) {
        close(fd);
        return -1;
    }
    *size = (long long)info.st_size;
    return fd;
}
#endif

PyDoc_STRVAR(read_small_doc,
             "read_small(path, whole_below, wait=True) -> (head, {name: (data_offset, size)}), None or False\n\n"
             "entries() of the regular file `path` read whole, opened without following a symbolic link and\n"
             "without blocking; None when it cannot be opened, is not a regular file or its size is not\n"
             "between 1 and whole_below - 1 bytes. The GIL is released while the file is opened and read.\n"
             "wait=False: False when part of the file is not in the page cache (its reading from the disk has\n"
             "started; nothing waits for it).");

static PyObject *py_read_small(PyObject *self, PyObject *args)
{
    PyObject *path_bytes, *result;
    long long whole_below;
    int wait = 1;
    (void)self;
    if (!PyArg_ParseTuple(args, "O&L|p:read_small", PyUnicode_FSConverter, &path_bytes, &whole_below, &wait))
        return NULL;
#ifdef O_NOFOLLOW
    {
        int fd;
        long long size = 0;
        const char *name = PyBytes_AS_STRING(path_bytes); /* (held until the DECREF below) */
        Py_BEGIN_ALLOW_THREADS
        fd = open_small(name, whole_below, &size);
        Py_END_ALLOW_THREADS
        Py_DECREF(path_bytes);
        if (fd < 0) Py_RETURN_NONE;
        result = entries_of(fd, (uint64_t)size, whole_below, NULL, wait);
        close(fd);
        return result;
    }
#else /* links cannot be refused at open: the caller's checked path */
    Py_DECREF(path_bytes);
    (void)result;
    Py_RETURN_NONE;
#endif
}

PyDoc_STRVAR(read_small_many_doc,
             "read_small_many(paths, whole_below, entries=True, wait=True) -> [read_small(path, whole_below), ...]\n\n"
             "read_small() of each path, the files opened and read in one pass without the GIL (threads measuring\n"
             "pairs hand it over once for a batch's payloads, not twice a pair). A file that read_small() would\n"
             "refuse, or raise ValueError or OSError for, gives None. With entries false, each file's bytes\n"
             "instead (files that are not zip archives: .npy payloads), None for a file read_small() would not open.\n"
             "wait=False: False for a file part of which is not in the page cache (as read_small(wait=False)).");

static PyObject *py_read_small_many(PyObject *self, PyObject *args)
{
    PyObject *paths, *seq, *out = NULL, **names = NULL, **wholes = NULL;
    long long whole_below, *sizes = NULL;
    int *fds = NULL, *failed = NULL, parse = 1, wait = 1;
    Py_ssize_t n, i;
    (void)self;
    if (!PyArg_ParseTuple(args, "OL|pp:read_small_many", &paths, &whole_below, &parse, &wait)) return NULL;
    seq = PySequence_Fast(paths, "read_small_many: paths must be a sequence");
    if (seq == NULL) return NULL;
    n = PySequence_Fast_GET_SIZE(seq);
    names = PyMem_Calloc((size_t)n + 1, sizeof(PyObject *));
    wholes = PyMem_Calloc((size_t)n + 1, sizeof(PyObject *));
    sizes = PyMem_Calloc((size_t)n + 1, sizeof(long long));
    fds = PyMem_Malloc(((size_t)n + 1) * sizeof(int));
    failed = PyMem_Calloc((size_t)n + 1, sizeof(int));
    if (names == NULL || wholes == NULL || sizes == NULL || fds == NULL || failed == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (i = 0; i < n; i++) {
        fds[i] = -1;
        if (!PyUnicode_FSConverter(PySequence_Fast_GET_ITEM(seq, i), &names[i])) goto done;
    }
#ifdef O_NOFOLLOW
    Py_BEGIN_ALLOW_THREADS
    for (i = 0; i < n; i++) fds[i] = open_small(PyBytes_AS_STRING(names[i]), whole_below, &sizes[i]);
    Py_END_ALLOW_THREADS
#endif
    for (i = 0; i < n; i++)
        if (fds[i] >= 0 && (wholes[i] = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)sizes[i])) == NULL) goto done;
    Py_BEGIN_ALLOW_THREADS /* (fresh objects, not yet seen by any other thread) */
    for (i = 0; i < n; i++) {
        if (fds[i] < 0) continue;
        unsigned char *bytes = (unsigned char *)PyBytes_AS_STRING(wholes[i]);
        int got = wait ? read_at(fds[i], bytes, (size_t)sizes[i], 0) : read_cached(fds[i], bytes, (size_t)sizes[i]);
        failed[i] = got == 1 ? 2 : got != 0; /* 2: not all in the page cache */
        close(fds[i]);
        fds[i] = -1;
    }
    Py_END_ALLOW_THREADS
    out = PyList_New(n);
    if (out == NULL) goto done;
    for (i = 0; i < n; i++) {
        PyObject *found = NULL;
        if (wholes[i] != NULL && !failed[i] && !parse) {
            found = wholes[i]; /* the file's bytes */
            wholes[i] = NULL;
        } else if (wholes[i] != NULL && !failed[i]) {
            found = entries_of(-1, (uint64_t)sizes[i], whole_below, wholes[i], 1);
            wholes[i] = NULL; /* (stolen) */
            if (found == NULL) {
                if (!PyErr_ExceptionMatches(PyExc_ValueError) && !PyErr_ExceptionMatches(PyExc_OSError)) {
                    Py_CLEAR(out);
                    goto done;
                }
                PyErr_Clear();
            }
        }
        if (found == NULL) {
            found = failed[i] == 2 ? Py_False : Py_None;
            Py_INCREF(found);
        }
        PyList_SET_ITEM(out, i, found);
    }
done:
    if (fds != NULL)
        for (i = 0; i < n; i++)
            if (fds[i] >= 0) close(fds[i]);
    if (names != NULL)
        for (i = 0; i < n; i++) Py_XDECREF(names[i]);
    if (wholes != NULL)
        for (i = 0; i < n; i++) Py_XDECREF(wholes[i]);
    PyMem_Free(names);
    PyMem_Free(wholes);
    PyMem_Free(sizes);
    PyMem_Free(fds);
    PyMem_Free(failed);
    Py_DECREF(seq);
    return out;
}

/* ---- the tensor of a one-tensor archive ------------------------------------------------------------ */

enum { ENTRY_ERROR = -1, ENTRY_ABSENT = 0, ENTRY_STORED = 1, ENTRY_UNUSABLE = 2 };

/* Entry `prefix` + `suffix` of read_small()'s `entries`: ENTRY_STORED with its (offset, size) when it is stored
   (offset >= 0) and lies inside the file's file_size bytes, ENTRY_ABSENT, ENTRY_UNUSABLE for any other, or
   ENTRY_ERROR with an error set. */
static int stored_entry(PyObject *entries, const char *prefix, Py_ssize_t prefix_len, const char *suffix,
                        Py_ssize_t suffix_len, long long file_size, long long *offset, long long *size)
{
    PyObject *name = PyBytes_FromStringAndSize(NULL, prefix_len + suffix_len), *value;
    if (name == NULL) return ENTRY_ERROR;
    memcpy(PyBytes_AS_STRING(name), prefix, (size_t)prefix_len);
    memcpy(PyBytes_AS_STRING(name) + prefix_len, suffix, (size_t)suffix_len);
    value = PyDict_GetItemWithError(entries, name); /* (borrowed) */
    Py_DECREF(name);
    if (value == NULL) return PyErr_Occurred() ? ENTRY_ERROR : ENTRY_ABSENT;
    if (!PyTuple_Check(value) || PyTuple_GET_SIZE(value) != 2) return ENTRY_UNUSABLE;
    *offset = PyLong_AsLongLong(PyTuple_GET_ITEM(value, 0));
    *size = PyLong_AsLongLong(PyTuple_GET_ITEM(value, 1));
    if (PyErr_Occurred()) {
        PyErr_Clear();
        return ENTRY_UNUSABLE;
    }
    return *offset >= 0 && *size >= 0 && *offset <= file_size && *size <= file_size - *offset ? ENTRY_STORED
                                                                                             : ENTRY_UNUSABLE;
}

/* A tuple of at most 64 non-negative ints that fit in a long long, copied to out[0:*n]; 0 for anything else. */
static int int_tuple(PyObject *obj, long long *out, Py_ssize_t *n)
{
    Py_ssize_t k;
    if (!PyTuple_Check(obj) || PyTuple_GET_SIZE(obj) > 64) return 0;
    *n = PyTuple_GET_SIZE(obj);
    for (k = 0; k < *n; k++) {
        int overflow = 0;
        PyObject *item = PyTuple_GET_ITEM(obj, k);
        if (!PyLong_Check(item)) return 0;
        out[k] = PyLong_AsLongLongAndOverflow(item, &overflow);
        if (overflow || out[k] < 0) return 0;
    }
    return 1;
}

/* Whether data.pkl's description (storage key, dtype, offset, size, stride) is one non-empty C-contiguous tensor
   of `dtype` and `shape` inside the storage's nbytes bytes; its element offset and count in *offset and *numel.
   (Geometry Python's checks would also refuse, negative sizes or values past 2^63, is refused here outright.) */
static int plain_tensor(PyObject *description, PyObject *dtype, PyObject *shape, long long itemsize, long long nbytes,
                        long long *offset, long long *numel)
{
    long long size[64], stride[64], step = 1, last, count = 1;
    Py_ssize_t n_size, n_stride, k;
    int overflow = 0;
    PyObject *kind = PyTuple_GET_ITEM(description, 1);
    if (!PyUnicode_Check(kind) || PyUnicode_Compare(kind, dtype) != 0 ||
        PyObject_RichCompareBool(PyTuple_GET_ITEM(description, 3), shape, Py_EQ) != 1) {
        PyErr_Clear(); /* (a comparison that failed: not the tensor asked for) */
        return 0;
    }
    *offset = PyLong_Check(PyTuple_GET_ITEM(description, 2))
                  ? PyLong_AsLongLongAndOverflow(PyTuple_GET_ITEM(description, 2), &overflow)
                  : -1;
    if (overflow || *offset < 0 || !int_tuple(PyTuple_GET_ITEM(description, 3), size, &n_size) ||
        !int_tuple(PyTuple_GET_ITEM(description, 4), stride, &n_stride) || n_size != n_stride)
        return 0;
    last = *offset;
    for (k = n_size - 1; k >= 0; k--) { /* C-contiguous: each stride the product of the later sizes (at least 1) */
        if (stride[k] != step || __builtin_mul_overflow(count, size[k], &count)) return 0;
        if (size[k] > 1 && (__builtin_add_overflow(last, (size[k] - 1) * stride[k], &last) ||
                            __builtin_mul_overflow(step, size[k], &step)))
            return 0;
    }
    *numel = count;
    return count > 0 && nbytes % itemsize == 0 && last < nbytes / itemsize;
}

/* bytes.strip() of data[0:size] == b"little" */
static int is_little(const char *data, long long size)
{
    static const char space[] = " \t\n\r\v\f";
    while (size > 0 && memchr(space, data[0], sizeof space - 1) != NULL) data++, size--;
    while (size > 0 && memchr(space, data[size - 1], sizeof space - 1) != NULL) size--;
    return size == 6 && memcmp(data, "little", 6) == 0;
}

PyDoc_STRVAR(tensor_start_doc,
             "tensor_start(head, entries, dtype, itemsize, shape, describe) -> (start, numel) or None\n\n"
             "Where the tensor of a plain one-tensor archive starts in `head` (the whole file) and its element\n"
             "count, given read_small()'s `entries`: the first entry named data.pkl, the byte order little-endian,\n"
             "describe(data.pkl's bytes) (None, or (storage key, dtype, offset, size, stride)) a C-contiguous,\n"
             "non-empty tensor of `dtype` (`itemsize` bytes an element) and `shape`, inside its stored storage\n"
             "entry. None for any other archive: what nbprec/formats/_ptzip.py's small_tensor checks, in C.");

static PyObject *py_tensor_start(PyObject *self, PyObject *args)
{
    PyObject *head, *entries, *dtype, *shape, *describe, *key, *value, *description;
    const char *name = NULL, *data, *storage_key;
    Py_ssize_t pos = 0, name_len = 0, prefix_len, key_len;
    long long itemsize, offset = 0, size = 0, start, nbytes, element_offset, numel, file_size;
    int found;
    (void)self;
    if (!PyArg_ParseTuple(args, "SO!ULO!O:tensor_start", &head, &PyDict_Type, &entries, &dtype, &itemsize,
                          &PyTuple_Type, &shape, &describe))
        return NULL;
    data = PyBytes_AS_STRING(head);
    file_size = PyBytes_GET_SIZE(head);
    while (PyDict_Next(entries, &pos, &key, &value)) { /* torch.save writes data.pkl first */
        if (!PyBytes_Check(key)) continue;
        name = PyBytes_AS_STRING(key);
        name_len = PyBytes_GET_SIZE(key);
        if ((name_len >= 9 && memcmp(name + name_len - 9, "/data.pkl", 9) == 0) ||
            (name_len == 8 && memcmp(name, "data.pkl", 8) == 0))
            break;
        name = NULL;
    }
    if (name == NULL || itemsize <= 0) Py_RETURN_NONE;
    prefix_len = name_len - 8;
    found = stored_entry(entries, name, prefix_len, "byteorder", 9, file_size, &offset, &size);
    if (found == ENTRY_ERROR) return NULL;
    if (found == ENTRY_UNUSABLE || (found == ENTRY_STORED && !is_little(data + offset, size))) Py_RETURN_NONE;
    found = stored_entry(entries, name, prefix_len, "data.pkl", 8, file_size, &offset, &size);
    if (found != ENTRY_STORED) {
        if (found == ENTRY_ERROR) return NULL;
        Py_RETURN_NONE;
    }
    value = PyBytes_FromStringAndSize(data + offset, (Py_ssize_t)size);
    if (value == NULL) return NULL;
    description = PyObject_CallOneArg(describe, value);
    Py_DECREF(value);
    if (description == NULL) return NULL;
    if (!PyTuple_Check(description) || PyTuple_GET_SIZE(description) != 5 ||
        !PyUnicode_Check(PyTuple_GET_ITEM(description, 0)) ||
        (storage_key = PyUnicode_AsUTF8AndSize(PyTuple_GET_ITEM(description, 0), &key_len)) == NULL) {
        PyErr_Clear(); /* (None, or a key that is not UTF-8: not an archive this reads) */
        Py_DECREF(description);
        Py_RETURN_NONE;
    }
    {
        PyObject *suffix = PyBytes_FromStringAndSize(NULL, 5 + key_len);
        if (suffix == NULL) {
            Py_DECREF(description);
            return NULL;
        }
        memcpy(PyBytes_AS_STRING(suffix), "data/", 5);
        memcpy(PyBytes_AS_STRING(suffix) + 5, storage_key, (size_t)key_len);
        found = stored_entry(entries, name, prefix_len, PyBytes_AS_STRING(suffix), 5 + key_len, file_size, &start,
                             &nbytes);
        Py_DECREF(suffix);
    }
    if (found != ENTRY_STORED || !plain_tensor(description, dtype, shape, itemsize, nbytes, &element_offset, &numel)) {
        Py_DECREF(description);
        if (found == ENTRY_ERROR) return NULL;
        Py_RETURN_NONE;
    }
    Py_DECREF(description);
    return Py_BuildValue("(LL)", start + element_offset * itemsize, numel);
}

/* ---- plain .npy payloads (nbprec's own dumps) ------------------------------------------------------ */

/* Where the payload of the .npy file `data` (size bytes) starts, when its header is the plain one numpy writes for
   `descr` (say "<f4"), C order and the ndim dimensions `shape`, and the payload's nbytes bytes all follow it: what
   nbprec/formats/_npyfile.py's small_npy takes (header_span, then its HEADER pattern in full, the shape's digits
   read with the spaces between them dropped and empty items skipped, as parse_header reads them); -1 for any
   other file. The tests hold the two to each other on valid, unusual and damaged headers. */
static Py_ssize_t npy_start(const unsigned char *data, Py_ssize_t size, const char *descr, Py_ssize_t descr_len,
                            const long long *shape, Py_ssize_t ndim, long long nbytes)
{
    static const char head[] = "{'descr': '", middle[] = "', 'fortran_order': False, 'shape': (";
    const unsigned char *p, *end;
    Py_ssize_t start, dims = 0;
    uint64_t header_len;
    if (size < 12 || memcmp(data, "\x93NUMPY", 6) != 0 || data[6] < 1 || data[6] > 3) return -1;
    start = data[6] == 1 ? 10 : 12;
    header_len = data[6] == 1 ? u16(data + 8) : u32(data + 8);
    if (header_len > (uint64_t)(size - start)) return -1;
    p = data + start;
    end = p + header_len;
    if ((size_t)(end - p) < sizeof head - 1 || memcmp(p, head, sizeof head - 1) != 0) return -1;
    p += sizeof head - 1;
    if (end - p < descr_len || memcmp(p, descr, (size_t)descr_len) != 0) return -1;
    p += descr_len;
    if ((size_t)(end - p) < sizeof middle - 1 || memcmp(p, middle, sizeof middle - 1) != 0) return -1;
    p += sizeof middle - 1;
    while (p < end && *p != ')') { /* items of digits and spaces between commas */
        long long value = 0;
        int digits = 0;
        for (; p < end && *p != ',' && *p != ')'; p++) {
            if (*p == ' ') continue;
            if (*p < '0' || *p > '9') return -1;
            if (value > (LLONG_MAX - 9) / 10) return -1; /* (larger than any dimension asked for) */
            value = value * 10 + (*p - '0');
            digits = 1;
        }
        if (digits) {
            if (dims >= ndim || value != shape[dims]) return -1;
            dims++;
        }
        if (p < end && *p == ',') p++;
    }
    if (dims != ndim || end - p < 2 || p[0] != ')' || p[1] != ',') return -1;
    for (p += 2; p < end && *p == ' '; p++) {}
    if (p == end || *p != '}') return -1;
    for (p++; p < end && *p == ' '; p++) {}
    if (p < end && *p == '\n') p++;
    if (p != end || nbytes > size - (start + (Py_ssize_t)header_len)) return -1;
    return start + (Py_ssize_t)header_len;
}

/* The arguments npy_start() takes besides the file, from Python's descr (str), shape (a sequence of ints) and
   itemsize; 0 when the shape cannot be one (too many dimensions, not ints, negative), -1 with an error set. */
static int npy_asked(PyObject *descr_obj, PyObject *shape_obj, long long itemsize, const char **descr,
                     Py_ssize_t *descr_len, long long *shape, Py_ssize_t *ndim, long long *nbytes)
{
    PyObject *seq;
    Py_ssize_t i;
    *descr = PyUnicode_AsUTF8AndSize(descr_obj, descr_len);
    if (*descr == NULL) return -1;
    seq = PySequence_Fast(shape_obj, "shape must be a sequence");
    if (seq == NULL) return -1;
    *ndim = PySequence_Fast_GET_SIZE(seq);
    *nbytes = itemsize;
    if (*ndim > 64 || itemsize <= 0) {
        Py_DECREF(seq);
        return 0;
    }
    for (i = 0; i < *ndim; i++) {
        PyObject *item = PySequence_Fast_GET_ITEM(seq, i);
        int overflow = 0;
        long long v = PyLong_Check(item) ? PyLong_AsLongLongAndOverflow(item, &overflow) : -1;
        if (v < 0 || overflow || (v > 0 && *nbytes > LLONG_MAX / v)) {
            Py_DECREF(seq);
            if (PyErr_Occurred()) return -1;
            return 0;
        }
        shape[i] = v;
        *nbytes *= v;
    }
    Py_DECREF(seq);
    return 1;
}

PyDoc_STRVAR(npy_start_doc,
             "npy_start(data, descr, shape, itemsize) -> start or None\n\n"
             "Where the payload of the .npy file `data` (bytes) starts when its header is the plain C-order one of\n"
             "`descr` and `shape` and every payload byte is there (what _npyfile.small_npy checks); None otherwise.");

static PyObject *py_npy_start(PyObject *self, PyObject *args)
{
    PyObject *data, *descr_obj, *shape_obj;
    long long itemsize, shape[64], nbytes;
    const char *descr;
    Py_ssize_t descr_len, ndim, start;
    int asked;
    (void)self;
    if (!PyArg_ParseTuple(args, "SUOL:npy_start", &data, &descr_obj, &shape_obj, &itemsize)) return NULL;
    asked = npy_asked(descr_obj, shape_obj, itemsize, &descr, &descr_len, shape, &ndim, &nbytes);
    if (asked < 0) return NULL;
    start = asked ? npy_start((const unsigned char *)PyBytes_AS_STRING(data), PyBytes_GET_SIZE(data), descr,
                              descr_len, shape, ndim, nbytes)
                  : -1;
    if (start < 0) Py_RETURN_NONE;
    return PyLong_FromSsize_t(start);
}

PyDoc_STRVAR(read_npy_doc,
             "read_npy(path, whole_below, descr, shape, itemsize, wait=True) -> (data, start), None or False\n\n"
             "The small .npy file `path` read whole as read_small() opens it (no symbolic link followed, a regular\n"
             "file of 1 to whole_below - 1 bytes), with npy_start() of it: one call, without the GIL while the file\n"
             "is opened and read. None for a file read_small() would not open or npy_start() refuses (the caller's\n"
             "checked path says why), or a failed read; False (wait=False) when part of it is not in the page cache.");

static PyObject *py_read_npy(PyObject *self, PyObject *args)
{
    PyObject *path_bytes, *descr_obj, *shape_obj, *whole = NULL;
    long long whole_below, itemsize, shape[64], nbytes, size = 0;
    const char *descr;
    Py_ssize_t descr_len, ndim, start;
    int wait = 1, asked, fd = -1, got = -1;
    (void)self;
    if (!PyArg_ParseTuple(args, "O&LUOL|p:read_npy", PyUnicode_FSConverter, &path_bytes, &whole_below, &descr_obj,
                          &shape_obj, &itemsize, &wait))
        return NULL;
    asked = npy_asked(descr_obj, shape_obj, itemsize, &descr, &descr_len, shape, &ndim, &nbytes);
    if (asked <= 0) {
        Py_DECREF(path_bytes);
        if (asked < 0) return NULL;
        Py_RETURN_NONE;
    }
#ifdef O_NOFOLLOW
    {
        const char *name = PyBytes_AS_STRING(path_bytes);
        Py_BEGIN_ALLOW_THREADS
        fd = open_small(name, whole_below, &size);
        Py_END_ALLOW_THREADS
    }
#endif
    Py_DECREF(path_bytes);
    if (fd < 0) Py_RETURN_NONE;
    whole = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)size);
    if (whole == NULL) {
        close(fd);
        return NULL;
    }
    {
        unsigned char *bytes = (unsigned char *)PyBytes_AS_STRING(whole);
        Py_BEGIN_ALLOW_THREADS /* (a fresh object, not yet seen by any other thread) */
        got = wait ? read_at(fd, bytes, (size_t)size, 0) : read_cached(fd, bytes, (size_t)size);
        close(fd);
        Py_END_ALLOW_THREADS
    }
    start = got == 0 ? npy_start((const unsigned char *)PyBytes_AS_STRING(whole), (Py_ssize_t)size, descr, descr_len,
                                 shape, ndim, nbytes)
                     : -1;
    if (start < 0) {
        Py_DECREF(whole);
        if (got == 1) Py_RETURN_FALSE;
        Py_RETURN_NONE;
    }
    return Py_BuildValue("(Nn)", whole, start);
}

static PyMethodDef methods[] = {
    {"entries", py_entries, METH_VARARGS, entries_doc},
    {"read_small", py_read_small, METH_VARARGS, read_small_doc},
    {"read_small_many", py_read_small_many, METH_VARARGS, read_small_many_doc},
    {"tensor_start", py_tensor_start, METH_VARARGS, tensor_start_doc},
    {"npy_start", py_npy_start, METH_VARARGS, npy_start_doc},
    {"read_npy", py_read_npy, METH_VARARGS, read_npy_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_zipdir", "Where the entries of a stored zip archive start (see nbprec/formats/_zipdir.c).",
    -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__zipdir(void) { return PyModule_Create(&module); }
