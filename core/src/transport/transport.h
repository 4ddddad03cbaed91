/*
 * transport/transport.h - the transport layer: one socket to one Redis
 * server (tls.c, transport.c). Calls into base/ and proto/ only.
 *
 * The core owns its sockets: connect with a deadline, non-blocking reads
 * and writes with deadlines, pipelining, TCP keepalive, close-on-exec, and
 * TLS through OpenSSL. hiredis is used only for what it is good at: the
 * RESP reader and command formatting.
 *
 * A connection that saw any error (I/O, timeout, protocol, TLS) stays
 * failed: every later call fails at once, and pools free it instead of
 * reusing it, so a late reply can never be matched to a later request.
 */
#ifndef WATCHLOCK_TRANSPORT_H
#define WATCHLOCK_TRANSPORT_H

#include "proto/proto.h"

#include <hiredis/hiredis.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Why a connection failed (wl_conn.err). */
enum {
    WL_CERR_NONE = 0,
    WL_CERR_IO,       /* a socket error other than the ones below */
    WL_CERR_RESET,    /* ECONNRESET / EPIPE: the peer dropped the connection */
    WL_CERR_EOF,      /* the server closed the connection */
    WL_CERR_TIMEOUT,  /* no reply (or no connect / handshake) within the deadline */
    WL_CERR_PROTOCOL, /* a reply the RESP reader cannot parse */
    WL_CERR_TLS,      /* TLS handshake or record failure */
    WL_CERR_OOM,
};

typedef struct wl_tls wl_tls; /* a shared, immutable SSL_CTX (thread-safe) */

/* Where to connect: one server's address and how. */
typedef struct wl_target {
    const char *host;      /* NULL for a unix socket */
    int port;
    const char *unix_path; /* NULL for TCP */
    bool keepalive;
    const wl_tls *tls;     /* NULL: plain TCP */
    const char *sni;       /* NULL: host */
    const char *label;     /* "host:port" for messages */
} wl_target;

typedef struct wl_conn wl_conn;

/* Loads certificates and keys; EINVAL with a clear message when a file is
 * missing or unusable. Never fails for plain URLs (returns NULL *out). */
int wl_tls_new(const wl_tls_opts *opts, wl_tls **out);
void wl_tls_free(wl_tls *tls);

/* TLS records on a connected socket (tls.c, used by transport.c only).
 * wl_tls_connect runs the handshake within the deadline and checks the
 * server's certificate; *ssl is an SSL *. Read/write return bytes moved,
 * 0 when the socket must first be readable/writable (*want = POLLIN or
 * POLLOUT; for reads, kind = WL_CERR_EOF means a clean close), or -1 with
 * err and *kind set. */
int wl_tls_connect(const wl_tls *tls, int fd, const char *host, const char *sni, int64_t deadline_us,
                   const char *label, void **ssl);
long wl_tls_read(void *ssl, void *buf, size_t len, int *want, char *err, size_t errlen, int *kind);
long wl_tls_write(void *ssl, const void *buf, size_t len, int *want, char *err, size_t errlen, int *kind);
void wl_tls_close(void *ssl, bool graceful);

/* Opens a connection: connect (and TLS handshake) within connect_ms;
 * every reply then has command_ms. On failure *out is NULL and the
 * returned status (ECONN/ENOMEM) has a detail message. */
int wl_conn_open(const wl_target *t, int64_t connect_ms, int64_t command_ms, wl_conn **out);
void wl_conn_free(wl_conn *c);
void wl_conn_set_timeout(wl_conn *c, int64_t command_ms);
int64_t wl_conn_timeout(const wl_conn *c);
/* A number the owner keeps with the connection (node.c: the address
 * generation it was opened for). */
void wl_conn_set_tag(wl_conn *c, uint64_t tag);
uint64_t wl_conn_tag(const wl_conn *c);
/* The next n replies read on the connection (commands the caller has
 * just queued, e.g. at connect time) go to fn(arg, 0..n-1, reply) (the
 * reply is freed after) on whichever thread reads them, before any later
 * reply is returned: wl_conn_next_reply, wl_conn_get_reply and
 * wl_conn_command never return them. */
void wl_conn_expect(wl_conn *c, int n, void (*fn)(void *arg, int index, const redisReply *r), void *arg);
/* Marks the connection failed (it will not be reused). */
void wl_conn_fail(wl_conn *c, const char *why);
int wl_conn_fd(const wl_conn *c);
int wl_conn_err(const wl_conn *c); /* WL_CERR_* */
const char *wl_conn_errstr(const wl_conn *c);
const char *wl_conn_label(const wl_conn *c);

/* Queues one command (nothing is sent yet). 0, or -1 out of memory. */
int wl_conn_append(wl_conn *c, int argc, const char *const *argv, const size_t *lens);
/* Sends what is queued and waits for the next reply, within the command
 * timeout (from now). 0 with *out set, or -1 (the connection is failed). */
int wl_conn_get_reply(wl_conn *c, redisReply **out);
/* append + get_reply; NULL on failure. */
redisReply *wl_conn_command(wl_conn *c, int argc, const char *const *argv, const size_t *lens);

/* For event loops (the subscriber): non-blocking steps. */
int wl_conn_write_some(wl_conn *c, bool *done); /* -1 on error; *done when nothing is left queued */
int wl_conn_read_some(wl_conn *c);               /* reads what is there; -1 on error or EOF */
/* A reply already read and parsed, without I/O: 1 (set), 0 (none yet), -1 protocol error. */
int wl_conn_next_reply(wl_conn *c, redisReply **out);
bool wl_conn_wants_write(const wl_conn *c); /* TLS may need the socket writable to read */

#endif
