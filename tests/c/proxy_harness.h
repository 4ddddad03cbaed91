/*
 * proxy_harness.h - the fault-injection proxy (tests/harness/proxy.py) for
 * the C tests: the C twin of proxy.py's Proxy class.
 *
 * ph_start() runs `python3 <source dir>/tests/harness/proxy.py --upstream
 * 127.0.0.1:PORT` (the source dir is the compile definition
 * WATCHLOCK_SOURCE_DIR) and reads its `READY <port> <control port>` line.
 * Clients connect to ph_url() instead of the server's URL; every connection
 * gets its own upstream connection and an id (0, 1, 2 ... in accept order).
 *
 * The proxy is a child of the calling thread and dies with it
 * (PR_SET_PDEATHSIG, and EOF on its stdin pipe when the process exits), so a
 * crashed or timed-out test leaves no proxy behind. Start it from the test's
 * main thread: PR_SET_PDEATHSIG fires when the *thread* that forked exits.
 *
 * ph_cmd() sends one control line (printf-style) and waits for the reply
 * line. Commands (see the docstring of proxy.py for details):
 *
 *     delay up|down|both MS [up|down|both MS]...    conn ID delay ...
 *     pause | blackhole | resume | reset | drop-reply-once
 *     conn ID pause|blackhole|resume|reset|drop-reply-once
 *     conn ID hold-up-at TEXT   (split a pipeline: TEXT and after wait for resume)
 *     refuse on|off    list    stats    clear    ping    quit
 *
 * Functions that can fail print the reason on stderr and return NULL / -1.
 * The control functions may be called from any thread (one control
 * connection behind a mutex).
 */
#ifndef WATCHLOCK_PROXY_HARNESS_H
#define WATCHLOCK_PROXY_HARNESS_H

#include <stddef.h>
#include <sys/types.h>

typedef struct ph_proxy ph_proxy;

/* Starts a proxy in front of 127.0.0.1:upstream_port; NULL on failure. */
ph_proxy *ph_start(int upstream_port);
/* Stops the proxy (closing every proxied connection) and waits for it. NULL accepted. */
void ph_free(ph_proxy *px);

/* The port clients connect to. */
int ph_port(const ph_proxy *px);
int ph_control_port(const ph_proxy *px);
pid_t ph_pid(const ph_proxy *px);
/* "redis://127.0.0.1:PORT". */
const char *ph_url(const ph_proxy *px);

/* Sends one control command; 0 when the reply is "OK ...", -1 otherwise
 * (the ERR reply or the I/O error is printed on stderr). */
int ph_cmd(ph_proxy *px, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The same, copying the reply line (without newline, e.g. "OK conns=1 ...",
 * "ERR no connection 3") into reply[size]; prints nothing on ERR. */
int ph_cmd_reply(ph_proxy *px, char *reply, size_t size, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* A field of `stats`: "conns", "accepted", "refused" or "discarded"; -1 on failure. */
long long ph_stat(ph_proxy *px, const char *field);

#endif
