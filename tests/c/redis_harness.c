/* redis_harness.c - see redis_harness.h. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "redis_harness.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_ARGS 64

struct rh_server {
    pid_t pid; /* 0 when not running */
    int port;  /* the plain port (the harness's own, for a TLS server) */
    int tls_port;
    int tls_auth_clients;
    int attached; /* rh_attach(): not ours to stop */
    char tls_cert[32];
    char dir[256];
    char url[1024];
    char sock[300];
    char logfile[300];
    char *password;
    char *argv[MAX_ARGS]; /* owned copies of the extra arguments */
    int argc;
};

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static long long mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    sa.sin_port = 0;
    socklen_t len = sizeof sa;
    int port = -1;
    if (bind(fd, (struct sockaddr *)&sa, sizeof sa) == 0 &&
        getsockname(fd, (struct sockaddr *)&sa, &len) == 0)
        port = ntohs(sa.sin_port);
    close(fd);
    return port;
}

redisContext *rh_connect(const rh_server *srv)
{
    struct timeval tv = {1, 0};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", srv->port, tv);
    if (c == NULL)
        return NULL;
    if (c->err) {
        redisFree(c);
        return NULL;
    }
    struct timeval cmd_tv = {10, 0};
    redisSetTimeout(c, cmd_tv);
    if (srv->password != NULL) {
        redisReply *r = redisCommand(c, "AUTH %s", srv->password);
        int ok = r != NULL && r->type == REDIS_REPLY_STATUS;
        if (r != NULL)
            freeReplyObject(r);
        if (!ok) {
            redisFree(c);
            return NULL;
        }
    }
    return c;
}

static int ping(const rh_server *srv)
{
    redisContext *c = rh_connect(srv);
    if (c == NULL)
        return 0;
    redisReply *r = redisCommand(c, "PING");
    int ok = r != NULL && r->type == REDIS_REPLY_STATUS && strcmp(r->str, "PONG") == 0;
    if (r != NULL)
        freeReplyObject(r);
    redisFree(c);
    return ok;
}

/* Reaps the server if it exited; returns 1 when it is gone. */
static int reap(rh_server *srv, int block)
{
    if (srv->pid <= 0)
        return 1;
    int st;
    pid_t r = waitpid(srv->pid, &st, block ? 0 : WNOHANG);
    if (r == srv->pid || (r < 0 && errno == ECHILD)) {
        srv->pid = 0;
        return 1;
    }
    return 0;
}

static int spawn(rh_server *srv)
{
    char port[16];
    snprintf(port, sizeof port, "%d", srv->port);
    const char *args[MAX_ARGS + 40];
    int n = 0;
    args[n++] = "redis-server";
    args[n++] = "--port";
    args[n++] = port;
    args[n++] = "--bind";
    args[n++] = "127.0.0.1";
    args[n++] = "--save";
    args[n++] = "";
    args[n++] = "--appendonly";
    args[n++] = "no";
    args[n++] = "--dir";
    args[n++] = srv->dir;
    args[n++] = "--daemonize";
    args[n++] = "no";
    args[n++] = "--loglevel";
    args[n++] = "warning";
    args[n++] = "--logfile";
    args[n++] = srv->logfile;
    if (srv->sock[0]) {
        args[n++] = "--unixsocket";
        args[n++] = srv->sock;
        args[n++] = "--unixsocketperm";
        args[n++] = "700";
    }
    if (srv->password != NULL) {
        args[n++] = "--requirepass";
        args[n++] = srv->password;
    }
    char tls_port[16], cert[600], key[600], ca[600];
    if (srv->tls_port > 0) {
        snprintf(tls_port, sizeof tls_port, "%d", srv->tls_port);
        snprintf(cert, sizeof cert, "%s/%s.crt", rh_tls_dir(), srv->tls_cert);
        snprintf(key, sizeof key, "%s/%s.key", rh_tls_dir(), srv->tls_cert);
        snprintf(ca, sizeof ca, "%s/ca.crt", rh_tls_dir());
        args[n++] = "--tls-port";
        args[n++] = tls_port;
        args[n++] = "--tls-cert-file";
        args[n++] = cert;
        args[n++] = "--tls-key-file";
        args[n++] = key;
        args[n++] = "--tls-ca-cert-file";
        args[n++] = ca;
        args[n++] = "--tls-auth-clients";
        args[n++] = srv->tls_auth_clients ? "yes" : "no";
    }
    for (int i = 0; i < srv->argc; i++)
        args[n++] = srv->argv[i];
    args[n] = NULL;

    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        fprintf(stderr, "redis_harness: fork: %s\n", strerror(errno));
        return -1;
    }
    if (pid == 0) {
        /* Die with the process that started us, even if it is SIGKILLed. */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(127);
        int devnull = open("/dev/null", O_RDWR);
        if (devnull >= 0) {
            dup2(devnull, 0);
            dup2(devnull, 1);
            dup2(devnull, 2);
        }
        /* Do not inherit a blocked/ignored signal state from the test. */
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        execvp("redis-server", (char *const *)args);
        _exit(127);
    }
    srv->pid = pid;
    long long end = mono_ms() + 15000;
    while (mono_ms() < end) {
        if (reap(srv, 0))
            return -1; /* exited: port taken, bad argument, ... */
        if (ping(srv))
            return 0;
        sleep_ms(10);
    }
    fprintf(stderr, "redis_harness: redis-server on port %d did not answer PING\n", srv->port);
    rh_kill(srv);
    return -1;
}

static void print_log(const rh_server *srv)
{
    FILE *f = fopen(srv->logfile, "r");
    if (f == NULL)
        return;
    char line[512];
    while (fgets(line, sizeof line, f) != NULL)
        fprintf(stderr, "redis_harness: log: %s", line);
    fclose(f);
}

rh_server *rh_start(const rh_options *opts)
{
    rh_server *srv = calloc(1, sizeof *srv);
    if (srv == NULL)
        return NULL;
    const char *tmp = getenv("TMPDIR");
    snprintf(srv->dir, sizeof srv->dir, "%s/watchlock-ctest-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (mkdtemp(srv->dir) == NULL) {
        fprintf(stderr, "redis_harness: mkdtemp: %s\n", strerror(errno));
        free(srv);
        return NULL;
    }
    snprintf(srv->logfile, sizeof srv->logfile, "%s/redis.log", srv->dir);
    if (opts != NULL) {
        if (opts->unixsocket)
            snprintf(srv->sock, sizeof srv->sock, "%s/redis.sock", srv->dir);
        if (opts->password != NULL)
            srv->password = strdup(opts->password);
        for (int i = 0; opts->extra != NULL && opts->extra[i] != NULL && i < MAX_ARGS; i++)
            srv->argv[srv->argc++] = strdup(opts->extra[i]);
        if (opts->tls && rh_tls_dir() == NULL) {
            rh_free(srv);
            return NULL;
        }
        snprintf(srv->tls_cert, sizeof srv->tls_cert, "%s", opts->tls_cert ? opts->tls_cert : "server");
        srv->tls_auth_clients = opts->tls_auth_clients;
    }
    int tls = opts != NULL && opts->tls;
    for (int attempt = 0; attempt < 20; attempt++) {
        srv->port = free_port();
        srv->tls_port = tls ? free_port() : 0;
        if (srv->port > 0 && srv->tls_port >= 0 && srv->tls_port != srv->port && spawn(srv) == 0) {
            if (!tls)
                snprintf(srv->url, sizeof srv->url, "redis://127.0.0.1:%d", srv->port);
            else if (srv->tls_auth_clients)
                snprintf(srv->url, sizeof srv->url,
                         "rediss://127.0.0.1:%d?cacert=%s/ca.crt&cert=%s/client.crt&key=%s/client.key",
                         srv->tls_port, rh_tls_dir(), rh_tls_dir(), rh_tls_dir());
            else
                snprintf(srv->url, sizeof srv->url, "rediss://127.0.0.1:%d?cacert=%s/ca.crt", srv->tls_port,
                         rh_tls_dir());
            return srv;
        }
    }
    fprintf(stderr, "redis_harness: could not start redis-server\n");
    print_log(srv);
    rh_free(srv);
    return NULL;
}

int rh_stop(rh_server *srv)
{
    if (srv->pid <= 0)
        return 0;
    kill(srv->pid, SIGCONT); /* in case it was paused */
    kill(srv->pid, SIGTERM);
    long long end = mono_ms() + 10000;
    while (mono_ms() < end) {
        if (reap(srv, 0))
            return 0;
        sleep_ms(5);
    }
    rh_kill(srv);
    return -1;
}

void rh_kill(rh_server *srv)
{
    if (srv->pid <= 0)
        return;
    kill(srv->pid, SIGKILL);
    reap(srv, 1);
    srv->pid = 0;
}

int rh_restart(rh_server *srv)
{
    rh_stop(srv);
    /* The port is ours as long as nobody grabbed it meanwhile; retry a few
     * times in case the old socket lingers. */
    for (int attempt = 0; attempt < 50; attempt++) {
        if (spawn(srv) == 0)
            return 0;
        sleep_ms(100);
    }
    fprintf(stderr, "redis_harness: restart on port %d failed\n", srv->port);
    print_log(srv);
    return -1;
}

int rh_pause(rh_server *srv)
{
    return srv->pid > 0 ? kill(srv->pid, SIGSTOP) : -1;
}

int rh_resume(rh_server *srv)
{
    return srv->pid > 0 ? kill(srv->pid, SIGCONT) : -1;
}

void rh_free(rh_server *srv)
{
    if (srv == NULL)
        return;
    if (srv->attached) {
        free(srv);
        return;
    }
    rh_stop(srv);
    unlink(srv->logfile);
    if (srv->sock[0])
        unlink(srv->sock);
    char dump[300];
    snprintf(dump, sizeof dump, "%s/dump.rdb", srv->dir);
    unlink(dump);
    rmdir(srv->dir);
    free(srv->password);
    for (int i = 0; i < srv->argc; i++)
        free(srv->argv[i]);
    free(srv);
}

int rh_port(const rh_server *srv)
{
    return srv->port;
}

pid_t rh_pid(const rh_server *srv)
{
    return srv->pid;
}

const char *rh_url(const rh_server *srv)
{
    return srv->url;
}

int rh_tls_port(const rh_server *srv)
{
    return srv->tls_port;
}

const char *rh_unixsocket(const rh_server *srv)
{
    return srv->sock;
}

int rh_running(const rh_server *srv)
{
    return srv->pid > 0 && ping(srv);
}

static redisReply *vcommand(const rh_server *srv, const char *fmt, va_list ap)
{
    redisContext *c = rh_connect(srv);
    if (c == NULL)
        return NULL;
    redisReply *r = redisvCommand(c, fmt, ap);
    redisFree(c);
    return r;
}

redisReply *rh_command(const rh_server *srv, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = vcommand(srv, fmt, ap);
    va_end(ap);
    return r;
}

redisReply *rh_command_argv(const rh_server *srv, int argc, const char **argv, const size_t *argvlen)
{
    redisContext *c = rh_connect(srv);
    if (c == NULL)
        return NULL;
    redisReply *r = redisCommandArgv(c, argc, argv, argvlen);
    redisFree(c);
    return r;
}

long long rh_int(const rh_server *srv, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = vcommand(srv, fmt, ap);
    va_end(ap);
    long long v = LLONG_MIN;
    if (r != NULL && r->type == REDIS_REPLY_INTEGER)
        v = r->integer;
    if (r != NULL)
        freeReplyObject(r);
    return v;
}

int rh_ok(const rh_server *srv, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = vcommand(srv, fmt, ap);
    va_end(ap);
    int ok = r != NULL && r->type == REDIS_REPLY_STATUS &&
             (strcmp(r->str, "OK") == 0 || strcmp(r->str, "PONG") == 0);
    if (r != NULL)
        freeReplyObject(r);
    return ok;
}

long long rh_info(const rh_server *srv, const char *section, const char *field)
{
    redisReply *r = rh_command(srv, "INFO %s", section);
    if (r == NULL || r->type != REDIS_REPLY_STRING) {
        if (r != NULL)
            freeReplyObject(r);
        return -1;
    }
    long long v = 0;
    size_t flen = strlen(field);
    for (const char *line = r->str; line != NULL && *line; line = strchr(line, '\n')) {
        if (*line == '\n')
            line++;
        if (strncmp(line, field, flen) == 0 && line[flen] == ':') {
            const char *val = line + flen + 1;
            if (strncmp(val, "calls=", 6) == 0)
                val += 6;
            v = strtoll(val, NULL, 10);
            break;
        }
    }
    freeReplyObject(r);
    return v;
}

/* ---- TLS certificates ---------------------------------------------------- */

static char tls_dir[256];
static pid_t tls_dir_owner;

/* Runs argv (no shell) with stdout/stderr to ours; its exit status, or -1. */
static int run(const char *const *argv)
{
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        int devnull = open("/dev/null", O_RDONLY);
        if (devnull >= 0)
            dup2(devnull, 0);
        execvp(argv[0], (char *const *)argv);
        _exit(127);
    }
    int st;
    while (waitpid(pid, &st, 0) < 0) {
        if (errno != EINTR)
            return -1;
    }
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void remove_tls_dir(void)
{
    if (tls_dir[0] == '\0' || getpid() != tls_dir_owner)
        return; /* a forked test child: the directory is its parent's */
    const char *argv[] = {"rm", "-rf", tls_dir, NULL};
    run(argv);
}

const char *rh_tls_dir(void)
{
    if (tls_dir[0] != '\0')
        return tls_dir;
    char dir[256];
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/watchlock-certs-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (mkdtemp(dir) == NULL) {
        fprintf(stderr, "redis_harness: mkdtemp: %s\n", strerror(errno));
        return NULL;
    }
    const char *argv[] = {"python3", WATCHLOCK_SOURCE_DIR "/tests/harness/tls.py", dir, NULL};
    if (run(argv) != 0) {
        fprintf(stderr, "redis_harness: tests/harness/tls.py could not make the test certificates\n");
        const char *rm[] = {"rm", "-rf", dir, NULL};
        run(rm);
        return NULL;
    }
    snprintf(tls_dir, sizeof tls_dir, "%s", dir);
    tls_dir_owner = getpid();
    atexit(remove_tls_dir);
    return tls_dir;
}

const char *rh_tls_file(const char *name)
{
    static char bufs[4][600];
    static int next;
    char *b = bufs[next++ % 4];
    const char *d = rh_tls_dir();
    snprintf(b, sizeof bufs[0], "%s/%s", d ? d : "(no certificates)", name);
    return b;
}

rh_server *rh_attach(int port)
{
    rh_server *srv = calloc(1, sizeof *srv);
    if (srv == NULL)
        return NULL;
    srv->attached = 1;
    srv->port = port;
    snprintf(srv->url, sizeof srv->url, "redis://127.0.0.1:%d", port);
    return srv;
}

/* ---- sentinel groups (tests/harness/sentinel.py --serve) ----------------- */

struct rh_sentinel_group {
    pid_t pid;
    int to_child;      /* its stdin: closing it tears the group down */
    char url[2048];
    rh_server *master; /* attached */
    rh_server *replica;
};

/* The value of "key=" in a line of space-separated key=value words, copied to out. */
static int word_value(const char *line, const char *key, char *out, size_t outlen)
{
    size_t klen = strlen(key);
    for (const char *p = line; p != NULL && *p; p = strchr(p, ' ')) {
        while (*p == ' ')
            p++;
        if (strncmp(p, key, klen) == 0 && p[klen] == '=') {
            const char *v = p + klen + 1;
            size_t n = strcspn(v, " \n");
            if (n >= outlen)
                return -1;
            memcpy(out, v, n);
            out[n] = '\0';
            return 0;
        }
    }
    return -1;
}

rh_sentinel_group *rh_sentinel_start(int tls)
{
    int in[2], out[2];
    if (pipe(in) != 0)
        return NULL;
    if (pipe(out) != 0) {
        close(in[0]);
        close(in[1]);
        return NULL;
    }
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        close(in[0]), close(in[1]), close(out[0]), close(out[1]);
        return NULL;
    }
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGTERM); /* the script tears the group down on SIGTERM */
        if (getppid() != parent)
            _exit(127);
        dup2(in[0], 0);
        dup2(out[1], 1);
        close(in[0]), close(in[1]), close(out[0]), close(out[1]);
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        const char *argv[] = {"python3", WATCHLOCK_SOURCE_DIR "/tests/harness/sentinel.py", "--serve",
                              tls ? "--tls" : NULL, NULL};
        execvp(argv[0], (char *const *)argv);
        _exit(127);
    }
    close(in[0]);
    close(out[1]);
    rh_sentinel_group *g = calloc(1, sizeof *g);
    if (g == NULL) {
        close(in[1]);
        close(out[0]);
        kill(pid, SIGTERM);
        waitpid(pid, NULL, 0);
        return NULL;
    }
    g->pid = pid;
    g->to_child = in[1];
    /* one line, written once the group is healthy (the script's own deadline is 30 s) */
    FILE *f = fdopen(out[0], "r");
    char line[4096] = "";
    if (f == NULL || fgets(line, sizeof line, f) == NULL) {
        fprintf(stderr, "redis_harness: tests/harness/sentinel.py --serve did not start a group\n");
        if (f != NULL)
            fclose(f);
        else
            close(out[0]);
        rh_sentinel_free(g);
        return NULL;
    }
    fclose(f);
    char port[16];
    if (word_value(line, "url", g->url, sizeof g->url) != 0) {
        fprintf(stderr, "redis_harness: sentinel.py said '%s'\n", line);
        rh_sentinel_free(g);
        return NULL;
    }
    if (word_value(line, "master", port, sizeof port) == 0)
        g->master = rh_attach(atoi(port));
    if (word_value(line, "replica", port, sizeof port) == 0)
        g->replica = rh_attach(atoi(port));
    return g;
}

void rh_sentinel_free(rh_sentinel_group *g)
{
    if (g == NULL)
        return;
    if (g->to_child >= 0)
        close(g->to_child); /* EOF on its stdin: it stops every process of the group */
    if (g->pid > 0) {
        long long end = mono_ms() + 30000;
        int st;
        while (waitpid(g->pid, &st, WNOHANG) == 0) {
            if (mono_ms() > end) {
                kill(g->pid, SIGTERM);
                waitpid(g->pid, &st, 0);
                break;
            }
            sleep_ms(10);
        }
    }
    rh_free(g->master);
    rh_free(g->replica);
    free(g);
}

const char *rh_sentinel_url(const rh_sentinel_group *g)
{
    return g->url;
}

rh_server *rh_sentinel_master(rh_sentinel_group *g)
{
    return g->master;
}

rh_server *rh_sentinel_replica(rh_sentinel_group *g)
{
    return g->replica;
}
