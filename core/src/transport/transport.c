/*
 * transport.c - one socket to one Redis server: connect with a deadline,
 * non-blocking I/O with deadlines, pipelining, RESP through hiredis's reader.
 * TLS records go through tls.c. See transport.h for the contract.
 */
#include "transport/transport.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#define READ_CHUNK 16384

struct wl_conn {
    int fd;
    void *ssl; /* SSL * (tls.c) or NULL */
    redisReader *reader;
    char *out; /* queued output: out[off .. len) is not sent yet */
    size_t off, len, cap;
    int want; /* TLS: the last record operation needs POLLIN / POLLOUT */
    int err;
    int64_t command_ms;
    uint64_t tag;
    /* wl_conn_expect: the next `expect_n` replies go to expect_fn, not to the reader's caller */
    void (*expect_fn)(void *arg, int index, const redisReply *r);
    void *expect_arg;
    int expect_n, expect_i;
    char errstr[200];
    char label[300];
};

static int fail_conn(wl_conn *c, int kind, const char *fmt, ...) WL_FORMAT(3, 4);
static int fail_conn(wl_conn *c, int kind, const char *fmt, ...)
{
    if (c->err == WL_CERR_NONE) {
        c->err = kind;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(c->errstr, sizeof c->errstr, fmt, ap);
        va_end(ap);
    }
    return -1;
}

static int fail_errno(wl_conn *c, int e, const char *what)
{
    int kind = (e == ECONNRESET || e == EPIPE) ? WL_CERR_RESET : WL_CERR_IO;
    return fail_conn(c, kind, "%s: %s", what, strerror(e));
}

int wl_conn_fd(const wl_conn *c) { return c->fd; }
int wl_conn_err(const wl_conn *c) { return c->err; }
const char *wl_conn_errstr(const wl_conn *c) { return c->errstr; }
const char *wl_conn_label(const wl_conn *c) { return c->label; }
void wl_conn_set_timeout(wl_conn *c, int64_t command_ms) { c->command_ms = command_ms; }
int64_t wl_conn_timeout(const wl_conn *c) { return c->command_ms; }
void wl_conn_set_tag(wl_conn *c, uint64_t tag) { c->tag = tag; }
uint64_t wl_conn_tag(const wl_conn *c) { return c->tag; }
void wl_conn_fail(wl_conn *c, const char *why) { fail_conn(c, WL_CERR_IO, "%s", why); }

void wl_conn_expect(wl_conn *c, int n, void (*fn)(void *arg, int index, const redisReply *r), void *arg)
{
    c->expect_fn = fn;
    c->expect_arg = arg;
    c->expect_n = n;
    c->expect_i = 0;
}

void wl_conn_free(wl_conn *c)
{
    if (c == NULL)
        return;
    if (c->ssl)
        wl_tls_close(c->ssl, c->err == WL_CERR_NONE);
    if (c->fd >= 0)
        close(c->fd);
    if (c->reader)
        redisReaderFree(c->reader);
    free(c->out);
    free(c);
}

/* Waits until fd is ready for `events` or the deadline (us, monotonic).
 * 1 ready, 0 timed out, -1 error (errno). */
static int wait_fd(int fd, short events, int64_t deadline_us)
{
    for (;;) {
        int64_t left = deadline_us - wl_now_us();
        if (left <= 0)
            return 0;
        struct pollfd p = {.fd = fd, .events = events};
        int ms = (int)((left + 999) / 1000);
        int n = poll(&p, 1, ms);
        if (n > 0)
            return 1;
        if (n < 0 && errno != EINTR)
            return -1;
    }
}

static void tune_socket(int fd, const wl_target *t)
{
    if (t->unix_path)
        return;
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (t->keepalive) {
        /* Dead peers are noticed in about a minute rather than hours. */
        int idle = 15, intvl = 5, cnt = 3;
        setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
        setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
        setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof intvl);
        setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof cnt);
    }
}

/* Non-blocking connect of one address within the deadline: fd, or -1 with
 * *timed_out / errno. */
static int connect_addr(const struct sockaddr *sa, socklen_t salen, int family, int64_t deadline_us, bool *timed_out)
{
    *timed_out = false;
    int fd = socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    if (connect(fd, sa, salen) == 0)
        return fd;
    if (errno != EINPROGRESS && errno != EINTR) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    int w = wait_fd(fd, POLLOUT, deadline_us);
    int soerr = 0;
    socklen_t len = sizeof soerr;
    if (w == 1 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &len) == 0 && soerr == 0)
        return fd;
    int e = w == 0 ? ETIMEDOUT : (w < 0 ? errno : soerr);
    *timed_out = w == 0;
    close(fd);
    errno = e;
    return -1;
}

static int open_socket(wl_conn *c, const wl_target *t, int64_t deadline_us)
{
    bool timed_out = false;
    if (t->unix_path) {
        struct sockaddr_un sun;
        memset(&sun, 0, sizeof sun);
        sun.sun_family = AF_UNIX;
        if (strlen(t->unix_path) >= sizeof sun.sun_path)
            return wl_fail(WATCHLOCK_EINVAL, "unix socket path too long: %s", t->unix_path);
        strcpy(sun.sun_path, t->unix_path);
        c->fd = connect_addr((struct sockaddr *)&sun, sizeof sun, AF_UNIX, deadline_us, &timed_out);
    } else {
        char port[16];
        snprintf(port, sizeof port, "%d", t->port);
        struct addrinfo hints, *res = NULL;
        memset(&hints, 0, sizeof hints);
        hints.ai_family = AF_UNSPEC;
        hints.ai_socktype = SOCK_STREAM;
        int g = getaddrinfo(t->host, port, &hints, &res);
        if (g != 0)
            return wl_fail(WATCHLOCK_ECONN, "cannot connect to %s: cannot resolve host: %s", t->label,
                           gai_strerror(g));
        for (struct addrinfo *ai = res; ai != NULL && c->fd < 0; ai = ai->ai_next) {
            c->fd = connect_addr(ai->ai_addr, ai->ai_addrlen, ai->ai_family, deadline_us, &timed_out);
            if (timed_out)
                break;
        }
        freeaddrinfo(res);
    }
    if (c->fd < 0)
        return timed_out ? wl_fail(WATCHLOCK_ECONN, "cannot connect to %s: connect timed out", t->label)
                         : wl_fail(WATCHLOCK_ECONN, "cannot connect to %s: %s", t->label, strerror(errno));
    tune_socket(c->fd, t);
    return WATCHLOCK_OK;
}

int wl_conn_open(const wl_target *t, int64_t connect_ms, int64_t command_ms, wl_conn **out)
{
    *out = NULL;
    wl_conn *c = calloc(1, sizeof *c);
    if (c == NULL)
        return wl_fail(WATCHLOCK_ENOMEM, "connect: out of memory");
    c->fd = -1;
    c->command_ms = command_ms;
    snprintf(c->label, sizeof c->label, "%s", t->label);
    c->reader = redisReaderCreate();
    if (c->reader == NULL) {
        free(c);
        return wl_fail(WATCHLOCK_ENOMEM, "connect: out of memory");
    }
    int64_t deadline = wl_deadline_after_ms(connect_ms);
    int rc = open_socket(c, t, deadline);
    if (rc == WATCHLOCK_OK && t->tls != NULL)
        rc = wl_tls_connect(t->tls, c->fd, t->host, t->sni, deadline, t->label, &c->ssl);
    if (rc != WATCHLOCK_OK) {
        wl_conn_free(c);
        return rc;
    }
    *out = c;
    return WATCHLOCK_OK;
}

/* "<prefix><decimal v>\r\n" at p; returns the end. */
static char *put_header(char *p, char prefix, size_t v)
{
    char digits[24];
    int n = 0;
    do {
        digits[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v > 0);
    *p++ = prefix;
    while (n > 0)
        *p++ = digits[--n];
    *p++ = '\r';
    *p++ = '\n';
    return p;
}

/* Encodes the command as RESP ("*<argc>" then "$<len>" and the bytes of
 * each argument) straight into the output buffer: hiredis's formatter
 * allocated every command and sprintf'd every header, which was most of
 * the client's user time in a lock cycle. */
int wl_conn_append(wl_conn *c, int argc, const char *const *argv, const size_t *lens)
{
    if (c->err)
        return -1;
    if (argc <= 0)
        return fail_conn(c, WL_CERR_PROTOCOL, "empty command");
    enum { HEADER_MAX = 1 + 20 + 2 };
    size_t n = HEADER_MAX;
    for (int i = 0; i < argc; i++) {
        size_t len = lens ? lens[i] : strlen(argv[i]);
        if (len > SIZE_MAX / 4 || n > SIZE_MAX / 4)
            return fail_conn(c, WL_CERR_OOM, "out of memory");
        n += HEADER_MAX + len + 2;
    }
    if (c->off > 0 && c->off == c->len)
        c->off = c->len = 0;
    if (c->len + n > c->cap) {
        size_t cap = c->cap ? c->cap : 256;
        while (cap < c->len + n)
            cap *= 2;
        char *grown = realloc(c->out, cap);
        if (grown == NULL)
            return fail_conn(c, WL_CERR_OOM, "out of memory");
        c->out = grown;
        c->cap = cap;
    }
    char *p = put_header(c->out + c->len, '*', (size_t)argc);
    for (int i = 0; i < argc; i++) {
        size_t len = lens ? lens[i] : strlen(argv[i]);
        p = put_header(p, '$', len);
        memcpy(p, argv[i], len);
        p += len;
        *p++ = '\r';
        *p++ = '\n';
    }
    c->len = (size_t)(p - c->out);
    return 0;
}

/* One write attempt: >0 bytes, 0 would block, -1 failed. */
static ssize_t io_write(wl_conn *c, const char *buf, size_t len)
{
    if (c->ssl) {
        char err[160];
        int kind = WL_CERR_NONE;
        ssize_t n = wl_tls_write(c->ssl, buf, len, &c->want, err, sizeof err, &kind);
        if (n < 0)
            return fail_conn(c, kind, "%s", err);
        return n;
    }
    ssize_t n = send(c->fd, buf, len, MSG_NOSIGNAL);
    if (n >= 0)
        return n;
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
        c->want = POLLOUT;
        return 0;
    }
    return fail_errno(c, errno, "write");
}

/* One read attempt into the reader: >0 bytes, 0 would block, -1 failed or EOF. */
static ssize_t io_read(wl_conn *c)
{
    char buf[READ_CHUNK];
    ssize_t n;
    if (c->ssl) {
        char err[160];
        int kind = WL_CERR_NONE;
        n = wl_tls_read(c->ssl, buf, sizeof buf, &c->want, err, sizeof err, &kind);
        if (n < 0)
            return fail_conn(c, kind, "%s", err);
        if (n == 0 && kind == WL_CERR_EOF)
            return fail_conn(c, WL_CERR_EOF, "connection closed by server");
        if (n == 0)
            return 0;
    } else {
        n = recv(c->fd, buf, sizeof buf, 0);
        if (n == 0)
            return fail_conn(c, WL_CERR_EOF, "connection closed by server");
        if (n < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
                c->want = POLLIN;
                return 0;
            }
            return fail_errno(c, errno, "read");
        }
    }
    if (redisReaderFeed(c->reader, buf, (size_t)n) != REDIS_OK)
        return fail_conn(c, WL_CERR_OOM, "out of memory");
    return n;
}

int wl_conn_write_some(wl_conn *c, bool *done)
{
    *done = false;
    if (c->err)
        return -1;
    while (c->off < c->len) {
        ssize_t n = io_write(c, c->out + c->off, c->len - c->off);
        if (n < 0)
            return -1;
        if (n == 0)
            return 0;
        c->off += (size_t)n;
    }
    c->off = c->len = 0;
    *done = true;
    return 0;
}

int wl_conn_read_some(wl_conn *c)
{
    if (c->err)
        return -1;
    /* Drain the socket (and, with TLS, records already decrypted). */
    for (;;) {
        ssize_t n = io_read(c);
        if (n < 0)
            return -1;
        if (n == 0)
            return 0;
    }
}

bool wl_conn_wants_write(const wl_conn *c)
{
    return c->off < c->len || c->want == POLLOUT;
}

int wl_conn_next_reply(wl_conn *c, redisReply **out)
{
    *out = NULL;
    if (c->err)
        return -1;
    for (;;) {
        void *r = NULL;
        if (redisReaderGetReply(c->reader, &r) != REDIS_OK)
            return fail_conn(c, WL_CERR_PROTOCOL, "protocol error: %s", c->reader->errstr);
        if (r != NULL && c->expect_i < c->expect_n) {
            /* a reply the owner asked for at connect time (wl_conn_expect):
             * handed over before any later reply can be seen */
            c->expect_fn(c->expect_arg, c->expect_i++, r);
            freeReplyObject(r);
            continue;
        }
        *out = r;
        return r != NULL;
    }
}

/* Waits for the socket within the deadline; fails the connection on timeout. */
static int wait_io(wl_conn *c, short events, int64_t deadline_us)
{
    int w = wait_fd(c->fd, events, deadline_us);
    if (w == 1)
        return 0;
    if (w == 0)
        return fail_conn(c, WL_CERR_TIMEOUT, "timed out");
    return fail_errno(c, errno, "poll");
}

int wl_conn_get_reply(wl_conn *c, redisReply **out)
{
    *out = NULL;
    int64_t deadline = wl_deadline_after_ms(c->command_ms);
    if (deadline < 0)
        deadline = INT64_MAX;
    for (;;) {
        int got = wl_conn_next_reply(c, out);
        if (got != 0)
            return got > 0 ? 0 : -1;
        bool done;
        if (wl_conn_write_some(c, &done) < 0)
            return -1;
        if (!done) {
            if (wait_io(c, c->want == POLLIN ? POLLIN : POLLOUT, deadline) < 0)
                return -1;
            continue;
        }
        ssize_t n = io_read(c);
        if (n < 0)
            return -1;
        if (n == 0 && wait_io(c, c->want == POLLOUT ? POLLOUT : POLLIN, deadline) < 0)
            return -1;
    }
}

redisReply *wl_conn_command(wl_conn *c, int argc, const char *const *argv, const size_t *lens)
{
    redisReply *r = NULL;
    if (wl_conn_append(c, argc, argv, lens) != 0 || wl_conn_get_reply(c, &r) != 0)
        return NULL;
    return r;
}
