/*
 * fuzz_url.c - libFuzzer harness for the URL parser (core/src/proto/url.c):
 * wl_endpoint_parse() on a NUL-terminated copy of the input, then
 * wl_endpoint_clear(). Besides crashes, leaks and undefined behaviour
 * (ASan, UBSan) it checks what a parsed endpoint promises: one of host or
 * socket path (or, for Sentinel, sentinels and a master name), a port in
 * range, TLS options only on TLS URLs, positive timeouts, a terminated label; and
 * that a failure leaves a detail message and an endpoint safe to clear.
 */
#include "proto/proto.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *url = malloc(size + 1);
    if (url == NULL)
        return 0;
    memcpy(url, data, size);
    url[size] = '\0';
    wl_endpoint ep;
    int rc = wl_endpoint_parse(&ep, url);
    if (rc == WATCHLOCK_OK && ep.kind != WL_KIND_STANDALONE) {
        /* Sentinel and Cluster: at least one sentinel / seed node, each
         * with a host and a port in range; a Sentinel URL names its master,
         * a Cluster URL has database 0; no standalone address. */
        if (ep.n_seeds == 0 || ep.host || ep.unix_path)
            abort();
        if (ep.kind == WL_KIND_SENTINEL && (ep.master_name == NULL || ep.master_name[0] == '\0'))
            abort();
        if (ep.kind == WL_KIND_CLUSTER && (ep.master_name != NULL || ep.db != 0))
            abort();
        for (size_t i = 0; i < ep.n_seeds; i++)
            if (ep.seeds[i].host == NULL || ep.seeds[i].host[0] == '\0' || ep.seeds[i].port < 1 ||
                ep.seeds[i].port > 65535)
                abort();
    } else if (rc == WATCHLOCK_OK) {
        if ((ep.host == NULL) == (ep.unix_path == NULL))
            abort(); /* exactly one of TCP and unix */
        if (ep.host != NULL && (ep.port < 1 || ep.port > 65535 || ep.host[0] == '\0'))
            abort();
        if (ep.unix_path != NULL && ep.unix_path[0] != '/')
            abort();
    }
    if (rc == WATCHLOCK_OK) {
        if (!ep.tls.on && (ep.tls.cacert || ep.tls.cacertdir || ep.tls.cert || ep.tls.key || ep.tls.sni))
            abort(); /* TLS options only on TLS URLs */
        if (ep.min_replicas < 0 || ep.min_replicas_timeout_ms <= 0)
            abort();
        if (ep.connect_timeout_ms <= 0 || ep.command_timeout_ms <= 0 || ep.db < 0 ||
            ep.safety_margin_ms < 0 || ep.safety_margin_ms > WL_MAX_SAFETY_MARGIN_MS)
            abort();
        if (memchr(ep.label, '\0', sizeof ep.label) == NULL)
            abort();
    } else {
        if (rc != WATCHLOCK_EINVAL && rc != WATCHLOCK_ENOMEM)
            abort();
        if (watchlock_last_error()[0] == '\0')
            abort(); /* every failure says why */
    }
    wl_endpoint_clear(&ep); /* also after a failure: parse left it cleared */
    wl_endpoint_clear(&ep); /* and twice */
    free(url);
    return 0;
}
