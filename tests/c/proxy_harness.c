/* proxy_harness.c - see proxy_harness.h. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "proxy_harness.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef WATCHLOCK_SOURCE_DIR
#error "WATCHLOCK_SOURCE_DIR (the source tree, for tests/harness/proxy.py) must be defined"
#endif

#define PROXY_SCRIPT WATCHLOCK_SOURCE_DIR "/tests/harness/proxy.py"
#define START_TIMEOUT_MS 15000
#define REPLY_TIMEOUT_MS 10000
#define LINE_MAX_LEN 1024

struct ph_proxy {
    pid_t pid;        /* 0 once reaped */
    int stdin_fd;     /* write end of the proxy's stdin: closing it ends the proxy */
    int port;
    int control_port;
    int control_fd;   /* -1 until the first command */
    pthread_mutex_t mu; /* serializes control commands */
    char url[64];
};

static long long ph_mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void ph_sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* Waits until fd is ready for events or the deadline passes; 1 ready, 0 timeout, -1 error. */
static int wait_fd(int fd, short events, long long deadline)
{
    for (;;) {
        long long left = deadline - ph_mono_ms();
        if (left <= 0)
            return 0;
        struct pollfd p = {fd, events, 0};
        int r = poll(&p, 1, (int)left);
        if (r > 0)
            return 1;
        if (r == 0)
            return 0;
        if (errno != EINTR)
            return -1;
    }
}

/* python3 found on PATH (resolved before fork: the child only calls
 * async-signal-safe functions before exec). */
static int find_python(char *out, size_t size)
{
    const char *path = getenv("PATH");
    if (path == NULL || *path == '\0')
        path = "/usr/local/bin:/usr/bin:/bin";
    while (*path) {
        const char *end = strchr(path, ':');
        size_t len = end ? (size_t)(end - path) : strlen(path);
        if (len > 0 && (size_t)snprintf(out, size, "%.*s/python3", (int)len, path) < size &&
            access(out, X_OK) == 0)
            return 0;
        path += len + (end ? 1 : 0);
    }
    return -1;
}

/* Reads the READY line from fd; 0 on success. */
static int read_ready(ph_proxy *px, int fd)
{
    char line[256];
    size_t n = 0;
    long long deadline = ph_mono_ms() + START_TIMEOUT_MS;
    while (n < sizeof line - 1 && memchr(line, '\n', n) == NULL) {
        int w = wait_fd(fd, POLLIN, deadline);
        if (w <= 0) {
            fprintf(stderr, "proxy_harness: no READY line from %s within %d ms\n", PROXY_SCRIPT,
                    START_TIMEOUT_MS);
            return -1;
        }
        ssize_t r = read(fd, line + n, sizeof line - 1 - n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            fprintf(stderr, "proxy_harness: %s exited before READY\n", PROXY_SCRIPT);
            return -1;
        }
        n += (size_t)r;
    }
    line[n] = '\0';
    if (sscanf(line, "READY %d %d", &px->port, &px->control_port) != 2 || px->port <= 0 ||
        px->control_port <= 0) {
        fprintf(stderr, "proxy_harness: unexpected output from the proxy: %s\n", line);
        return -1;
    }
    return 0;
}

static void reap(ph_proxy *px, long timeout_ms)
{
    if (px->pid <= 0)
        return;
    long long end = ph_mono_ms() + timeout_ms;
    for (;;) {
        int st;
        pid_t r = waitpid(px->pid, &st, WNOHANG);
        if (r == px->pid || (r < 0 && errno != EINTR))
            break;
        if (ph_mono_ms() >= end) {
            kill(px->pid, SIGKILL);
            while (waitpid(px->pid, &st, 0) < 0 && errno == EINTR) {
            }
            break;
        }
        ph_sleep_ms(2);
    }
    px->pid = 0;
}

ph_proxy *ph_start(int upstream_port)
{
    char python[4096];
    if (find_python(python, sizeof python) != 0) {
        fprintf(stderr, "proxy_harness: python3 not found on PATH\n");
        return NULL;
    }
    if (access(PROXY_SCRIPT, R_OK) != 0) {
        fprintf(stderr, "proxy_harness: %s: %s\n", PROXY_SCRIPT, strerror(errno));
        return NULL;
    }
    ph_proxy *px = calloc(1, sizeof *px);
    if (px == NULL)
        return NULL;
    px->stdin_fd = -1;
    px->control_fd = -1;
    pthread_mutex_init(&px->mu, NULL);

    char upstream[64];
    snprintf(upstream, sizeof upstream, "127.0.0.1:%d", upstream_port);
    const char *argv[] = {python, PROXY_SCRIPT, "--upstream", upstream, NULL};
    int in[2], out[2];
    if (pipe2(in, O_CLOEXEC) != 0) {
        fprintf(stderr, "proxy_harness: pipe: %s\n", strerror(errno));
        free(px);
        return NULL;
    }
    if (pipe2(out, O_CLOEXEC) != 0) {
        fprintf(stderr, "proxy_harness: pipe: %s\n", strerror(errno));
        close(in[0]);
        close(in[1]);
        free(px);
        return NULL;
    }
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        fprintf(stderr, "proxy_harness: fork: %s\n", strerror(errno));
        close(in[0]);
        close(in[1]);
        close(out[0]);
        close(out[1]);
        free(px);
        return NULL;
    }
    if (pid == 0) {
        /* Die with the thread that started us, even if it is SIGKILLed. */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(127);
        /* dup2 clears O_CLOEXEC on 0 and 1; stderr stays the test's. */
        if (dup2(in[0], 0) < 0 || dup2(out[1], 1) < 0)
            _exit(127);
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        execv(python, (char *const *)argv);
        _exit(127);
    }
    close(in[0]);
    close(out[1]);
    px->pid = pid;
    px->stdin_fd = in[1];
    int rc = read_ready(px, out[0]);
    close(out[0]); /* the proxy prints nothing after READY */
    if (rc != 0) {
        ph_free(px);
        return NULL;
    }
    snprintf(px->url, sizeof px->url, "redis://127.0.0.1:%d", px->port);
    return px;
}

void ph_free(ph_proxy *px)
{
    if (px == NULL)
        return;
    if (px->control_fd >= 0)
        close(px->control_fd);
    if (px->stdin_fd >= 0)
        close(px->stdin_fd); /* EOF: the proxy closes its sockets and exits */
    if (px->pid > 0) {
        kill(px->pid, SIGTERM); /* in case a forked child still holds the pipe */
        reap(px, 10000);
    }
    pthread_mutex_destroy(&px->mu);
    free(px);
}

int ph_port(const ph_proxy *px)
{
    return px->port;
}

int ph_control_port(const ph_proxy *px)
{
    return px->control_port;
}

pid_t ph_pid(const ph_proxy *px)
{
    return px->pid;
}

const char *ph_url(const ph_proxy *px)
{
    return px->url;
}

static int control_connect(ph_proxy *px)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    sa.sin_port = htons((unsigned short)px->control_port);
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        close(fd);
        return -1;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
}

/* Sends line (which ends in '\n') and reads the reply line into reply[size]
 * (without the newline). Called with px->mu held. 0 on success. */
static int exchange(ph_proxy *px, const char *line, char *reply, size_t size)
{
    if (px->control_fd < 0 && (px->control_fd = control_connect(px)) < 0) {
        snprintf(reply, size, "cannot connect to the control port %d: %s", px->control_port, strerror(errno));
        return -1;
    }
    size_t len = strlen(line), sent = 0;
    while (sent < len) {
        ssize_t w = send(px->control_fd, line + sent, len - sent, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            snprintf(reply, size, "send: %s", strerror(errno));
            goto broken;
        }
        sent += (size_t)w;
    }
    /* Replies come one per command on this connection, so reading byte-wise
     * up to the newline never consumes part of a later reply. */
    size_t n = 0;
    long long deadline = ph_mono_ms() + REPLY_TIMEOUT_MS;
    for (;;) {
        int ready = wait_fd(px->control_fd, POLLIN, deadline);
        if (ready <= 0) {
            snprintf(reply, size, "no reply within %d ms", REPLY_TIMEOUT_MS);
            goto broken;
        }
        char c;
        ssize_t r = recv(px->control_fd, &c, 1, 0);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            snprintf(reply, size, "control connection closed");
            goto broken;
        }
        if (c == '\n')
            break;
        if (n + 1 < size)
            reply[n++] = c;
    }
    reply[n] = '\0';
    return 0;
broken:
    close(px->control_fd);
    px->control_fd = -1;
    return -1;
}

static int vcmd(ph_proxy *px, char *reply, size_t size, int quiet, const char *fmt, va_list ap)
{
    char line[LINE_MAX_LEN];
    int len = vsnprintf(line, sizeof line - 1, fmt, ap);
    if (len < 0 || (size_t)len >= sizeof line - 1) {
        snprintf(reply, size, "command too long");
        fprintf(stderr, "proxy_harness: command too long: %.80s...\n", line);
        return -1;
    }
    line[len] = '\n';
    line[len + 1] = '\0';
    pthread_mutex_lock(&px->mu);
    int rc = exchange(px, line, reply, size);
    pthread_mutex_unlock(&px->mu);
    line[len] = '\0';
    if (rc != 0) {
        fprintf(stderr, "proxy_harness: '%s': %s\n", line, reply);
        return -1;
    }
    if (strcmp(reply, "OK") == 0 || strncmp(reply, "OK ", 3) == 0)
        return 0;
    if (!quiet)
        fprintf(stderr, "proxy_harness: '%s': %s\n", line, reply);
    return -1;
}

int ph_cmd(ph_proxy *px, const char *fmt, ...)
{
    char reply[LINE_MAX_LEN];
    va_list ap;
    va_start(ap, fmt);
    int rc = vcmd(px, reply, sizeof reply, 0, fmt, ap);
    va_end(ap);
    return rc;
}

int ph_cmd_reply(ph_proxy *px, char *reply, size_t size, const char *fmt, ...)
{
    char buf[LINE_MAX_LEN];
    va_list ap;
    va_start(ap, fmt);
    int rc = vcmd(px, buf, sizeof buf, 1, fmt, ap);
    va_end(ap);
    if (reply != NULL && size > 0)
        snprintf(reply, size, "%s", buf);
    return rc;
}

long long ph_stat(ph_proxy *px, const char *field)
{
    char reply[LINE_MAX_LEN];
    if (ph_cmd_reply(px, reply, sizeof reply, "stats") != 0)
        return -1;
    size_t flen = strlen(field);
    for (const char *p = reply; (p = strstr(p, field)) != NULL; p += flen) {
        if ((p == reply || p[-1] == ' ') && p[flen] == '=')
            return strtoll(p + flen + 1, NULL, 10);
    }
    return -1;
}
