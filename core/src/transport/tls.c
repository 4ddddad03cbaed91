/*
 * tls.c - TLS for transport.c with OpenSSL: one SSL_CTX per client (CA,
 * client certificate), a handshake with a deadline on a non-blocking socket,
 * certificate and hostname/IP verification, and errors that say what went
 * wrong (not trusted, hostname mismatch, handshake timed out, not a TLS
 * server).
 *
 * Records go through a small BIO of our own that writes with MSG_NOSIGNAL, so
 * a server that went away never raises SIGPIPE in the application.
 */
#include "transport/transport.h"

#include <arpa/inet.h>
#include <errno.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

struct wl_tls {
    SSL_CTX *ctx;
    bool insecure;
};

/* The newest OpenSSL error as text ("" when none); clears the queue. */
static const char *ssl_error_text(char *buf, size_t len)
{
    unsigned long e = ERR_peek_last_error();
    buf[0] = '\0';
    if (e != 0)
        ERR_error_string_n(e, buf, len);
    ERR_clear_error();
    return buf;
}

static int file_error(const char *what, const char *path)
{
    char err[200];
    if (access(path, R_OK) != 0)
        return wl_fail(WATCHLOCK_EINVAL, "TLS %s '%s' cannot be read: %s", what, path, strerror(errno));
    return wl_fail(WATCHLOCK_EINVAL, "TLS %s '%s' is not usable: %s", what, path, ssl_error_text(err, sizeof err));
}

int wl_tls_new(const wl_tls_opts *o, wl_tls **out)
{
    *out = NULL;
    if (!o->on)
        return WATCHLOCK_OK;
    if ((o->cert == NULL) != (o->key == NULL))
        return wl_fail(WATCHLOCK_EINVAL, "malformed URL: cert and key go together (mutual TLS needs both)");
    wl_tls *t = calloc(1, sizeof *t);
    if (t == NULL)
        return wl_fail(WATCHLOCK_ENOMEM, "out of memory");
    t->insecure = o->insecure;
    ERR_clear_error();
    t->ctx = SSL_CTX_new(TLS_client_method());
    if (t->ctx == NULL) {
        free(t);
        return wl_fail(WATCHLOCK_ENOMEM, "cannot create a TLS context");
    }
    SSL_CTX_set_min_proto_version(t->ctx, TLS1_2_VERSION);
    SSL_CTX_set_mode(t->ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
#ifdef SSL_OP_IGNORE_UNEXPECTED_EOF
    SSL_CTX_set_options(t->ctx, SSL_OP_IGNORE_UNEXPECTED_EOF);
#endif
    int rc = WATCHLOCK_OK;
    errno = 0;
    struct stat st;
    if (o->cacertdir && (stat(o->cacertdir, &st) != 0 || !S_ISDIR(st.st_mode))) {
        rc = wl_fail(WATCHLOCK_EINVAL, "TLS cacertdir '%s' is not a directory%s%s", o->cacertdir,
                     errno ? ": " : "", errno ? strerror(errno) : "");
    } else if (o->cacert || o->cacertdir) {
        if (SSL_CTX_load_verify_locations(t->ctx, o->cacert, o->cacertdir) != 1)
            rc = file_error(o->cacert ? "cacert" : "cacertdir", o->cacert ? o->cacert : o->cacertdir);
    } else if (SSL_CTX_set_default_verify_paths(t->ctx) != 1) {
        char err[200];
        rc = wl_fail(WATCHLOCK_EINVAL, "cannot load the system's CA certificates: %s", ssl_error_text(err, sizeof err));
    }
    if (rc == WATCHLOCK_OK && o->cert && SSL_CTX_use_certificate_chain_file(t->ctx, o->cert) != 1)
        rc = file_error("cert", o->cert);
    if (rc == WATCHLOCK_OK && o->key && SSL_CTX_use_PrivateKey_file(t->ctx, o->key, SSL_FILETYPE_PEM) != 1)
        rc = file_error("key", o->key);
    if (rc == WATCHLOCK_OK && o->key && SSL_CTX_check_private_key(t->ctx) != 1)
        rc = wl_fail(WATCHLOCK_EINVAL, "TLS key '%s' does not belong to cert '%s'", o->key, o->cert);
    if (rc != WATCHLOCK_OK) {
        wl_tls_free(t);
        return rc;
    }
    *out = t;
    return WATCHLOCK_OK;
}

void wl_tls_free(wl_tls *t)
{
    if (t == NULL)
        return;
    SSL_CTX_free(t->ctx);
    free(t);
}

/* ---- a socket BIO that never raises SIGPIPE ---- */

static int bio_write(BIO *b, const char *buf, int len)
{
    int fd = (int)(intptr_t)BIO_get_data(b);
    BIO_clear_retry_flags(b);
    ssize_t n = send(fd, buf, (size_t)len, MSG_NOSIGNAL);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        BIO_set_retry_write(b);
    return (int)n;
}

static int bio_read(BIO *b, char *buf, int len)
{
    int fd = (int)(intptr_t)BIO_get_data(b);
    BIO_clear_retry_flags(b);
    ssize_t n = recv(fd, buf, (size_t)len, 0);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        BIO_set_retry_read(b);
    return (int)n;
}

static long bio_ctrl(BIO *b, int cmd, long num, void *ptr)
{
    WL_UNUSED(b);
    WL_UNUSED(num);
    WL_UNUSED(ptr);
    return cmd == BIO_CTRL_FLUSH ? 1 : 0;
}

static int bio_create(BIO *b)
{
    BIO_set_init(b, 1);
    return 1;
}

static BIO_METHOD *bio_method;
static pthread_once_t bio_once = PTHREAD_ONCE_INIT;

static void bio_method_init(void)
{
    BIO_METHOD *m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "watchlock socket");
    if (m == NULL)
        return;
    BIO_meth_set_write(m, bio_write);
    BIO_meth_set_read(m, bio_read);
    BIO_meth_set_ctrl(m, bio_ctrl);
    BIO_meth_set_create(m, bio_create);
    bio_method = m;
}

static bool is_ip_literal(const char *s)
{
    unsigned char buf[16];
    return inet_pton(AF_INET, s, buf) == 1 || inet_pton(AF_INET6, s, buf) == 1;
}

/* Why the handshake failed, as a sentence. */
static int handshake_error(SSL *ssl, int ret, const char *name, const char *label)
{
    long vr = SSL_get_verify_result(ssl);
    unsigned long e = ERR_peek_last_error();
    char err[200];
    if (vr == X509_V_ERR_HOSTNAME_MISMATCH || vr == X509_V_ERR_IP_ADDRESS_MISMATCH) {
        ERR_clear_error();
        return wl_fail(WATCHLOCK_ECONN,
                       "TLS to %s failed: hostname mismatch: the server's certificate is not for '%s' "
                       "(give sni=NAME to check another name)",
                       label, name);
    }
    if (vr != X509_V_OK) {
        ERR_clear_error();
        return wl_fail(WATCHLOCK_ECONN, "TLS to %s failed: server certificate not trusted: %s (check cacert)", label,
                       X509_verify_cert_error_string(vr));
    }
    if (e != 0 && ERR_GET_LIB(e) == ERR_LIB_SSL &&
        (ERR_GET_REASON(e) == SSL_R_WRONG_VERSION_NUMBER || ERR_GET_REASON(e) == SSL_R_PACKET_LENGTH_TOO_LONG ||
         ERR_GET_REASON(e) == SSL_R_RECORD_LENGTH_MISMATCH)) {
        ERR_clear_error();
        return wl_fail(WATCHLOCK_ECONN, "TLS to %s failed: not a TLS server (a plain Redis port on a rediss:// URL?)",
                       label);
    }
    if (e == 0 && (ret == 0 || errno == 0 || errno == ECONNRESET || errno == EPIPE))
        return wl_fail(WATCHLOCK_ECONN,
                       "TLS to %s failed: the server closed the connection during the handshake "
                       "(not a TLS server, or it refused our certificate)",
                       label);
    if (e == 0)
        return wl_fail(WATCHLOCK_ECONN, "TLS to %s failed: %s", label, strerror(errno));
    return wl_fail(WATCHLOCK_ECONN, "TLS to %s failed: %s", label, ssl_error_text(err, sizeof err));
}

int wl_tls_connect(const wl_tls *t, int fd, const char *host, const char *sni, int64_t deadline_us,
                   const char *label, void **out)
{
    *out = NULL;
    pthread_once(&bio_once, bio_method_init);
    ERR_clear_error();
    SSL *ssl = bio_method ? SSL_new(t->ctx) : NULL;
    BIO *bio = ssl ? BIO_new(bio_method) : NULL;
    if (bio == NULL) {
        SSL_free(ssl);
        return wl_fail(WATCHLOCK_ENOMEM, "TLS: out of memory");
    }
    BIO_set_data(bio, (void *)(intptr_t)fd);
    SSL_set_bio(ssl, bio, bio);
    const char *name = sni ? sni : host;
    if (name != NULL && !is_ip_literal(name))
        SSL_set_tlsext_host_name(ssl, name);
    if (!t->insecure) {
        SSL_set_verify(ssl, SSL_VERIFY_PEER, NULL);
        if (name != NULL) {
            int ok = is_ip_literal(name) ? X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), name)
                                         : SSL_set1_host(ssl, name);
            if (ok != 1) {
                SSL_free(ssl);
                return wl_fail(WATCHLOCK_EINVAL, "TLS: cannot check the server's name '%s'", name);
            }
        }
    }
    for (;;) {
        errno = 0;
        int ret = SSL_connect(ssl);
        if (ret == 1)
            break;
        int se = SSL_get_error(ssl, ret);
        short ev = se == SSL_ERROR_WANT_READ ? POLLIN : se == SSL_ERROR_WANT_WRITE ? POLLOUT : 0;
        if (ev == 0) {
            int rc = handshake_error(ssl, ret, name ? name : "", label);
            SSL_free(ssl);
            return rc;
        }
        int64_t left = deadline_us < 0 ? 1000000 : deadline_us - wl_now_us();
        struct pollfd p = {.fd = fd, .events = ev};
        int n = left > 0 ? poll(&p, 1, (int)((left + 999) / 1000)) : 0;
        if (n == 0 && deadline_us >= 0 && wl_now_us() >= deadline_us) {
            SSL_free(ssl);
            ERR_clear_error();
            return wl_fail(WATCHLOCK_ECONN,
                           "TLS to %s failed: handshake timed out (a plain Redis port never answers a TLS "
                           "handshake: is this the server's tls-port?)",
                           label);
        }
        if (n < 0 && errno != EINTR) {
            SSL_free(ssl);
            return wl_fail(WATCHLOCK_ECONN, "TLS to %s failed: %s", label, strerror(errno));
        }
    }
    *out = ssl;
    return WATCHLOCK_OK;
}

/* Result of a failed SSL_read/SSL_write. */
static long io_result(SSL *ssl, int ret, int *want, char *err, size_t errlen, int *kind)
{
    int se = SSL_get_error(ssl, ret);
    switch (se) {
    case SSL_ERROR_WANT_READ:
        *want = POLLIN;
        return 0;
    case SSL_ERROR_WANT_WRITE:
        *want = POLLOUT;
        return 0;
    case SSL_ERROR_ZERO_RETURN:
        *kind = WL_CERR_EOF;
        return 0;
    case SSL_ERROR_SYSCALL:
        if (errno == 0 || ret == 0) {
            *kind = WL_CERR_EOF;
            return 0;
        }
        *kind = (errno == ECONNRESET || errno == EPIPE) ? WL_CERR_RESET : WL_CERR_IO;
        /* TLS 1.3 finishes the handshake before the server judges our
         * certificate: a server that wants one may just reset. */
        snprintf(err, errlen, "%s%s", strerror(errno),
                 *kind == WL_CERR_RESET ? " (a TLS server that requires a client certificate does this: cert= and key=?)"
                                        : "");
        ERR_clear_error();
        return -1;
    default: {
        char buf[200];
        *kind = WL_CERR_TLS;
        snprintf(err, errlen, "TLS error: %s", ssl_error_text(buf, sizeof buf));
        return -1;
    }
    }
}

long wl_tls_read(void *p, void *buf, size_t len, int *want, char *err, size_t errlen, int *kind)
{
    SSL *ssl = p;
    ERR_clear_error();
    errno = 0;
    int n = SSL_read(ssl, buf, len > INT32_MAX ? INT32_MAX : (int)len);
    if (n > 0)
        return n;
    return io_result(ssl, n, want, err, errlen, kind);
}

long wl_tls_write(void *p, const void *buf, size_t len, int *want, char *err, size_t errlen, int *kind)
{
    SSL *ssl = p;
    ERR_clear_error();
    errno = 0;
    int n = SSL_write(ssl, buf, len > INT32_MAX ? INT32_MAX : (int)len);
    if (n > 0)
        return n;
    long r = io_result(ssl, n, want, err, errlen, kind);
    if (r == 0 && *kind == WL_CERR_EOF) {
        snprintf(err, errlen, "connection closed by server");
        return -1;
    }
    return r;
}

void wl_tls_close(void *p, bool graceful)
{
    SSL *ssl = p;
    if (graceful)
        SSL_shutdown(ssl); /* one non-blocking try to send close_notify */
    SSL_free(ssl);
    ERR_clear_error();
}
