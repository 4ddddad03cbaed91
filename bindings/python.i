/*
 * python.i - Python typemaps for watchlock.i (included only for SWIGPYTHON).
 *
 * The generated module (watchlock._native) is a thin, private mirror of
 * watchlock.h: every function keeps its C shape except that
 *   - the "watchlock_" prefix is stripped (lock_acquire, client_open ...);
 *   - lock names (const void *name, size_t name_len) take str (UTF-8) or bytes;
 *   - output pointers are not arguments but extra return values, after the
 *     status: `status, client = client_open(url)`,
 *     `status, held, remaining_ms, fence = client_inspect(client, name)`,
 *     `status, report = client_check(client)`,
 *     `status, owner, held, remaining_ms, fence = client_inspect_owner(client, name)`;
 *   - functions that return bytes with their length (`const char *` plus
 *     `size_t *len`: owner_host, owner_label, lock_list_name) return bytes;
 *   - int64_t/uint64_t are Python ints; handles are opaque pointer objects
 *     whose lifetime the hand-written layer (python/watchlock/) manages.
 * Status codes are returned, never raised: the Python layer maps them to
 * exceptions, reading lock_last_error() on the same thread right after.
 *
 * The module is built with threads="1": the GIL is released around every C
 * call, except the trivial getters marked %nothread below (no I/O, no wait).
 */

%include <stdint.i>

%rename("%(strip:[watchlock_])s") "";

/* Python does not run code on the watchdog thread: loss is delivered through
 * the client's event queue (client_enable_lost_events/next_lost_event). */
%ignore watchlock_lock_set_on_lost;
%ignore watchlock_lost_fn;
/* The name is kept by the Python layer (binary-safe); a char * return would
 * cut names at their first NUL. */
%ignore watchlock_lock_name;

/* Never block, no I/O: keep the GIL (releasing it costs more than the call). */
%nothread watchlock_version;
%nothread watchlock_version_string;
%nothread watchlock_strerror;
%nothread watchlock_last_error;
%nothread watchlock_lost_reason_str;
%nothread watchlock_lock_state;
%nothread watchlock_lock_lost_reason;
%nothread watchlock_lock_remaining_ms;
%nothread watchlock_lock_fencing_token;
%nothread watchlock_lock_hold_count;
%nothread watchlock_lock_renewals;
%nothread watchlock_lock_id;
%nothread watchlock_lock_lease;
%nothread watchlock_lock_last_lost_reason;
%nothread watchlock_parse_duration;
%nothread watchlock_parse_renew_interval;
%nothread watchlock_client_stat;
%nothread watchlock_client_histogram;
%nothread watchlock_report_count;
%nothread watchlock_report_code;
%nothread watchlock_report_message;
%nothread watchlock_report_free;
%nothread watchlock_check_name;
%nothread watchlock_lock_set_owner_label;
%nothread watchlock_owner_host;
%nothread watchlock_owner_pid;
%nothread watchlock_owner_label;
%nothread watchlock_owner_free;
%nothread watchlock_lock_list_count;
%nothread watchlock_lock_list_name;
%nothread watchlock_lock_list_remaining_ms;
%nothread watchlock_lock_list_fence;
%nothread watchlock_lock_list_owner;
%nothread watchlock_lock_list_free;
%nothread watchlock_lock_name_count;
%nothread watchlock_lock_name_at;
%nothread watchlock_lock_fencing_token_at;
%nothread watchlock_lock_lost_name;
%nothread watchlock_lock_kind;
%nothread watchlock_lock_permits;
%nothread watchlock_name_info_kind;
%nothread watchlock_name_info_permits;
%nothread watchlock_name_info_in_use;
%nothread watchlock_name_info_holders;
%nothread watchlock_name_info_writer;
%nothread watchlock_name_info_queue_length;
%nothread watchlock_name_info_oldest_wait_ms;
%nothread watchlock_name_info_fence;
%nothread watchlock_name_info_remaining_ms;
%nothread watchlock_name_info_holder_count;
%nothread watchlock_name_info_holder_owner;
%nothread watchlock_name_info_holder_permits;
%nothread watchlock_name_info_holder_writer;
%nothread watchlock_name_info_holder_remaining_ms;
%nothread watchlock_name_info_free;

/* ---- binary-safe lock names: str (encoded as UTF-8) or bytes ------------- */
%typemap(in) (const void *name, size_t name_len) {
    if (PyBytes_Check($input)) {
        char *buf_ = NULL;
        Py_ssize_t len_ = 0;
        if (PyBytes_AsStringAndSize($input, &buf_, &len_) < 0)
            SWIG_fail;
        $1 = (void *)buf_;
        $2 = (size_t)len_;
    } else if (PyUnicode_Check($input)) {
        Py_ssize_t len_ = 0;
        const char *buf_ = PyUnicode_AsUTF8AndSize($input, &len_);
        if (buf_ == NULL)
            SWIG_fail;
        $1 = (void *)buf_;
        $2 = (size_t)len_;
    } else {
        PyErr_Format(PyExc_TypeError, "lock name must be str or bytes, not %.100s",
                     Py_TYPE($input)->tp_name);
        SWIG_fail;
    }
}
%typemap(typecheck, precedence=SWIG_TYPECHECK_STRING) (const void *name, size_t name_len) {
    $1 = (PyBytes_Check($input) || PyUnicode_Check($input)) ? 1 : 0;
}

/* ---- output handles: returned after the status (None on failure) --------- */
%define WL_OUT_HANDLE(TYPE)
%typemap(in, numinputs=0) TYPE **out (TYPE *tmp_ = NULL) {
    $1 = &tmp_;
}
%typemap(argout) TYPE **out {
    $result = SWIG_Python_AppendOutput($result,
                                       SWIG_NewPointerObj(SWIG_as_voidptr(*$1), $*1_descriptor, 0));
}
%enddef
WL_OUT_HANDLE(watchlock_client)
WL_OUT_HANDLE(watchlock_lock)
/* A check's report: read with report_count/_code/_message, then report_free
 * (the Python layer copies it into a list and frees it at once). */
WL_OUT_HANDLE(watchlock_report)
/* Owner records and lock lists: read with the owner_* / lock_list_*
 * accessors, then owner_free / lock_list_free (the Python layer copies
 * them at once). A NULL owner (none recorded) comes back as None. */
WL_OUT_HANDLE(watchlock_owner)
WL_OUT_HANDLE(watchlock_lock_list)
/* What the server knows of a name (queued kinds): read with the
 * name_info_* accessors, then name_info_free (Client.inspect copies it). */
WL_OUT_HANDLE(watchlock_name_info)

/* list patterns are binary-safe like names */
%apply (const void *name, size_t name_len) { (const void *pattern, size_t pattern_len) };

/* `const char *f(..., size_t *len)`: bytes of that length (NUL bytes
 * included), None for NULL. */
%typemap(in, numinputs=0) size_t *len (size_t len_ = 0) {
    $1 = &len_;
}
%typemap(argout) size_t *len {
    Py_XDECREF($result);
    if (result != NULL) {
        $result = PyBytes_FromStringAndSize(result, (Py_ssize_t)*$1);
    } else {
        Py_INCREF(Py_None);
        $result = Py_None;
    }
}

/* ---- output integers: returned after the status -------------------------- */
%define WL_OUT_INT(CTYPE, NAME, CONVERT)
%typemap(in, numinputs=0) CTYPE *NAME (CTYPE tmp_ = 0) {
    $1 = &tmp_;
}
%typemap(argout) CTYPE *NAME {
    $result = SWIG_Python_AppendOutput($result, CONVERT(*$1));
}
%enddef
WL_OUT_INT(int, held, PyLong_FromLong)
WL_OUT_INT(int, released, PyLong_FromLong)
WL_OUT_INT(int, reason, PyLong_FromLong)
WL_OUT_INT(int64_t, remaining_ms, PyLong_FromLongLong)
WL_OUT_INT(int64_t, fence, PyLong_FromLongLong)
WL_OUT_INT(int64_t, out_ms, PyLong_FromLongLong)
WL_OUT_INT(int, renew_num, PyLong_FromLong)
WL_OUT_INT(int, renew_den, PyLong_FromLong)
WL_OUT_INT(int64_t, upper_us, PyLong_FromLongLong)
WL_OUT_INT(int64_t, count, PyLong_FromLongLong)
WL_OUT_INT(uint64_t, lock_id, PyLong_FromUnsignedLongLong)

/* uint64_t results (lock ids) as Python ints, never negative. */
%typemap(out) uint64_t {
    $result = PyLong_FromUnsignedLongLong((unsigned long long)$1);
}

/* ---- multi-lock names: a sequence of str (UTF-8) or bytes ------------------
 * `status, lock = multi_lock_new(client, names)`; the names are copied for
 * the call (the core copies them again into the handle). */
%typemap(in) (const void *const *names, const size_t *name_lens, size_t n) {
    PyObject *seq_ = PySequence_Fast($input, "names must be a sequence of str or bytes");
    if (seq_ == NULL)
        SWIG_fail;
    Py_ssize_t n_ = PySequence_Fast_GET_SIZE(seq_);
    void **p_ = calloc((size_t)n_ + 1, sizeof *p_);
    size_t *l_ = calloc((size_t)n_ + 1, sizeof *l_);
    $1 = (const void *const *)p_;
    $2 = l_;
    $3 = 0;
    if (p_ == NULL || l_ == NULL) {
        Py_DECREF(seq_);
        PyErr_NoMemory();
        SWIG_fail;
    }
    for (Py_ssize_t i_ = 0; i_ < n_; i_++) {
        PyObject *o_ = PySequence_Fast_GET_ITEM(seq_, i_);
        char *b_ = NULL;
        Py_ssize_t len_ = 0;
        if (PyBytes_Check(o_)) {
            if (PyBytes_AsStringAndSize(o_, &b_, &len_) < 0)
                b_ = NULL;
        } else if (PyUnicode_Check(o_)) {
            b_ = (char *)PyUnicode_AsUTF8AndSize(o_, &len_);
        } else {
            PyErr_Format(PyExc_TypeError, "lock name must be str or bytes, not %.100s", Py_TYPE(o_)->tp_name);
        }
        if (b_ == NULL || (p_[i_] = malloc((size_t)len_ + 1)) == NULL) {
            if (b_ != NULL)
                PyErr_NoMemory();
            Py_DECREF(seq_);
            SWIG_fail;
        }
        memcpy(p_[i_], b_, (size_t)len_);
        l_[i_] = (size_t)len_;
        $3 = (size_t)i_ + 1;
    }
    Py_DECREF(seq_);
}
%typemap(freearg) (const void *const *names, const size_t *name_lens, size_t n) {
    if ($1 != NULL)
        for (size_t i_ = 0; i_ < $3; i_++)
            free((void *)$1[i_]);
    free((void *)$1);
    free((void *)$2);
}

/* ---- a quorum's member URLs: a list or tuple of str (issue 21) ------------ */
/* watchlock_client_open_quorum(out, urls, n): `status, client =
 * client_open_quorum(["redis://a", "redis://b", ...])`. The strings are
 * borrowed from the sequence (UTF-8), which outlives the call; a NUL byte
 * in a URL is refused here, as C would cut the URL at it. */
%typemap(in) (const char *const *urls, size_t n) (PyObject *seq_ = NULL) {
    if (!PyList_Check($input) && !PyTuple_Check($input)) {
        PyErr_Format(PyExc_TypeError, "urls must be a list or tuple of str, not %.100s",
                     Py_TYPE($input)->tp_name);
        SWIG_fail;
    }
    seq_ = PySequence_Fast($input, "urls must be a list or tuple of str");
    if (seq_ == NULL)
        SWIG_fail;
    {
        Py_ssize_t n_ = PySequence_Fast_GET_SIZE(seq_), i_;
        $1 = ($1_ltype)calloc((size_t)(n_ > 0 ? n_ : 1), sizeof(char *));
        if ($1 == NULL) {
            PyErr_NoMemory();
            SWIG_fail;
        }
        $2 = (size_t)n_;
        for (i_ = 0; i_ < n_; i_++) {
            PyObject *item_ = PySequence_Fast_GET_ITEM(seq_, i_);
            Py_ssize_t len_ = 0;
            const char *s_;
            if (!PyUnicode_Check(item_)) {
                PyErr_Format(PyExc_TypeError, "urls[%zd] must be a str, not %.100s", i_,
                             Py_TYPE(item_)->tp_name);
                SWIG_fail;
            }
            s_ = PyUnicode_AsUTF8AndSize(item_, &len_);
            if (s_ == NULL)
                SWIG_fail;
            if ((size_t)len_ != strlen(s_)) {
                PyErr_Format(PyExc_ValueError, "urls[%zd] contains a NUL byte", i_);
                SWIG_fail;
            }
            ((const char **)$1)[i_] = s_;
        }
    }
}
%typemap(freearg) (const char *const *urls, size_t n) {
    free((void *)$1);
    Py_XDECREF(seq_$argnum);
}

/* Trivial getters of the quorum (no I/O). */
%nothread watchlock_client_member_count;
%nothread watchlock_lock_member_status;
