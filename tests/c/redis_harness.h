/*
 * redis_harness.h - starts and stops real redis-server processes for the C
 * tests (the C twin of tests/harness/redis_server.py).
 *
 * A server listens on 127.0.0.1 at a free port (found by binding port 0),
 * keeps no data on disk (--save "" --appendonly no), and lives in its own
 * temporary directory (log file, optional unix socket). It is a child of the
 * calling process and dies with it (PR_SET_PDEATHSIG), so a test that
 * crashes or times out leaves no server behind. Every test binary starts its
 * own servers, so binaries may run in parallel.
 *
 * Functions that can fail print the reason on stderr and return NULL / -1.
 * Commands use a fresh hiredis connection each time (authenticated when the
 * server has a password), so they keep working after CLIENT KILL or a
 * restart.
 *
 * TLS servers (rh_options.tls): the server listens with TLS on rh_tls_port()
 * and, for the harness only, in plain text on rh_port(): hiredis 0.14 has no
 * TLS, so readiness checks and rh_command() use the plain port, and tests
 * give the library rh_url(), which names the TLS port only. Certificates
 * come from tests/harness/tls.py (run once per process by rh_tls_dir()).
 *
 * Sentinel groups (rh_sentinel_start) are run by the Python harness
 * (tests/harness/sentinel.py --serve): one master, one replica, three
 * sentinels, torn down when rh_sentinel_free() closes its stdin or the test
 * process dies.
 */
#ifndef WATCHLOCK_REDIS_HARNESS_H
#define WATCHLOCK_REDIS_HARNESS_H

#include <hiredis/hiredis.h>
#include <stddef.h>
#include <sys/types.h>

typedef struct rh_server rh_server;

typedef struct rh_options {
    const char *password;     /* --requirepass (NULL: none) */
    int unixsocket;           /* 1: also listen on <dir>/redis.sock */
    const char *const *extra; /* further redis-server arguments, NULL-terminated (may be NULL) */
    int tls;                  /* 1: also listen with TLS (see above) */
    const char *tls_cert;     /* the server's pair from rh_tls_dir(): "server" (NULL), "other-name", "unknown" */
    int tls_auth_clients;     /* 1: --tls-auth-clients yes (mutual TLS) */
} rh_options;

/* Starts a server and waits until it answers PING. opts may be NULL. */
rh_server *rh_start(const rh_options *opts);
/* Stops the server if it runs and removes its directory. NULL accepted. */
void rh_free(rh_server *srv);

int rh_port(const rh_server *srv);
pid_t rh_pid(const rh_server *srv);
/* "redis://127.0.0.1:PORT" (without credentials); for a TLS server
 * "rediss://127.0.0.1:TLS_PORT?cacert=DIR/ca.crt", plus
 * "&cert=DIR/client.crt&key=DIR/client.key" when it asks for client certificates. */
const char *rh_url(const rh_server *srv);
/* The TLS port; 0 for a plain server. */
int rh_tls_port(const rh_server *srv);
/* Path of the unix socket ("" when not asked for). */
const char *rh_unixsocket(const rh_server *srv);
int rh_running(const rh_server *srv);

/* SIGTERM and wait for the exit (SIGKILL after 10 s). 0 on success. */
int rh_stop(rh_server *srv);
/* SIGKILL and wait. */
void rh_kill(rh_server *srv);
/* Starts the server again on the same port with the same arguments. */
int rh_restart(rh_server *srv);
/* SIGSTOP / SIGCONT: freeze and thaw the server. */
int rh_pause(rh_server *srv);
int rh_resume(rh_server *srv);

/* A new authenticated connection (1 s timeouts, 10 s for commands); NULL on failure. */
redisContext *rh_connect(const rh_server *srv);
/* One command on a fresh connection; the caller frees the reply. NULL when
 * the connection failed (an error reply is returned as a reply). */
redisReply *rh_command(const rh_server *srv, const char *fmt, ...);
redisReply *rh_command_argv(const rh_server *srv, int argc, const char **argv, const size_t *argvlen);
/* The integer reply of a command; LLONG_MIN on failure or a non-integer reply. */
long long rh_int(const rh_server *srv, const char *fmt, ...);
/* 1 when a command got the status reply "OK" (or "PONG"), else 0. */
int rh_ok(const rh_server *srv, const char *fmt, ...);
/* A field of INFO <section>: "name:123" gives 123; for commandstats lines
 * ("cmdstat_evalsha:calls=3,...") the calls count. 0 when the field is
 * absent, -1 when the server did not answer. */
long long rh_info(const rh_server *srv, const char *section, const char *field);

/* The directory of the test certificates (tests/harness/tls.py: ca.crt,
 * server.crt/.key, client.crt/.key, other-name.*, wrong-ca.crt, unknown.*),
 * made on the first call by running python3. Call it in main() before the
 * tests fork, so that all of them share one set; the process that made it
 * removes it at exit. NULL (and a message) on failure. */
const char *rh_tls_dir(void);
/* A file in it ("ca.crt"), in a static buffer of its own per call slot (4 rotating). */
const char *rh_tls_file(const char *name);

/* An rh_server for a redis-server someone else started on 127.0.0.1:port,
 * for rh_command() and friends; rh_free() does not stop it. */
rh_server *rh_attach(int port);

typedef struct rh_sentinel_group rh_sentinel_group;
/* Starts a group (tls: rediss-sentinel://, every process TLS-only) and
 * waits until it is healthy. NULL on failure. */
rh_sentinel_group *rh_sentinel_start(int tls);
void rh_sentinel_free(rh_sentinel_group *g);
/* "redis-sentinel://127.0.0.1:S1,127.0.0.1:S2,127.0.0.1:S3/watchlock-master" (with ?cacert= for TLS). */
const char *rh_sentinel_url(const rh_sentinel_group *g);
/* The master and the replica as they were at start (plain groups only: for rh_command()). */
rh_server *rh_sentinel_master(rh_sentinel_group *g);
rh_server *rh_sentinel_replica(rh_sentinel_group *g);

#endif
