/*
 * _porteiro.c — the CPython extension porteiro._porteiro: libporteiro's
 * public C API (include/porteiro.h) for Python.
 *
 * THIS FILE HOLDS EVERY CALL TO LIBPORTEIRO of the Python binding (the
 * package python/porteiro/ is pure Python on top of it), so that a change
 * of the C API is adapted here and only here. It includes the public
 * header only, never src/.
 *
 * What it gives Python (the package wraps it: python/porteiro/__init__.py):
 *   Limiter       handles of the C library: a pool of blocking handles
 *                 (one per thread in use, up to `connections`, since one C
 *                 handle serialises its blocking calls on one connection)
 *                 and, per asyncio loop, one handle attached to that loop
 *                 with porteiro_attach_loop (add_reader / add_writer /
 *                 call_later / call_soon). The GIL is released while a
 *                 blocking call waits on Redis; the memory backend keeps
 *                 it (one handle, no wait).
 *   Limits        parsed limits ("gcra 10/1s burst 20, fixed_window
 *                 1000/1h") or a policy of a YAML config, with the name the
 *                 RateLimit headers carry.
 *   Decision      one answer (porteiro_decision) and its HTTP header
 *                 values (porteiro_http_fields_format: porteirod's own).
 *   PorteiroError, InvalidLimit(PorteiroError, ValueError), RedisError.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include <porteiro.h>
#include <porteiro_config.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

/* ---- module state ---------------------------------------------------- */

static PyObject *ErrorType;        /* porteiro.PorteiroError */
static PyObject *InvalidLimitType; /* porteiro.InvalidLimit */
static PyObject *RedisErrorType;   /* porteiro.RedisError */
static PyObject *get_running_loop; /* asyncio.events._get_running_loop */
static PyObject *invalid_state;    /* asyncio.InvalidStateError */
/* CPython 3.11's _asyncio keeps each thread's running loop in a holder
 * object under this key of the thread state's dict, a new holder each time
 * a loop starts or stops running: while the holder is the one seen last,
 * the running loop is the one found then. This spares the getpid(2) that
 * _get_running_loop makes on every call (a system call per acheck). Where
 * the key is absent (other versions), every call asks _get_running_loop. */
static PyObject *str_running_key;
static volatile unsigned long fork_generation; /* a fork empties the caches */
static PyObject *str_add_reader, *str_remove_reader, *str_add_writer, *str_remove_writer,
    *str_call_later, *str_call_soon, *str_cancel, *str_create_future, *str_set_result,
    *str_set_exception, *str_is_closed;

static PyTypeObject LimitsType, DecisionType, LimiterType, ConfigType, LoopCallbackType;

/* Limits texts parsed once per limiter, at most this many kept. */
#define LIMITS_CACHE_MAX 4096
/* Blocking handles one Limiter opens at most (threads beyond share them). */
#define MAX_CONNECTIONS 64
/* asyncio loops one Limiter serves at once (a handle each). */
#define MAX_LOOPS 8

/* ---- errors ------------------------------------------------------------ */

static const char *status_name(porteiro_status st) {
    switch (st) {
        case PORTEIRO_OK: return "ok";
        case PORTEIRO_ERR_INVALID: return "invalid";
        case PORTEIRO_ERR_KEY: return "key";
        case PORTEIRO_ERR_NOMEM: return "nomem";
        case PORTEIRO_ERR_CONNECT: return "connect";
        case PORTEIRO_ERR_TIMEOUT: return "timeout";
        case PORTEIRO_ERR_REDIS: return "redis";
        case PORTEIRO_ERR_AUTH: return "auth";
        case PORTEIRO_ERR_FULL: return "full";
        case PORTEIRO_ERR_PROTOCOL: return "protocol";
        case PORTEIRO_ERR_CIRCUIT_OPEN: return "circuit_open";
        case PORTEIRO_ERR_CONFIG: return "config";
        case PORTEIRO_ERR_UNSUPPORTED: return "unsupported";
        case PORTEIRO_ERR_PERMISSION: return "permission";
    }
    return "unknown";
}

/* The exception of a status: built, not raised. msg: porteiro's message
 * (errmsg / errbuf) or NULL / "" for the status's own text. */
static PyObject *make_error(porteiro_status st, const char *msg) {
    PyObject *type = ErrorType;
    if (st == PORTEIRO_ERR_INVALID || st == PORTEIRO_ERR_KEY)
        type = InvalidLimitType;
    else if (st == PORTEIRO_ERR_CONNECT || st == PORTEIRO_ERR_TIMEOUT || st == PORTEIRO_ERR_REDIS ||
             st == PORTEIRO_ERR_AUTH || st == PORTEIRO_ERR_PROTOCOL ||
             st == PORTEIRO_ERR_CIRCUIT_OPEN || st == PORTEIRO_ERR_PERMISSION)
        type = RedisErrorType;
    if (st == PORTEIRO_ERR_KEY && (msg == NULL || msg[0] == '\0'))
        msg = "invalid key: a key is 1 byte or more";
    PyObject *exc = PyObject_CallFunction(
        type, "s", msg != NULL && msg[0] != '\0' ? msg : porteiro_strerror(st));
    if (exc == NULL)
        return NULL;
    PyObject *name = PyUnicode_FromString(status_name(st));
    if (name == NULL || PyObject_SetAttrString(exc, "status", name) < 0) {
        Py_XDECREF(name);
        Py_DECREF(exc);
        return NULL;
    }
    Py_DECREF(name);
    return exc;
}

static PyObject *raise_status(porteiro_status st, const char *msg) {
    PyObject *exc = make_error(st, msg);
    if (exc != NULL) {
        PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
        Py_DECREF(exc);
    }
    return NULL;
}

/* ---- argument parsing (METH_FASTCALL | METH_KEYWORDS) ------------------ */

/* Fills out[i] for names[i] from positional then keyword arguments;
 * missing ones stay NULL. The first `required` are required. */
static int parse_args(const char *fname, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames,
                      const char *const *names, Py_ssize_t npos_max, Py_ssize_t required,
                      PyObject **out) {
    Py_ssize_t n = 0;
    while (names[n] != NULL)
        out[n++] = NULL;
    if (nargs > npos_max) {
        PyErr_Format(PyExc_TypeError, "%s() takes at most %zd positional arguments (%zd given)",
                     fname, npos_max, nargs);
        return -1;
    }
    for (Py_ssize_t i = 0; i < nargs; i++)
        out[i] = args[i];
    if (kwnames != NULL) {
        Py_ssize_t nk = PyTuple_GET_SIZE(kwnames);
        for (Py_ssize_t k = 0; k < nk; k++) {
            PyObject *kw = PyTuple_GET_ITEM(kwnames, k);
            Py_ssize_t i = 0;
            for (; i < n; i++)
                if (PyUnicode_CompareWithASCIIString(kw, names[i]) == 0)
                    break;
            if (i == n) {
                PyErr_Format(PyExc_TypeError, "%s() got an unexpected keyword argument '%U'", fname,
                             kw);
                return -1;
            }
            if (out[i] != NULL) {
                PyErr_Format(PyExc_TypeError, "%s() got multiple values for argument '%s'", fname,
                             names[i]);
                return -1;
            }
            out[i] = args[nargs + k];
        }
    }
    for (Py_ssize_t i = 0; i < required; i++)
        if (out[i] == NULL) {
            PyErr_Format(PyExc_TypeError, "%s() missing required argument '%s'", fname, names[i]);
            return -1;
        }
    return 0;
}

/* An int argument: def when absent or None. */
static int arg_int64(PyObject *o, int64_t def, const char *what, int64_t *out) {
    if (o == NULL || o == Py_None) {
        *out = def;
        return 0;
    }
    if (!PyLong_Check(o)) {
        PyErr_Format(PyExc_TypeError, "%s must be an int", what);
        return -1;
    }
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (v == -1 && PyErr_Occurred())
        return -1;
    if (overflow != 0) {
        PyErr_Format(InvalidLimitType, "%s is out of range", what);
        return -1;
    }
    *out = (int64_t)v;
    return 0;
}

/* A str key holding lone surrogates (undecodable bytes smuggled into a
 * str, os.fsdecode's) has no UTF-8: its surrogatepass bytes are the key,
 * so no key a client sends can turn a check into an error. A new
 * reference, or NULL (with no exception) when the key needs none. */
static PyObject *surrogate_key(PyObject *o) {
    if (!PyUnicode_Check(o) || PyUnicode_AsUTF8AndSize(o, NULL) != NULL)
        return NULL;
    if (!PyErr_ExceptionMatches(PyExc_UnicodeEncodeError))
        return NULL; /* the error stays: arg_key reports it */
    PyErr_Clear();
    PyObject *b = PyUnicode_AsEncodedString(o, "utf-8", "surrogatepass");
    if (b == NULL)
        PyErr_Clear(); /* arg_key says what is wrong */
    return b;
}

/* A key: str (UTF-8) or bytes; borrowed until the object goes. */
static int arg_key(PyObject *o, const char **key, size_t *len) {
    Py_ssize_t n;
    if (PyUnicode_Check(o)) {
        *key = PyUnicode_AsUTF8AndSize(o, &n);
        if (*key == NULL)
            return -1;
    } else if (PyBytes_Check(o)) {
        *key = PyBytes_AS_STRING(o);
        n = PyBytes_GET_SIZE(o);
    } else {
        PyErr_SetString(PyExc_TypeError, "a key is a str or bytes");
        return -1;
    }
    if (n == 0) {
        raise_status(PORTEIRO_ERR_KEY, NULL);
        return -1;
    }
    *len = (size_t)n;
    return 0;
}

/* ---- Config: a loaded YAML file, shared by its policies ---------------- */

typedef struct {
    PyObject_HEAD porteiro_config *cfg;
} ConfigObject;

static void Config_dealloc(ConfigObject *self) {
    porteiro_config_free(self->cfg);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyTypeObject ConfigType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "porteiro._porteiro._Config",
    .tp_basicsize = sizeof(ConfigObject),
    .tp_dealloc = (destructor)Config_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A porteiro YAML configuration (internal).",
};

/* ---- Limits ------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD porteiro_limit limits[PORTEIRO_MAX_LIMITS];
    size_t nlimits;
    PyObject *name;                /* str: the name in the RateLimit headers */
    PyObject *text;                /* str or NULL: what was parsed */
    PyObject *config;              /* ConfigObject or NULL: a policy of that file */
    const porteiro_policy *policy; /* into config's file, or NULL */
} LimitsObject;

static void Limits_dealloc(LimitsObject *self) {
    Py_XDECREF(self->name);
    Py_XDECREF(self->text);
    Py_XDECREF(self->config);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static LimitsObject *limits_parse(PyObject *text, PyObject *name) {
    const char *s = PyUnicode_AsUTF8(text);
    if (s == NULL)
        return NULL;
    LimitsObject *l = PyObject_New(LimitsObject, &LimitsType);
    if (l == NULL)
        return NULL;
    l->name = l->text = l->config = NULL;
    l->policy = NULL;
    l->nlimits = 0;
    char err[256] = "";
    porteiro_status st =
        porteiro_parse_limits(s, l->limits, PORTEIRO_MAX_LIMITS, &l->nlimits, err, sizeof(err));
    if (st != PORTEIRO_OK) {
        Py_DECREF(l);
        return (LimitsObject *)raise_status(st, err);
    }
    Py_INCREF(text);
    l->text = text;
    if (name == NULL || name == Py_None)
        l->name = PyUnicode_FromString("default");
    else {
        Py_INCREF(name);
        l->name = name;
    }
    if (l->name == NULL) {
        Py_DECREF(l);
        return NULL;
    }
    return l;
}

static PyObject *Limits_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"text", "name", NULL};
    PyObject *text, *name = NULL;
    (void)type;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "U|O!:Limits", kwlist, &text, &PyUnicode_Type,
                                     &name))
        return NULL;
    return (PyObject *)limits_parse(text, name);
}

static PyObject *Limits_repr(LimitsObject *self) {
    if (self->policy != NULL)
        return PyUnicode_FromFormat("<porteiro.Limits policy %R>", self->name);
    return PyUnicode_FromFormat("<porteiro.Limits %R name=%R>", self->text, self->name);
}

static PyObject *Limits_get_list(LimitsObject *self, void *closure) {
    (void)closure;
    PyObject *t = PyTuple_New((Py_ssize_t)self->nlimits);
    for (size_t i = 0; t != NULL && i < self->nlimits; i++) {
        const porteiro_limit *l = &self->limits[i];
        PyObject *e =
            Py_BuildValue("{s:s,s:L,s:L,s:L}", "algorithm", porteiro_algorithm_name(l->algorithm),
                          "limit", (long long)l->limit, "period_ms", (long long)l->period_ms,
                          "burst", (long long)(l->burst != 0 ? l->burst : l->limit));
        if (e == NULL) {
            Py_DECREF(t);
            return NULL;
        }
        PyTuple_SET_ITEM(t, (Py_ssize_t)i, e);
    }
    return t;
}

static PyObject *Limits_get_is_policy(LimitsObject *self, void *closure) {
    (void)closure;
    return PyBool_FromLong(self->policy != NULL);
}

static PyMemberDef Limits_members[] = {
    {"name", T_OBJECT, offsetof(LimitsObject, name), READONLY,
     "The name the RateLimit headers give (a policy's, or 'default')."},
    {"text", T_OBJECT, offsetof(LimitsObject, text), READONLY,
     "The text parsed, or None for a policy."},
    {NULL, 0, 0, 0, NULL},
};

static PyGetSetDef Limits_getset[] = {
    {"limits", (getter)Limits_get_list, NULL,
     "Each limit as a dict: algorithm, limit, period_ms, burst.", NULL},
    {"is_policy", (getter)Limits_get_is_policy, NULL, "True for a policy of a config file.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject LimitsType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "porteiro.Limits",
    .tp_basicsize = sizeof(LimitsObject),
    .tp_dealloc = (destructor)Limits_dealloc,
    .tp_repr = (reprfunc)Limits_repr,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Limits(text, name='default'): one or several limits in porteiro's compact "
              "form (\"gcra 10/1s burst 20, fixed_window 1000/1h\"), parsed once. Raises "
              "InvalidLimit with porteiro's message.",
    .tp_members = Limits_members,
    .tp_getset = Limits_getset,
    .tp_new = Limits_new,
};

/* ---- Decision --------------------------------------------------------- */

typedef struct {
    PyObject_HEAD porteiro_decision d;
    porteiro_limit limits[PORTEIRO_MAX_LIMITS]; /* the limits that decided */
    PyObject *name;                             /* str, for the headers */
    PyObject *headers;                          /* dict, made on first use */
} DecisionObject;

static void Decision_dealloc(DecisionObject *self) {
    Py_XDECREF(self->name);
    Py_XDECREF(self->headers);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *decision_new(const porteiro_decision *d, const porteiro_limit *limits,
                              size_t nlimits, PyObject *name) {
    DecisionObject *o = PyObject_New(DecisionObject, &DecisionType);
    if (o == NULL)
        return NULL;
    o->d = *d;
    if (nlimits > PORTEIRO_MAX_LIMITS)
        nlimits = PORTEIRO_MAX_LIMITS;
    if (o->d.nlimits > nlimits)
        o->d.nlimits = nlimits;
    memcpy(o->limits, limits, nlimits * sizeof(*limits));
    Py_INCREF(name);
    o->name = name;
    o->headers = NULL;
    return (PyObject *)o;
}

#define DEC_INT(field)                                                                             \
    static PyObject *Decision_get_##field(DecisionObject *self, void *c) {                         \
        (void)c;                                                                                   \
        return PyLong_FromLongLong((long long)self->d.field);                                      \
    }
DEC_INT(limit)
DEC_INT(remaining)
DEC_INT(reset_ms)
DEC_INT(retry_after_ms)
DEC_INT(wait_ms)
DEC_INT(denied_by)
DEC_INT(debt)
DEC_INT(debt_added)

static PyObject *Decision_get_allowed(DecisionObject *self, void *c) {
    (void)c;
    return PyBool_FromLong(self->d.allowed);
}

static PyObject *Decision_get_shadow_denied(DecisionObject *self, void *c) {
    (void)c;
    return PyBool_FromLong(self->d.shadow_denied);
}

static PyObject *Decision_get_fallback(DecisionObject *self, void *c) {
    (void)c;
    switch (self->d.fallback) {
        case PORTEIRO_FALLBACK_OPEN: return PyUnicode_FromString("open");
        case PORTEIRO_FALLBACK_CLOSED: return PyUnicode_FromString("closed");
        case PORTEIRO_FALLBACK_LOCAL: return PyUnicode_FromString("local");
        default: Py_RETURN_NONE;
    }
}

static PyObject *Decision_get_fallback_reason(DecisionObject *self, void *c) {
    (void)c;
    if (self->d.fallback == PORTEIRO_FALLBACK_NONE)
        Py_RETURN_NONE;
    return PyUnicode_FromString(porteiro_strerror(self->d.fallback_reason));
}

static PyObject *Decision_get_results(DecisionObject *self, void *c) {
    (void)c;
    PyObject *t = PyTuple_New((Py_ssize_t)self->d.nlimits);
    for (size_t i = 0; t != NULL && i < self->d.nlimits; i++) {
        const porteiro_result *r = &self->d.limits[i];
        PyObject *e =
            Py_BuildValue("{s:O,s:L,s:L,s:L,s:L,s:L}", "allowed", r->allowed ? Py_True : Py_False,
                          "limit", (long long)r->limit, "remaining", (long long)r->remaining,
                          "reset_ms", (long long)r->reset_ms, "retry_after_ms",
                          (long long)r->retry_after_ms, "wait_ms", (long long)r->wait_ms);
        if (e == NULL) {
            Py_DECREF(t);
            return NULL;
        }
        PyTuple_SET_ITEM(t, (Py_ssize_t)i, e);
    }
    return t;
}

/* RateLimit-Policy, RateLimit and (denials) Retry-After, as porteirod. */
static PyObject *Decision_get_headers(DecisionObject *self, void *c) {
    (void)c;
    if (self->headers == NULL) {
        const char *name = PyUnicode_AsUTF8(self->name);
        if (name == NULL)
            return NULL;
        porteiro_http_fields h;
        porteiro_http_fields_format(name, self->limits, self->d.nlimits, &self->d, &h);
        PyObject *dict = h.retry_after[0] != '\0'
                             ? Py_BuildValue("{s:s,s:s,s:s}", "RateLimit-Policy", h.policy,
                                             "RateLimit", h.ratelimit, "Retry-After", h.retry_after)
                             : Py_BuildValue("{s:s,s:s}", "RateLimit-Policy", h.policy, "RateLimit",
                                             h.ratelimit);
        if (dict == NULL)
            return NULL;
        self->headers = dict;
    }
    return PyDictProxy_New(self->headers);
}

static int Decision_bool(DecisionObject *self) {
    return self->d.allowed;
}

static PyObject *Decision_repr(DecisionObject *self) {
    char buf[256];
    snprintf(buf, sizeof(buf),
             "allowed=%s, limit=%lld, remaining=%lld, reset_ms=%lld, retry_after_ms=%lld%s%s",
             self->d.allowed ? "True" : "False", (long long)self->d.limit,
             (long long)self->d.remaining, (long long)self->d.reset_ms,
             (long long)self->d.retry_after_ms,
             self->d.fallback != PORTEIRO_FALLBACK_NONE ? ", fallback=" : "",
             self->d.fallback == PORTEIRO_FALLBACK_OPEN     ? "'open'"
             : self->d.fallback == PORTEIRO_FALLBACK_CLOSED ? "'closed'"
             : self->d.fallback == PORTEIRO_FALLBACK_LOCAL  ? "'local'"
                                                            : "");
    return PyUnicode_FromFormat("Decision(%s)", buf);
}

static PyNumberMethods Decision_as_number = {.nb_bool = (inquiry)Decision_bool};

static PyMemberDef Decision_members[] = {
    {"name", T_OBJECT, offsetof(DecisionObject, name), READONLY,
     "The policy name its headers carry."},
    {NULL, 0, 0, 0, NULL},
};

#define GET(n, doc)                                                                                \
    { #n, (getter)Decision_get_##n, NULL, doc, NULL }
static PyGetSetDef Decision_getset[] = {
    GET(allowed, "True when every limit allowed (or a fallback allowed)."),
    GET(limit, "L of the limit with the least remaining (B where the capacity is B)."),
    GET(remaining, "Units that would still pass now (the lowest of the limits)."),
    GET(reset_ms, "ms until the limits are fully restored (the largest)."),
    GET(retry_after_ms, "0 when allowed; else ms after which the same check can pass, "
                        "-1 if it never can."),
    GET(wait_ms, "A reservation (max_wait_ms): ms to wait before proceeding."),
    GET(denied_by, "Index of the first denying limit, or -1."),
    GET(debt, "After a settle: the largest debt of its limits, in units."),
    GET(debt_added, "After a settle: the units of its charge that went past empty."),
    GET(shadow_denied, "A policy in shadow mode would have denied (allowed anyway)."),
    GET(fallback, "None for a real decision; 'open', 'closed' or 'local' when Redis failed "
                  "and on_error decided."),
    GET(fallback_reason, "The failure behind a fallback (porteiro_strerror), or None."),
    {"results", (getter)Decision_get_results, NULL,
     "Each limit's answer, in order: dicts of allowed, limit, remaining, reset_ms, "
     "retry_after_ms, wait_ms.",
     NULL},
    GET(headers, "The HTTP header fields porteirod sends with this decision: "
                 "RateLimit-Policy, RateLimit, and Retry-After when denied."),
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject DecisionType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "porteiro.Decision",
    .tp_basicsize = sizeof(DecisionObject),
    .tp_dealloc = (destructor)Decision_dealloc,
    .tp_repr = (reprfunc)Decision_repr,
    .tp_as_number = &Decision_as_number,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "The answer of one check (true when allowed).",
    .tp_members = Decision_members,
    .tp_getset = Decision_getset,
};

/* ---- the asyncio loop as a porteiro_loop_ops table ---------------------- */

/* One io or timer handle given to porteiro, and the Python callable the
 * asyncio loop calls for it. */
typedef struct AsyncLoop AsyncLoop;

typedef struct {
    PyObject_HEAD int kind; /* 0 read, 1 write, 2 timer */
    void *target;           /* LoopIo / LoopTimer; NULL once freed */
} LoopCallbackObject;

typedef struct {
    AsyncLoop *loop;
    int fd;
    porteiro_loop_io_fn *fn;
    void *arg;
    bool want_write;
    LoopCallbackObject *on_read, *on_write;
} LoopIo;

typedef struct {
    AsyncLoop *loop;
    porteiro_loop_timer_fn *fn;
    void *arg;
    PyObject *handle; /* asyncio TimerHandle / Handle while armed */
    LoopCallbackObject *cb;
} LoopTimer;

struct AsyncLoop {
    PyObject *loop; /* the asyncio loop */
    PyObject *add_reader, *remove_reader, *add_writer, *remove_writer, *call_later, *call_soon,
        *create_future;
    porteiro_t *p; /* the handle attached to it */
};

static void loop_report(void) {
    if (PyErr_Occurred())
        PyErr_WriteUnraisable(NULL);
}

static PyObject *LoopCallback_call(LoopCallbackObject *self, PyObject *args, PyObject *kw) {
    (void)args;
    (void)kw;
    void *t = self->target;
    if (t == NULL)
        Py_RETURN_NONE;
    if (self->kind == 2) {
        LoopTimer *tm = t;
        Py_CLEAR(tm->handle); /* fired: no longer armed */
        tm->fn(tm->arg);
    } else {
        LoopIo *io = t;
        io->fn(io->arg, self->kind == 0, self->kind == 1);
    }
    loop_report();
    Py_RETURN_NONE;
}

static PyTypeObject LoopCallbackType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "porteiro._porteiro._LoopCallback",
    .tp_basicsize = sizeof(LoopCallbackObject),
    .tp_call = (ternaryfunc)LoopCallback_call,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A callback of porteiro's on the asyncio loop (internal).",
};

static LoopCallbackObject *loop_cb_new(int kind, void *target) {
    LoopCallbackObject *c = PyObject_New(LoopCallbackObject, &LoopCallbackType);
    if (c != NULL) {
        c->kind = kind;
        c->target = target;
    }
    return c;
}

static void *op_io_new(void *ctx, int fd, porteiro_loop_io_fn *fn, void *arg) {
    AsyncLoop *al = ctx;
    LoopIo *io = PyMem_Calloc(1, sizeof(*io));
    if (io == NULL)
        return NULL;
    io->loop = al;
    io->fd = fd;
    io->fn = fn;
    io->arg = arg;
    io->on_read = loop_cb_new(0, io);
    io->on_write = loop_cb_new(1, io);
    PyObject *r = NULL;
    if (io->on_read != NULL && io->on_write != NULL)
        r = PyObject_CallFunction(al->add_reader, "iO", fd, (PyObject *)io->on_read);
    if (r == NULL) {
        loop_report();
        Py_XDECREF(io->on_read);
        Py_XDECREF(io->on_write);
        PyMem_Free(io);
        return NULL;
    }
    Py_DECREF(r);
    return io;
}

static void op_io_want_write(void *ctx, void *iop, bool on) {
    AsyncLoop *al = ctx;
    LoopIo *io = iop;
    if (io->want_write == on)
        return;
    io->want_write = on;
    PyObject *r = on ? PyObject_CallFunction(al->add_writer, "iO", io->fd, (PyObject *)io->on_write)
                     : PyObject_CallFunction(al->remove_writer, "i", io->fd);
    Py_XDECREF(r);
    loop_report();
}

static void op_io_free(void *ctx, void *iop) {
    AsyncLoop *al = ctx;
    LoopIo *io = iop;
    PyObject *r;
    if (io->want_write) {
        r = PyObject_CallFunction(al->remove_writer, "i", io->fd);
        Py_XDECREF(r);
        PyErr_Clear();
    }
    r = PyObject_CallFunction(al->remove_reader, "i", io->fd);
    Py_XDECREF(r);
    PyErr_Clear(); /* a closed loop */
    io->on_read->target = NULL;
    io->on_write->target = NULL;
    Py_DECREF(io->on_read);
    Py_DECREF(io->on_write);
    PyMem_Free(io);
}

static void *op_timer_new(void *ctx, porteiro_loop_timer_fn *fn, void *arg) {
    LoopTimer *t = PyMem_Calloc(1, sizeof(*t));
    if (t == NULL)
        return NULL;
    t->loop = ctx;
    t->fn = fn;
    t->arg = arg;
    t->cb = loop_cb_new(2, t);
    if (t->cb == NULL) {
        PyErr_Clear();
        PyMem_Free(t);
        return NULL;
    }
    return t;
}

static void timer_cancel(LoopTimer *t) {
    if (t->handle == NULL)
        return;
    PyObject *r = PyObject_CallMethodNoArgs(t->handle, str_cancel);
    Py_XDECREF(r);
    PyErr_Clear();
    Py_CLEAR(t->handle);
}

static void op_timer_start(void *ctx, void *tp, int64_t us) {
    AsyncLoop *al = ctx;
    LoopTimer *t = tp;
    timer_cancel(t);
    /* Never early: asyncio's clock rounds nothing, but its select waits
     * may end up to a resolution early; round the delay up by 1 us. */
    double s = (double)(us + 1) / 1e6;
    t->handle = PyObject_CallFunction(al->call_later, "dO", s, (PyObject *)t->cb);
    loop_report();
}

static void op_timer_fire_soon(void *ctx, void *tp) {
    AsyncLoop *al = ctx;
    LoopTimer *t = tp;
    timer_cancel(t);
    t->handle = PyObject_CallOneArg(al->call_soon, (PyObject *)t->cb);
    loop_report();
}

static void op_timer_stop(void *ctx, void *tp) {
    (void)ctx;
    timer_cancel(tp);
}

static void op_timer_free(void *ctx, void *tp) {
    (void)ctx;
    LoopTimer *t = tp;
    timer_cancel(t);
    t->cb->target = NULL;
    Py_DECREF(t->cb);
    PyMem_Free(t);
}

static const porteiro_loop_ops asyncio_ops = {
    .io_new = op_io_new,
    .io_want_write = op_io_want_write,
    .io_free = op_io_free,
    .timer_new = op_timer_new,
    .timer_start = op_timer_start,
    .timer_fire_soon = op_timer_fire_soon,
    .timer_stop = op_timer_stop,
    .timer_free = op_timer_free,
    .now_us = NULL, /* CLOCK_MONOTONIC: asyncio's loop.time() too */
};

static void async_loop_free(AsyncLoop *al) {
    if (al == NULL)
        return;
    porteiro_free(al->p); /* in-flight checks get their callback now */
    Py_XDECREF(al->loop);
    Py_XDECREF(al->add_reader);
    Py_XDECREF(al->remove_reader);
    Py_XDECREF(al->add_writer);
    Py_XDECREF(al->remove_writer);
    Py_XDECREF(al->call_later);
    Py_XDECREF(al->call_soon);
    Py_XDECREF(al->create_future);
    PyMem_Free(al);
}

/* ---- Limiter ------------------------------------------------------------ */

typedef struct {
    porteiro_t *p; /* NULL while being made, or a free slot when users == 0 */
    int users;     /* threads inside a call on it */
} Conn;

typedef struct {
    PyObject_HEAD porteiro_options opts;
    char *redis_url, *prefix; /* copies opts points to */
    PyObject *config;         /* ConfigObject or NULL */
    bool memory;              /* no Redis: one handle, the GIL kept */
    Conn conns[MAX_CONNECTIONS];
    int nconns, max_conns;
    AsyncLoop *loops[MAX_LOOPS];
    int nloops;
    unsigned long gen;    /* fork_generation when the handles were made */
    PyObject *rl_holder;  /* the running-loop holder last seen (a reference) */
    AsyncLoop *rl_loop;   /* its loop's handle */
    unsigned long rl_gen; /* fork_generation then */
    PyObject *cache;      /* str -> LimitsObject */
    PyObject *weakrefs;
} LimiterObject;

static char *dup_str(const char *s) {
    if (s == NULL)
        return NULL;
    size_t n = strlen(s) + 1;
    char *d = PyMem_Malloc(n);
    if (d != NULL)
        memcpy(d, s, n);
    return d;
}

static int parse_on_error(PyObject *o, porteiro_on_error *out) {
    const char *s = PyUnicode_AsUTF8(o);
    if (s == NULL)
        return -1;
    if (strcmp(s, "open") == 0)
        *out = PORTEIRO_ON_ERROR_OPEN;
    else if (strcmp(s, "closed") == 0)
        *out = PORTEIRO_ON_ERROR_CLOSED;
    else if (strcmp(s, "local") == 0)
        *out = PORTEIRO_ON_ERROR_LOCAL;
    else if (strcmp(s, "error") == 0)
        *out = PORTEIRO_ON_ERROR_ERROR;
    else {
        PyErr_Format(InvalidLimitType,
                     "on_error must be 'open', 'closed', 'local' or 'error', not '%s'", s);
        return -1;
    }
    return 0;
}

/* A new C handle with the limiter's options (the GIL released while it
 * connects). NULL with the exception set. */
static porteiro_t *handle_open(LimiterObject *self) {
    porteiro_status st = PORTEIRO_OK;
    char err[512] = "";
    porteiro_t *p;
    Py_BEGIN_ALLOW_THREADS p = porteiro_new(&self->opts, &st, err, sizeof(err));
    Py_END_ALLOW_THREADS if (p == NULL) raise_status(st, err);
    return p;
}

/* In a child after fork(2) (gunicorn --preload, multiprocessing): the
 * parent's handles share its sockets, so the child must neither use nor
 * free them (a free would write to them: quota leases are given back);
 * it forgets them (a handle's memory per fork) and opens its own. The
 * memory backend's handle is the child's copy of the state: kept. */
static void forget_after_fork(LimiterObject *self) {
    self->gen = fork_generation;
    if (!self->memory) {
        for (int i = 0; i < self->nconns; i++)
            self->conns[i] = (Conn){NULL, 0};
        self->nconns = 0;
    } else
        self->conns[0].users = 0; /* the threads inside it did not fork */
    for (int i = 0; i < self->nloops; i++) {
        AsyncLoop *al = self->loops[i];
        al->p = NULL; /* forgotten, not freed */
        async_loop_free(al);
        self->loops[i] = NULL;
    }
    self->nloops = 0;
    Py_CLEAR(self->rl_holder);
    self->rl_loop = NULL;
}

/* A blocking handle for one call: an idle one, else a new one (up to
 * max_conns), else the least busy (its calls queue on its mutex). Taken
 * and given back under the GIL. */
static Conn *conn_take(LimiterObject *self) {
    Conn *best = NULL;
    if (self->gen != fork_generation)
        forget_after_fork(self);
    for (int i = 0; i < self->nconns; i++) {
        Conn *c = &self->conns[i];
        if (c->p != NULL && c->users == 0) {
            c->users = 1;
            return c;
        }
        if (c->p != NULL && (best == NULL || c->users < best->users))
            best = c;
    }
    if (self->nconns < self->max_conns || best == NULL) {
        Conn *slot = NULL;
        for (int i = 0; i < self->nconns; i++)
            if (self->conns[i].p == NULL && self->conns[i].users == 0) {
                slot = &self->conns[i];
                break;
            }
        if (slot == NULL && self->nconns < MAX_CONNECTIONS)
            slot = &self->conns[self->nconns++];
        if (slot != NULL) {
            slot->users = 1; /* reserved while it connects, GIL released */
            porteiro_t *p = handle_open(self);
            if (p == NULL) {
                slot->users = 0;
                if (best != NULL) { /* another will do */
                    PyErr_Clear();
                    best->users++;
                    return best;
                }
                return NULL;
            }
            slot->p = p;
            return slot;
        }
    }
    if (best == NULL) {
        PyErr_SetString(ErrorType, "no porteiro handle available");
        return NULL;
    }
    best->users++;
    return best;
}

static inline void conn_give(Conn *c) {
    c->users--;
}

/* A call on a blocking handle: the GIL released unless in memory. */
#define BLOCKING(self, stmt)                                                                       \
    do {                                                                                           \
        if ((self)->memory) {                                                                      \
            stmt;                                                                                  \
        } else {                                                                                   \
            Py_BEGIN_ALLOW_THREADS stmt;                                                           \
            Py_END_ALLOW_THREADS                                                                   \
        }                                                                                          \
    } while (0)

static void Limiter_close_handles(LimiterObject *self) {
    if (self->gen != fork_generation)
        forget_after_fork(self);
    for (int i = 0; i < self->nconns; i++) {
        if (self->conns[i].p != NULL && self->conns[i].users == 0) {
            porteiro_free(self->conns[i].p);
            self->conns[i].p = NULL;
        }
    }
    for (int i = 0; i < self->nloops; i++) {
        async_loop_free(self->loops[i]);
        self->loops[i] = NULL;
    }
    self->nloops = 0;
    Py_CLEAR(self->rl_holder);
    self->rl_loop = NULL;
}

static void Limiter_dealloc(LimiterObject *self) {
    PyObject_GC_UnTrack(self);
    if (self->weakrefs != NULL)
        PyObject_ClearWeakRefs((PyObject *)self);
    Limiter_close_handles(self);
    Py_CLEAR(self->cache);
    Py_CLEAR(self->config);
    PyMem_Free(self->redis_url);
    PyMem_Free(self->prefix);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int Limiter_traverse(LimiterObject *self, visitproc visit, void *arg) {
    Py_VISIT(self->cache);
    Py_VISIT(self->rl_holder);
    Py_VISIT(self->config);
    Py_VISIT(Py_TYPE(self));
    return 0;
}

static int Limiter_clear(LimiterObject *self) {
    Py_CLEAR(self->cache);
    Py_CLEAR(self->rl_holder);
    self->rl_loop = NULL;
    return 0;
}

static int kw_int(PyObject *o, const char *what, long lo, long hi, long *out) {
    if (o == NULL || o == Py_None)
        return 0;
    long v = PyLong_AsLong(o);
    if (v == -1 && PyErr_Occurred())
        return -1;
    if (v < lo || v > hi) {
        PyErr_Format(InvalidLimitType, "%s must be within %ld..%ld", what, lo, hi);
        return -1;
    }
    *out = v;
    return 0;
}

static int Limiter_init(LimiterObject *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"redis",
                             "on_error",
                             "prefix",
                             "config",
                             "config_text",
                             "connect_timeout_ms",
                             "command_timeout_ms",
                             "local_divisor",
                             "memory_max_keys",
                             "batch_max",
                             "deny_cache_keys",
                             "breaker_failures",
                             "quota_lease_ms",
                             "quota_lease_units",
                             "connections",
                             NULL};
    PyObject *redis = Py_None, *on_error = NULL, *prefix = Py_None, *config = Py_None,
             *config_text = Py_None, *cto = NULL, *mto = NULL, *ldiv = NULL, *mkeys = NULL,
             *bmax = NULL, *dck = NULL, *bf = NULL, *qms = NULL, *qunits = NULL, *nconn = NULL;
    if (self->nconns > 0 || self->config != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "Limiter.__init__ called twice");
        return -1;
    }
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|O$OOOOOOOOOOOOOO:Limiter", kwlist, &redis,
                                     &on_error, &prefix, &config, &config_text, &cto, &mto, &ldiv,
                                     &mkeys, &bmax, &dck, &bf, &qms, &qunits, &nconn))
        return -1;
    porteiro_options_init(&self->opts);
    if (config != Py_None || config_text != Py_None) {
        char err[512] = "";
        porteiro_config *cfg;
        if (config != Py_None) {
            PyObject *path = PyUnicode_EncodeFSDefault(config);
            if (path == NULL) {
                PyErr_Clear();
                path = PyOS_FSPath(config);
                if (path == NULL)
                    return -1;
                PyObject *b = PyUnicode_Check(path) ? PyUnicode_EncodeFSDefault(path) : path;
                if (b != path)
                    Py_DECREF(path);
                if (b == NULL)
                    return -1;
                path = b;
            }
            cfg = porteiro_config_load(PyBytes_AsString(path), err, sizeof(err));
            Py_DECREF(path);
        } else {
            Py_ssize_t n;
            const char *text = PyUnicode_AsUTF8AndSize(config_text, &n);
            if (text == NULL)
                return -1;
            cfg = porteiro_config_parse(text, (size_t)n, "<config_text>", err, sizeof(err));
        }
        if (cfg == NULL) {
            raise_status(PORTEIRO_ERR_CONFIG, err);
            return -1;
        }
        ConfigObject *co = PyObject_New(ConfigObject, &ConfigType);
        if (co == NULL) {
            porteiro_config_free(cfg);
            return -1;
        }
        co->cfg = cfg;
        self->config = (PyObject *)co;
        self->opts = *porteiro_config_options(cfg); /* its strings live with cfg */
    }
    if (redis != Py_None) {
        const char *url = PyUnicode_AsUTF8(redis);
        if (url == NULL)
            return -1;
        char err[512] = "";
        if (url[0] != '\0' && porteiro_parse_redis_url(url, err, sizeof(err)) != PORTEIRO_OK) {
            raise_status(PORTEIRO_ERR_INVALID, err);
            return -1;
        }
        self->redis_url = dup_str(url);
        if (self->redis_url == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        self->opts.redis_url = self->redis_url;
    }
    if (prefix != Py_None) {
        const char *s = PyUnicode_AsUTF8(prefix);
        if (s == NULL || (self->prefix = dup_str(s)) == NULL)
            return -1;
        self->opts.prefix = self->prefix;
    }
    if (on_error != NULL && on_error != Py_None &&
        parse_on_error(on_error, &self->opts.on_error) < 0)
        return -1;
    long v, maxc = 8;
    if ((v = self->opts.connect_timeout_ms, kw_int(cto, "connect_timeout_ms", 0, 600000, &v)) < 0)
        return -1;
    self->opts.connect_timeout_ms = (int)v;
    if ((v = self->opts.command_timeout_ms, kw_int(mto, "command_timeout_ms", 0, 600000, &v)) < 0)
        return -1;
    self->opts.command_timeout_ms = (int)v;
    if ((v = self->opts.local_divisor, kw_int(ldiv, "local_divisor", 0, 1000000, &v)) < 0)
        return -1;
    self->opts.local_divisor = (int)v;
    if ((v = (long)self->opts.memory_max_keys, kw_int(mkeys, "memory_max_keys", 0, 1L << 40, &v)) <
        0)
        return -1;
    self->opts.memory_max_keys = (size_t)v;
    if ((v = (long)self->opts.batch_max, kw_int(bmax, "batch_max", 0, 256, &v)) < 0)
        return -1;
    self->opts.batch_max = (size_t)v;
    if ((v = (long)self->opts.deny_cache_keys, kw_int(dck, "deny_cache_keys", 0, 1L << 30, &v)) < 0)
        return -1;
    self->opts.deny_cache_keys = (size_t)v;
    if ((v = self->opts.breaker_failures, kw_int(bf, "breaker_failures", -1, 1000000, &v)) < 0)
        return -1;
    self->opts.breaker_failures = (int)v;
    if ((v = (long)self->opts.quota_lease.max_ms, kw_int(qms, "quota_lease_ms", 0, 60000, &v)) < 0)
        return -1;
    self->opts.quota_lease.max_ms = v;
    if ((v = (long)self->opts.quota_lease.max_units,
         kw_int(qunits, "quota_lease_units", 0, 1000000000L, &v)) < 0)
        return -1;
    self->opts.quota_lease.max_units = v;
    if (kw_int(nconn, "connections", 1, MAX_CONNECTIONS, &maxc) < 0)
        return -1;
    self->memory = self->opts.redis_url == NULL || self->opts.redis_url[0] == '\0';
    self->max_conns = self->memory ? 1 : (int)maxc;
    self->cache = PyDict_New();
    if (self->cache == NULL)
        return -1;
    /* The first handle now: a bad option, refused credentials or a
     * database Redis does not have fail here, not at the first check. */
    porteiro_t *p = handle_open(self);
    if (p == NULL)
        return -1;
    self->conns[0].p = p;
    self->conns[0].users = 0;
    self->nconns = 1;
    self->gen = fork_generation;
    return 0;
}

/* The Limits of an argument: a Limits object, or a text parsed once. */
static LimitsObject *limits_of(LimiterObject *self, PyObject *o) {
    if (Py_IS_TYPE(o, &LimitsType)) {
        Py_INCREF(o);
        return (LimitsObject *)o;
    }
    if (!PyUnicode_Check(o)) {
        PyErr_SetString(PyExc_TypeError,
                        "limits are a str (\"gcra 10/1s burst 20\") or a porteiro.Limits");
        return NULL;
    }
    if (self->cache == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "the Limiter is not initialised");
        return NULL;
    }
    PyObject *l = PyDict_GetItemWithError(self->cache, o);
    if (l != NULL) {
        Py_INCREF(l);
        return (LimitsObject *)l;
    }
    if (PyErr_Occurred())
        return NULL;
    LimitsObject *parsed = limits_parse(o, NULL);
    if (parsed == NULL)
        return NULL;
    if (PyDict_GET_SIZE(self->cache) >= LIMITS_CACHE_MAX)
        PyDict_Clear(self->cache);
    if (PyDict_SetItem(self->cache, o, (PyObject *)parsed) < 0) {
        Py_DECREF(parsed);
        return NULL;
    }
    return parsed;
}

/* The exception of a failed call on handle p. */
static PyObject *fail(porteiro_t *p, porteiro_status st) {
    return raise_status(st, porteiro_errmsg(p));
}

/* A policy's limits for this key (tier, the file's overrides). */
static int choose(LimitsObject *l, PyObject *tier, const char *key, size_t klen,
                  porteiro_choice *out) {
    const char *t = NULL;
    if (tier != NULL && tier != Py_None && (t = PyUnicode_AsUTF8(tier)) == NULL)
        return -1;
    porteiro_status st =
        porteiro_config_choose(((ConfigObject *)l->config)->cfg, l->policy, t, key, klen, out);
    if (st != PORTEIRO_OK) {
        raise_status(st, "policy: the limits could not be chosen");
        return -1;
    }
    return 0;
}

/* One call's request on key under l: l's own limits, or (l a policy) the
 * limits its file chooses for key and tier, held in ch (a policy's own
 * counters: its check, refund and settle name it). limits and nlimits:
 * what a decision names. */
typedef struct {
    porteiro_choice ch;
    porteiro_request req;
    const porteiro_limit *limits;
    size_t nlimits;
} Request;

/* -1 when the policy's choice raised. r must not move once built (req
 * points into ch). */
static int build_request(LimitsObject *l, PyObject *tier, const char *key, size_t klen,
                         int64_t cost, int64_t now, int64_t wait, Request *r) {
    r->req = (porteiro_request){
        .key = key, .key_len = klen, .cost = cost, .now_ms = now, .max_wait_ms = wait};
    if (l->policy == NULL) {
        r->req.limits = r->limits = l->limits;
        r->req.nlimits = r->nlimits = l->nlimits;
        return 0;
    }
    if (choose(l, tier, key, klen, &r->ch) < 0)
        return -1;
    r->req.policy = &r->ch.policy;
    r->limits = r->ch.policy.limits;
    r->nlimits = r->ch.policy.nlimits;
    return 0;
}

/* The answer of a blocking call on p: its decision, or the exception. */
static PyObject *answer(porteiro_t *p, porteiro_status st, const porteiro_decision *d,
                        const Request *r, LimitsObject *l) {
    return st == PORTEIRO_OK ? decision_new(d, r->limits, r->nlimits, l->name) : fail(p, st);
}

/* A blocking call's limits (into *l) and connection; NULL when either
 * raised. call_end gives both back. */
static Conn *call_start(LimiterObject *self, PyObject *limits, LimitsObject **l) {
    *l = limits_of(self, limits);
    if (*l == NULL)
        return NULL;
    Conn *c = conn_take(self);
    if (c == NULL)
        Py_DECREF(*l);
    return c;
}

static void call_end(Conn *c, LimitsObject *l) {
    conn_give(c);
    Py_DECREF(l);
}

/* One check (cost 0: a peek) of key under l, or l's policy. */
static PyObject *check_core(LimiterObject *self, PyObject *keyobj, PyObject *limits, int64_t cost,
                            int64_t now, int64_t wait, PyObject *tier) {
    const char *key;
    size_t klen;
    if (arg_key(keyobj, &key, &klen) < 0)
        return NULL;
    LimitsObject *l;
    Conn *c = call_start(self, limits, &l);
    if (c == NULL)
        return NULL;
    porteiro_t *p = c->p;
    porteiro_decision d;
    porteiro_status st;
    PyObject *res = NULL;
    Request r;
    if (build_request(l, tier, key, klen, cost, now, wait, &r) == 0) {
        BLOCKING(self, st = porteiro_check_request(p, &r.req, &d));
        res = answer(p, st, &d, &r, l);
    }
    call_end(c, l);
    return res;
}

static PyObject *Limiter_check(LimiterObject *self, PyObject *const *args, Py_ssize_t nargs,
                               PyObject *kwnames) {
    static const char *const names[] = {"key",         "limits", "cost", "now_ms",
                                        "max_wait_ms", "tier",   NULL};
    PyObject *a[6];
    int64_t cost, now, wait;
    if (parse_args("check", args, nargs, kwnames, names, 3, 2, a) < 0 ||
        arg_int64(a[2], 1, "cost", &cost) < 0 ||
        arg_int64(a[3], PORTEIRO_NOW, "now_ms", &now) < 0 ||
        arg_int64(a[4], 0, "max_wait_ms", &wait) < 0)
        return NULL;
    return check_core(self, a[0], a[1], cost, now, wait, a[5]);
}

static PyObject *Limiter_peek(LimiterObject *self, PyObject *const *args, Py_ssize_t nargs,
                              PyObject *kwnames) {
    static const char *const names[] = {"key", "limits", "now_ms", "tier", NULL};
    PyObject *a[4];
    int64_t now;
    if (parse_args("peek", args, nargs, kwnames, names, 2, 2, a) < 0 ||
        arg_int64(a[2], PORTEIRO_NOW, "now_ms", &now) < 0)
        return NULL;
    return check_core(self, a[0], a[1], 0, now, 0, a[3]); /* cost 0: nothing written */
}

static PyObject *Limiter_refund(LimiterObject *self, PyObject *const *args, Py_ssize_t nargs,
                                PyObject *kwnames) {
    static const char *const names[] = {"key", "limits", "cost", "now_ms", NULL};
    PyObject *a[4];
    if (parse_args("refund", args, nargs, kwnames, names, 3, 2, a) < 0)
        return NULL;
    const char *key;
    size_t klen;
    int64_t cost, now;
    if (arg_key(a[0], &key, &klen) < 0 || arg_int64(a[2], 1, "cost", &cost) < 0 ||
        arg_int64(a[3], PORTEIRO_NOW, "now_ms", &now) < 0)
        return NULL;
    LimitsObject *l;
    Conn *c = call_start(self, a[1], &l);
    if (c == NULL)
        return NULL;
    porteiro_decision d;
    porteiro_status st;
    PyObject *res = NULL;
    Request r;
    if (build_request(l, Py_None, key, klen, cost, now, 0, &r) == 0) {
        BLOCKING(self, st = porteiro_refund(c->p, &r.req, &d));
        res = answer(c->p, st, &d, &r, l);
    }
    call_end(c, l);
    return res;
}

static PyObject *Limiter_reset(LimiterObject *self, PyObject *const *args, Py_ssize_t nargs,
                               PyObject *kwnames) {
    static const char *const names[] = {"key", "limits", NULL};
    PyObject *a[2];
    if (parse_args("reset", args, nargs, kwnames, names, 2, 2, a) < 0)
        return NULL;
    const char *key;
    size_t klen;
    if (arg_key(a[0], &key, &klen) < 0)
        return NULL;
    LimitsObject *l;
    Conn *c = call_start(self, a[1], &l);
    if (c == NULL)
        return NULL;
    porteiro_status st = PORTEIRO_ERR_INVALID;
    PyObject *res = NULL;
    Request r;
    if (build_request(l, Py_None, key, klen, 0, 0, 0, &r) < 0)
        goto out; /* choose raised */
    BLOCKING(self, st = porteiro_reset(c->p, &r.req));
    if (st == PORTEIRO_OK) {
        res = Py_None;
        Py_INCREF(res);
    } else
        fail(c->p, st);
out:
    call_end(c, l);
    return res;
}

static PyObject *Limiter_settle(LimiterObject *self, PyObject *const *args, Py_ssize_t nargs,
                                PyObject *kwnames) {
    static const char *const names[] = {"key",    "limits", "estimate", "used",
                                        "age_ms", "now_ms", "tier",     NULL};
    PyObject *a[7];
    if (parse_args("settle", args, nargs, kwnames, names, 4, 4, a) < 0)
        return NULL;
    const char *key;
    size_t klen;
    porteiro_usage u = {.age_ms = -1}; /* estimates: NULL (not a multi-key settle) */
    int64_t now;
    if (arg_key(a[0], &key, &klen) < 0 || arg_int64(a[2], 0, "estimate", &u.estimate) < 0 ||
        arg_int64(a[3], 0, "used", &u.used) < 0 || arg_int64(a[4], -1, "age_ms", &u.age_ms) < 0 ||
        arg_int64(a[5], PORTEIRO_NOW, "now_ms", &now) < 0)
        return NULL;
    LimitsObject *l;
    Conn *c = call_start(self, a[1], &l);
    if (c == NULL)
        return NULL;
    porteiro_t *p = c->p;
    porteiro_decision d;
    porteiro_status st;
    PyObject *res = NULL;
    Request r;
    if (build_request(l, a[6], key, klen, 0, now, 0, &r) == 0) {
        BLOCKING(self, st = porteiro_settle(p, &r.req, &u, &d));
        res = answer(p, st, &d, &r, l);
    }
    call_end(c, l);
    return res;
}

/* check_many([(key, limits[, cost]), ...]) -> [Decision, ...] */
static PyObject *Limiter_check_many(LimiterObject *self, PyObject *const *args, Py_ssize_t nargs,
                                    PyObject *kwnames) {
    static const char *const names[] = {"items", "now_ms", NULL};
    PyObject *a[2];
    if (parse_args("check_many", args, nargs, kwnames, names, 1, 1, a) < 0)
        return NULL;
    int64_t now;
    if (arg_int64(a[1], PORTEIRO_NOW, "now_ms", &now) < 0)
        return NULL;
    PyObject *seq = PySequence_Fast(a[0], "check_many() takes a sequence of (key, limits[, cost])");
    if (seq == NULL)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject *out = NULL;
    porteiro_request *reqs = PyMem_Calloc((size_t)n + 1, sizeof(*reqs));
    porteiro_decision *ds = PyMem_Calloc((size_t)n + 1, sizeof(*ds));
    porteiro_status *sts = PyMem_Calloc((size_t)n + 1, sizeof(*sts));
    LimitsObject **ls = PyMem_Calloc((size_t)n + 1, sizeof(*ls));
    PyObject *holds = NULL; /* keys made bytes (surrogate_key) */
    Conn *c = NULL;
    if (reqs == NULL || ds == NULL || sts == NULL || ls == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *it = PySequence_Fast_GET_ITEM(seq, i);
        if (!PyTuple_Check(it) || PyTuple_GET_SIZE(it) < 2 || PyTuple_GET_SIZE(it) > 3) {
            PyErr_SetString(PyExc_TypeError, "check_many() items are (key, limits[, cost])");
            goto done;
        }
        const char *key;
        size_t klen;
        int64_t cost = 1;
        PyObject *kobj = PyTuple_GET_ITEM(it, 0), *fixed = surrogate_key(kobj);
        if (fixed != NULL) { /* kept until the call is over */
            if (holds == NULL)
                holds = PyList_New(0);
            int rc = holds != NULL ? PyList_Append(holds, fixed) : -1;
            Py_DECREF(fixed);
            if (rc < 0)
                goto done;
            kobj = fixed;
        }
        if ((PyUnicode_Check(kobj) && PyUnicode_GET_LENGTH(kobj) == 0) ||
            (PyBytes_Check(kobj) && PyBytes_GET_SIZE(kobj) == 0)) {
            key = ""; /* answered alone by the library (ERR_KEY), not raised */
            klen = 0;
        } else if (arg_key(kobj, &key, &klen) < 0)
            goto done;
        if (PyTuple_GET_SIZE(it) == 3 && arg_int64(PyTuple_GET_ITEM(it, 2), 1, "cost", &cost) < 0)
            goto done;
        ls[i] = limits_of(self, PyTuple_GET_ITEM(it, 1));
        if (ls[i] == NULL)
            goto done;
        reqs[i] = (porteiro_request){.limits = ls[i]->limits,
                                     .nlimits = ls[i]->nlimits,
                                     .key = key,
                                     .key_len = klen,
                                     .cost = cost,
                                     .now_ms = now};
    }
    c = conn_take(self);
    if (c == NULL)
        goto done;
    porteiro_status st;
    BLOCKING(self, st = porteiro_check_many(c->p, reqs, (size_t)n, ds, sts));
    (void)st;
    out = PyList_New(n);
    for (Py_ssize_t i = 0; out != NULL && i < n; i++) {
        PyObject *e;
        if (sts[i] == PORTEIRO_OK)
            e = decision_new(&ds[i], ls[i]->limits, ls[i]->nlimits, ls[i]->name);
        else
            e = make_error(sts[i], porteiro_errmsg(c->p)); /* an exception, not raised */
        if (e == NULL) {
            Py_CLEAR(out);
            break;
        }
        PyList_SET_ITEM(out, i, e);
    }
done:
    if (c != NULL)
        conn_give(c);
    for (Py_ssize_t i = 0; ls != NULL && i < n; i++)
        Py_XDECREF(ls[i]);
    PyMem_Free(reqs);
    PyMem_Free(ds);
    PyMem_Free(sts);
    PyMem_Free(ls);
    Py_XDECREF(holds);
    Py_DECREF(seq);
    return out;
}

/* acquire(key, limit, lease_ms) -> (Decision, lease_id or None) */
static PyObject *Limiter_acquire(LimiterObject *self, PyObject *const *args, Py_ssize_t nargs,
                                 PyObject *kwnames) {
    static const char *const names[] = {"key", "limit", "lease_ms", "now_ms", NULL};
    PyObject *a[4];
    if (parse_args("acquire", args, nargs, kwnames, names, 3, 3, a) < 0)
        return NULL;
    const char *key;
    size_t klen;
    int64_t limit, lease_ms, now;
    if (arg_key(a[0], &key, &klen) < 0 || arg_int64(a[1], 0, "limit", &limit) < 0 ||
        arg_int64(a[2], 0, "lease_ms", &lease_ms) < 0 ||
        arg_int64(a[3], PORTEIRO_NOW, "now_ms", &now) < 0)
        return NULL;
    Conn *c = conn_take(self);
    if (c == NULL)
        return NULL;
    porteiro_decision d;
    char id[PORTEIRO_LEASE_ID_LEN + 1] = "";
    porteiro_status st;
    BLOCKING(self, st = porteiro_acquire(c->p, limit, lease_ms, key, klen, now, &d, id));
    PyObject *res = NULL;
    if (st == PORTEIRO_OK) {
        porteiro_limit lim = {PORTEIRO_CONCURRENCY, limit, lease_ms, 0};
        PyObject *name = PyUnicode_FromString("concurrency");
        PyObject *dec = name != NULL ? decision_new(&d, &lim, 1, name) : NULL;
        Py_XDECREF(name);
        if (dec != NULL) {
            if (id[0] != '\0')
                res = Py_BuildValue("(Ns)", dec, id);
            else
                res = Py_BuildValue("(NO)", dec, Py_None);
        }
    } else
        fail(c->p, st);
    conn_give(c);
    return res;
}

static PyObject *lease_op(LimiterObject *self, PyObject *const *args, Py_ssize_t nargs,
                          PyObject *kwnames, bool renew) {
    static const char *const rel[] = {"key", "lease_id", "now_ms", NULL};
    static const char *const ren[] = {"key", "lease_id", "lease_ms", "now_ms", NULL};
    PyObject *a[4];
    if (parse_args(renew ? "renew" : "release", args, nargs, kwnames, renew ? ren : rel,
                   renew ? 3 : 2, renew ? 3 : 2, a) < 0)
        return NULL;
    const char *key;
    size_t klen;
    int64_t lease_ms = 0, now;
    if (arg_key(a[0], &key, &klen) < 0 ||
        (renew && arg_int64(a[2], 0, "lease_ms", &lease_ms) < 0) ||
        arg_int64(a[renew ? 3 : 2], PORTEIRO_NOW, "now_ms", &now) < 0)
        return NULL;
    const char *id = PyUnicode_AsUTF8(a[1]);
    if (id == NULL)
        return NULL;
    Conn *c = conn_take(self);
    if (c == NULL)
        return NULL;
    bool done = false;
    porteiro_status st;
    if (renew)
        BLOCKING(self, st = porteiro_renew(c->p, lease_ms, key, klen, id, now, &done));
    else
        BLOCKING(self, st = porteiro_release(c->p, key, klen, id, now, &done));
    PyObject *res = st == PORTEIRO_OK ? PyBool_FromLong(done) : fail(c->p, st);
    conn_give(c);
    return res;
}

static PyObject *Limiter_release(LimiterObject *self, PyObject *const *args, Py_ssize_t nargs,
                                 PyObject *kwnames) {
    return lease_op(self, args, nargs, kwnames, false);
}

static PyObject *Limiter_renew(LimiterObject *self, PyObject *const *args, Py_ssize_t nargs,
                               PyObject *kwnames) {
    return lease_op(self, args, nargs, kwnames, true);
}

/* policy(name) -> Limits of the config's policy. */
static PyObject *Limiter_policy(LimiterObject *self, PyObject *name) {
    if (self->config == NULL) {
        PyErr_SetString(PyExc_KeyError, "this Limiter has no config (config= or config_text=)");
        return NULL;
    }
    const char *s = PyUnicode_AsUTF8(name);
    if (s == NULL)
        return NULL;
    const porteiro_policy *pol = porteiro_config_policy(((ConfigObject *)self->config)->cfg, s);
    if (pol == NULL) {
        PyErr_Format(PyExc_KeyError, "no policy named '%s'", s);
        return NULL;
    }
    LimitsObject *l = PyObject_New(LimitsObject, &LimitsType);
    if (l == NULL)
        return NULL;
    memcpy(l->limits, pol->limits, sizeof(l->limits));
    l->nlimits = pol->nlimits;
    l->text = NULL;
    l->policy = pol;
    Py_INCREF(self->config);
    l->config = self->config;
    l->name = PyUnicode_FromString(pol->name);
    if (l->name == NULL) {
        Py_DECREF(l);
        return NULL;
    }
    return (PyObject *)l;
}

static PyObject *Limiter_policies(LimiterObject *self, PyObject *unused) {
    (void)unused;
    PyObject *list = PyList_New(0);
    if (list == NULL || self->config == NULL)
        return list;
    porteiro_config *cfg = ((ConfigObject *)self->config)->cfg;
    for (size_t i = 0; i < porteiro_config_policy_count(cfg); i++) {
        PyObject *s = PyUnicode_FromString(porteiro_config_policy_at(cfg, i)->name);
        if (s == NULL || PyList_Append(list, s) < 0) {
            Py_XDECREF(s);
            Py_DECREF(list);
            return NULL;
        }
        Py_DECREF(s);
    }
    return list;
}

static PyObject *Limiter_stats(LimiterObject *self, PyObject *unused) {
    (void)unused;
    porteiro_stats sum;
    memset(&sum, 0, sizeof(sum));
    uint64_t trips = 0; /* Redis round trips, from the latency histogram */
    porteiro_t *hs[MAX_CONNECTIONS + MAX_LOOPS];
    size_t n = 0;
    for (int i = 0; i < self->nconns; i++)
        if (self->conns[i].p != NULL)
            hs[n++] = self->conns[i].p;
    for (int i = 0; i < self->nloops; i++)
        if (self->loops[i]->p != NULL) /* NULL: the memory backend's, shared */
            hs[n++] = self->loops[i]->p;
    for (size_t i = 0; i < n; i++) {
        porteiro_stats s;
        porteiro_stats_get(hs[i], &s);
        sum.checks += s.checks;
        sum.allowed += s.allowed;
        sum.denied += s.denied;
        sum.fallback_open += s.fallback_open;
        sum.fallback_closed += s.fallback_closed;
        sum.fallback_local += s.fallback_local;
        sum.redis_errors += s.redis_errors;
        sum.redis_timeouts += s.redis_timeouts;
        sum.breaker_skips += s.breaker_skips;
        sum.redis_connects += s.redis_connects;
        sum.deny_cache_hits += s.deny_cache_hits;
        sum.quota_local += s.quota_local;
        sum.quota_grants += s.quota_grants;
        sum.quota_units += s.quota_units;
        sum.settles += s.settles;
        sum.memory_keys += s.memory_keys;
        for (int b = 0; b < PORTEIRO_LATENCY_BUCKETS; b++)
            trips += s.latency[b];
    }
    return Py_BuildValue(
        "{s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:i,s:i}", "checks",
        sum.checks, "allowed", sum.allowed, "denied", sum.denied, "fallback_open",
        sum.fallback_open, "fallback_closed", sum.fallback_closed, "fallback_local",
        sum.fallback_local, "redis_errors", sum.redis_errors, "redis_timeouts", sum.redis_timeouts,
        "breaker_skips", sum.breaker_skips, "redis_connects", sum.redis_connects, "redis_calls",
        trips, "deny_cache_hits", sum.deny_cache_hits, "quota_local", sum.quota_local,
        "quota_grants", sum.quota_grants, "quota_units", sum.quota_units, "settles", sum.settles,
        "memory_keys", sum.memory_keys, "handles", self->nconns, "loops", self->nloops);
}

static PyObject *Limiter_close(LimiterObject *self, PyObject *unused) {
    (void)unused;
    Limiter_close_handles(self);
    Py_RETURN_NONE;
}

/* ---- asyncio ------------------------------------------------------------ */

static AsyncLoop *loop_handle_slow(LimiterObject *self);

/* The handle attached to the running loop (made on its first use). */
static AsyncLoop *loop_handle(LimiterObject *self) {
    PyObject *tsd = PyThreadState_GetDict(); /* borrowed */
    PyObject *holder = tsd != NULL ? PyDict_GetItemWithError(tsd, str_running_key) : NULL;
    if (holder == NULL && PyErr_Occurred())
        return NULL;
    if (holder != NULL && holder == self->rl_holder && self->rl_loop != NULL &&
        self->rl_gen == fork_generation)
        return self->rl_loop;
    AsyncLoop *al = loop_handle_slow(self);
    Py_CLEAR(self->rl_holder);
    self->rl_loop = NULL;
    if (al != NULL && holder != NULL) {
        Py_INCREF(holder);
        self->rl_holder = holder;
        self->rl_loop = al;
        self->rl_gen = fork_generation;
    }
    return al;
}

static AsyncLoop *loop_handle_slow(LimiterObject *self) {
    if (self->gen != fork_generation)
        forget_after_fork(self);
    PyObject *loop = PyObject_CallNoArgs(get_running_loop);
    if (loop == NULL)
        return NULL;
    if (loop == Py_None) {
        Py_DECREF(loop);
        PyErr_SetString(PyExc_RuntimeError, "no running event loop (use await inside asyncio)");
        return NULL;
    }
    for (int i = 0; i < self->nloops; i++)
        if (self->loops[i]->loop == loop) {
            Py_DECREF(loop);
            return self->loops[i];
        }
    /* Loops closed since: their handles go (no callback can come). */
    for (int i = 0; i < self->nloops;) {
        PyObject *closed = PyObject_CallMethodNoArgs(self->loops[i]->loop, str_is_closed);
        int yes = closed != NULL && PyObject_IsTrue(closed) == 1;
        Py_XDECREF(closed);
        PyErr_Clear();
        if (yes) {
            if (self->rl_loop == self->loops[i]) {
                Py_CLEAR(self->rl_holder);
                self->rl_loop = NULL;
            }
            async_loop_free(self->loops[i]);
            self->loops[i] = self->loops[--self->nloops];
        } else
            i++;
    }
    if (self->nloops == MAX_LOOPS) {
        Py_DECREF(loop);
        PyErr_Format(ErrorType, "a Limiter serves at most %d running asyncio loops at once",
                     MAX_LOOPS);
        return NULL;
    }
    AsyncLoop *al = PyMem_Calloc(1, sizeof(*al));
    if (al == NULL) {
        Py_DECREF(loop);
        PyErr_NoMemory();
        return NULL;
    }
    al->loop = loop;
    if ((al->add_reader = PyObject_GetAttr(loop, str_add_reader)) == NULL ||
        (al->remove_reader = PyObject_GetAttr(loop, str_remove_reader)) == NULL ||
        (al->add_writer = PyObject_GetAttr(loop, str_add_writer)) == NULL ||
        (al->remove_writer = PyObject_GetAttr(loop, str_remove_writer)) == NULL ||
        (al->call_later = PyObject_GetAttr(loop, str_call_later)) == NULL ||
        (al->call_soon = PyObject_GetAttr(loop, str_call_soon)) == NULL ||
        (al->create_future = PyObject_GetAttr(loop, str_create_future)) == NULL) {
        async_loop_free(al);
        return NULL;
    }
    /* The memory backend needs no loop (its async checks answer before the
     * call returns) and must keep one state: its one handle serves every
     * loop (al->p stays NULL). Else the loop's own handle connects once
     * here (blocking, within connect_timeout_ms, as porteiro_new does),
     * then runs on the loop. */
    if (!self->memory) {
        al->p = handle_open(self);
        if (al->p == NULL) {
            async_loop_free(al);
            return NULL;
        }
        porteiro_status st = porteiro_attach_loop(al->p, &asyncio_ops, al);
        if (st != PORTEIRO_OK) {
            fail(al->p, st);
            async_loop_free(al);
            return NULL;
        }
    }
    self->loops[self->nloops++] = al;
    return al;
}

/* What an async call answers into: its future, and the limits to name. */
typedef struct {
    PyObject *future;
    porteiro_limit limits[PORTEIRO_MAX_LIMITS];
    size_t nlimits;
    PyObject *name;
} Pending;

static void pending_free(Pending *pd) {
    Py_XDECREF(pd->future);
    Py_XDECREF(pd->name);
    PyMem_Free(pd);
}

static void on_async(porteiro_t *p, porteiro_status st, const porteiro_decision *d, void *arg) {
    Pending *pd = arg;
    PyObject *r;
    if (st == PORTEIRO_OK) {
        PyObject *dec = decision_new(d, pd->limits, pd->nlimits, pd->name);
        r = dec != NULL ? PyObject_CallMethodOneArg(pd->future, str_set_result, dec) : NULL;
        Py_XDECREF(dec);
    } else {
        PyObject *exc = make_error(st, porteiro_errmsg(p));
        r = exc != NULL ? PyObject_CallMethodOneArg(pd->future, str_set_exception, exc) : NULL;
        Py_XDECREF(exc);
    }
    Py_XDECREF(r);
    /* A future cancelled meanwhile refuses its answer (InvalidStateError):
     * nothing to report, the check was made all the same. */
    if (r == NULL && invalid_state != NULL && PyErr_ExceptionMatches(invalid_state))
        PyErr_Clear();
    loop_report();
    pending_free(pd);
}

enum { A_CHECK, A_REFUND, A_SETTLE };

static PyObject *async_call(LimiterObject *self, int what, PyObject *const *args, Py_ssize_t nargs,
                            PyObject *kwnames) {
    static const char *const cn[] = {"key",         "limits", "cost", "now_ms",
                                     "max_wait_ms", "tier",   NULL};
    static const char *const rn[] = {"key", "limits", "cost", "now_ms", NULL};
    static const char *const sn[] = {"key",    "limits", "estimate", "used",
                                     "age_ms", "now_ms", "tier",     NULL};
    PyObject *a[7];
    const char *key;
    size_t klen;
    int64_t cost = 1, now, wait = 0;
    porteiro_usage u = {.estimate = 0, .used = 0, .age_ms = -1};
    PyObject *tier = NULL;
    if (what == A_CHECK) {
        if (parse_args("acheck", args, nargs, kwnames, cn, 3, 2, a) < 0 ||
            arg_int64(a[2], 1, "cost", &cost) < 0 ||
            arg_int64(a[3], PORTEIRO_NOW, "now_ms", &now) < 0 ||
            arg_int64(a[4], 0, "max_wait_ms", &wait) < 0)
            return NULL;
        tier = a[5];
    } else if (what == A_REFUND) {
        if (parse_args("arefund", args, nargs, kwnames, rn, 3, 2, a) < 0 ||
            arg_int64(a[2], 1, "cost", &cost) < 0 ||
            arg_int64(a[3], PORTEIRO_NOW, "now_ms", &now) < 0)
            return NULL;
    } else {
        if (parse_args("asettle", args, nargs, kwnames, sn, 4, 4, a) < 0 ||
            arg_int64(a[2], 0, "estimate", &u.estimate) < 0 ||
            arg_int64(a[3], 0, "used", &u.used) < 0 ||
            arg_int64(a[4], -1, "age_ms", &u.age_ms) < 0 ||
            arg_int64(a[5], PORTEIRO_NOW, "now_ms", &now) < 0)
            return NULL;
        tier = a[6];
    }
    if (arg_key(a[0], &key, &klen) < 0)
        return NULL;
    LimitsObject *l = limits_of(self, a[1]);
    if (l == NULL)
        return NULL;
    AsyncLoop *al = loop_handle(self);
    Pending *pd = al != NULL ? PyMem_Calloc(1, sizeof(*pd)) : NULL;
    if (pd == NULL) {
        if (al != NULL)
            PyErr_NoMemory();
        Py_DECREF(l);
        return NULL;
    }
    pd->future = PyObject_CallNoArgs(al->create_future);
    if (pd->future == NULL) {
        pending_free(pd);
        Py_DECREF(l);
        return NULL;
    }
    PyObject *fut = pd->future;
    Py_INCREF(fut); /* ours to return; pd's own goes with pd */
    /* The memory backend's one handle, taken with the GIL held throughout
     * (it answers before the call returns). */
    porteiro_t *h = al->p;
    Conn *mc = NULL;
    if (h == NULL) {
        if ((mc = conn_take(self)) == NULL) {
            pending_free(pd);
            Py_DECREF(l);
            Py_DECREF(fut);
            return NULL;
        }
        h = mc->p;
    }
    Py_INCREF(l->name);
    pd->name = l->name;
    Request r;
    if (build_request(l, tier, key, klen, cost, now, wait, &r) < 0) {
        if (mc != NULL)
            conn_give(mc);
        pending_free(pd);
        Py_DECREF(l);
        Py_DECREF(fut);
        return NULL;
    }
    memcpy(pd->limits, r.limits, r.nlimits * sizeof(pd->limits[0]));
    pd->nlimits = r.nlimits;
    porteiro_status st = what == A_CHECK    ? porteiro_check_async(h, &r.req, on_async, pd)
                         : what == A_REFUND ? porteiro_refund_async(h, &r.req, on_async, pd)
                                            : porteiro_settle_async(h, &r.req, &u, on_async, pd);
    Py_DECREF(l);
    if (st != PORTEIRO_OK) { /* the callback will never come */
        pending_free(pd);
        Py_DECREF(fut);
        fail(h, st);
        if (mc != NULL)
            conn_give(mc);
        return NULL;
    }
    if (mc != NULL)
        conn_give(mc);
    if (PyErr_Occurred()) { /* an answer before the return could not be given */
        Py_DECREF(fut);
        return NULL;
    }
    return fut;
}

static PyObject *Limiter_acheck(LimiterObject *self, PyObject *const *args, Py_ssize_t nargs,
                                PyObject *kwnames) {
    return async_call(self, A_CHECK, args, nargs, kwnames);
}

static PyObject *Limiter_arefund(LimiterObject *self, PyObject *const *args, Py_ssize_t nargs,
                                 PyObject *kwnames) {
    return async_call(self, A_REFUND, args, nargs, kwnames);
}

static PyObject *Limiter_asettle(LimiterObject *self, PyObject *const *args, Py_ssize_t nargs,
                                 PyObject *kwnames) {
    return async_call(self, A_SETTLE, args, nargs, kwnames);
}

static PyObject *Limiter_get_memory(LimiterObject *self, void *c) {
    (void)c;
    return PyBool_FromLong(self->memory);
}

/* Calls fn with the key argument (args[0] or key=) made bytes when it
 * needs surrogate_key. */
typedef PyObject *fastcall_fn(PyObject *, PyObject *const *, Py_ssize_t, PyObject *);
static PyObject *with_key_fixed(fastcall_fn *fn, PyObject *self, PyObject *const *args,
                                Py_ssize_t nargs, PyObject *kwnames) {
    Py_ssize_t nkw = kwnames != NULL ? PyTuple_GET_SIZE(kwnames) : 0, at = -1;
    if (nargs > 0)
        at = 0;
    for (Py_ssize_t k = 0; at < 0 && k < nkw; k++)
        if (PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(kwnames, k), "key") == 0)
            at = nargs + k;
    PyObject *fixed = at >= 0 && nargs + nkw <= 16 ? surrogate_key(args[at]) : NULL;
    if (fixed == NULL)
        return fn(self, args, nargs, kwnames);
    PyObject *copy[16];
    memcpy(copy, args, (size_t)(nargs + nkw) * sizeof(*copy));
    copy[at] = fixed;
    PyObject *r = fn(self, copy, nargs, kwnames);
    Py_DECREF(fixed);
    return r;
}

#define KEYED(name)                                                                                \
    static PyObject *Limiter_##name##_k(LimiterObject *self, PyObject *const *args,                \
                                        Py_ssize_t nargs, PyObject *kwnames) {                     \
        return with_key_fixed((fastcall_fn *)(void (*)(void))Limiter_##name, (PyObject *)self,     \
                              args, nargs, kwnames);                                               \
    }
KEYED(check)
KEYED(peek)
KEYED(refund)
KEYED(reset)
KEYED(settle)
KEYED(acquire)
KEYED(release)
KEYED(renew)
KEYED(acheck)
KEYED(arefund)
KEYED(asettle)

#define M(name, flags, doc)                                                                        \
    { #name, (PyCFunction)(void (*)(void))Limiter_##name, flags, doc }
#define MK(name, doc)                                                                              \
    { #name, (PyCFunction)(void (*)(void))Limiter_##name##_k, FK, doc }
#define FK (METH_FASTCALL | METH_KEYWORDS)
static PyMethodDef Limiter_methods[] = {
    MK(check, "check(key, limits, cost=1, *, now_ms=None, max_wait_ms=0, tier=None) -> Decision"),
    MK(peek, "peek(key, limits, *, now_ms=None, tier=None) -> Decision (cost 0)"),
    M(check_many, FK, "check_many(items, *, now_ms=None) -> list of Decision or exception"),
    MK(refund, "refund(key, limits, cost=1, *, now_ms=None) -> Decision"),
    MK(reset, "reset(key, limits) -> None"),
    MK(settle,
       "settle(key, limits, estimate, used, *, age_ms=-1, now_ms=None, tier=None) -> Decision"),
    MK(acquire, "acquire(key, limit, lease_ms, *, now_ms=None) -> (Decision, lease_id|None)"),
    MK(release, "release(key, lease_id, *, now_ms=None) -> bool"),
    MK(renew, "renew(key, lease_id, lease_ms, *, now_ms=None) -> bool"),
    MK(acheck, "acheck(...) -> asyncio.Future of Decision (check on the running loop)"),
    MK(arefund, "arefund(...) -> asyncio.Future of Decision"),
    MK(asettle, "asettle(...) -> asyncio.Future of Decision"),
    M(policy, METH_O, "policy(name) -> Limits of the config's policy"),
    M(policies, METH_NOARGS, "policies() -> the config's policy names"),
    M(stats, METH_NOARGS, "stats() -> dict of counters, summed over the handles"),
    M(close, METH_NOARGS, "close(): frees the C handles not in use"),
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Limiter_getset[] = {
    {"memory", (getter)Limiter_get_memory, NULL, "True on the memory backend (no Redis).", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject LimiterType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "porteiro._porteiro.Limiter",
    .tp_basicsize = sizeof(LimiterObject),
    .tp_dealloc = (destructor)Limiter_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "The C limiter (porteiro.Limiter wraps it).",
    .tp_traverse = (traverseproc)Limiter_traverse,
    .tp_clear = (inquiry)Limiter_clear,
    .tp_weaklistoffset = offsetof(LimiterObject, weakrefs),
    .tp_methods = Limiter_methods,
    .tp_getset = Limiter_getset,
    .tp_init = (initproc)Limiter_init,
    .tp_new = PyType_GenericNew,
};

/* ---- module functions ---------------------------------------------------- */

static PyObject *mod_parse_duration(PyObject *m, PyObject *text) {
    (void)m;
    const char *s = PyUnicode_AsUTF8(text);
    if (s == NULL)
        return NULL;
    int64_t ms;
    if (porteiro_parse_duration(s, &ms) != PORTEIRO_OK)
        return PyErr_Format(InvalidLimitType, "bad duration '%s' (250ms, 1s, 1m, 1h, 1d)", s);
    return PyLong_FromLongLong((long long)ms);
}

static PyMethodDef module_methods[] = {
    {"parse_duration", (PyCFunction)mod_parse_duration, METH_O,
     "parse_duration('1m') -> 60000 (ms)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT,
    "porteiro._porteiro",
    "libporteiro's C API for Python (porteiro wraps it).",
    -1,
    module_methods,
    NULL,
    NULL,
    NULL,
    NULL,
};

#define INTERN(var, s)                                                                             \
    if ((var = PyUnicode_InternFromString(s)) == NULL)                                             \
        return NULL;

static void on_fork_child(void) {
    fork_generation++;
}

PyMODINIT_FUNC PyInit__porteiro(void);
PyMODINIT_FUNC PyInit__porteiro(void) {
    INTERN(str_add_reader, "add_reader");
    INTERN(str_remove_reader, "remove_reader");
    INTERN(str_add_writer, "add_writer");
    INTERN(str_remove_writer, "remove_writer");
    INTERN(str_call_later, "call_later");
    INTERN(str_call_soon, "call_soon");
    INTERN(str_cancel, "cancel");
    INTERN(str_create_future, "create_future");
    INTERN(str_set_result, "set_result");
    INTERN(str_set_exception, "set_exception");
    INTERN(str_is_closed, "is_closed");
    INTERN(str_running_key, "__asyncio_running_event_loop__");
    pthread_atfork(NULL, NULL, on_fork_child);
    if (PyType_Ready(&ConfigType) < 0 || PyType_Ready(&LimitsType) < 0 ||
        PyType_Ready(&DecisionType) < 0 || PyType_Ready(&LimiterType) < 0 ||
        PyType_Ready(&LoopCallbackType) < 0)
        return NULL;
    PyObject *events = PyImport_ImportModule("asyncio.events");
    if (events == NULL)
        return NULL;
    get_running_loop = PyObject_GetAttrString(events, "_get_running_loop");
    Py_DECREF(events);
    if (get_running_loop == NULL)
        return NULL;
    PyObject *exceptions = PyImport_ImportModule("asyncio.exceptions");
    if (exceptions == NULL)
        return NULL;
    invalid_state = PyObject_GetAttrString(exceptions, "InvalidStateError");
    Py_DECREF(exceptions);
    if (invalid_state == NULL)
        return NULL;
    PyObject *m = PyModule_Create(&moduledef);
    if (m == NULL)
        return NULL;
    ErrorType = PyErr_NewExceptionWithDoc(
        "porteiro.PorteiroError", "A porteiro call failed; .status names the status.", NULL, NULL);
    PyObject *bases = ErrorType != NULL ? PyTuple_Pack(2, ErrorType, PyExc_ValueError) : NULL;
    InvalidLimitType =
        bases != NULL
            ? PyErr_NewExceptionWithDoc("porteiro.InvalidLimit",
                                        "A bad limit text, key, URL or option (a ValueError), "
                                        "with porteiro's own message.",
                                        bases, NULL)
            : NULL;
    Py_XDECREF(bases);
    RedisErrorType =
        ErrorType != NULL
            ? PyErr_NewExceptionWithDoc("porteiro.RedisError",
                                        "Redis failed and on_error is 'error' (or the call "
                                        "is one that never falls back: reset, leases).",
                                        ErrorType, NULL)
            : NULL;
    if (InvalidLimitType == NULL || RedisErrorType == NULL ||
        PyModule_AddObjectRef(m, "PorteiroError", ErrorType) < 0 ||
        PyModule_AddObjectRef(m, "InvalidLimit", InvalidLimitType) < 0 ||
        PyModule_AddObjectRef(m, "RedisError", RedisErrorType) < 0 ||
        PyModule_AddObjectRef(m, "Limits", (PyObject *)&LimitsType) < 0 ||
        PyModule_AddObjectRef(m, "Decision", (PyObject *)&DecisionType) < 0 ||
        PyModule_AddObjectRef(m, "Limiter", (PyObject *)&LimiterType) < 0 ||
        PyModule_AddStringConstant(m, "LIBRARY_VERSION", PORTEIRO_VERSION) < 0 ||
        PyModule_AddIntConstant(m, "MAX_KEY_LEN", PORTEIRO_MAX_KEY_LEN) < 0 ||
        PyModule_AddIntConstant(m, "MAX_LIMITS", PORTEIRO_MAX_LIMITS) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
