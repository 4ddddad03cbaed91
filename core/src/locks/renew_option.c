/*
 * renew_option.c - the renew interval as an absolute time or as a fraction
 * of the lease (issue 25 item 4), and the one parser the bindings and the
 * CLI hand their text to, so that the rule lives here only:
 *
 *   "1/3", "9/10"   a fraction num/den of the lease, 0 < num < den
 *   "25%", "12.5%"  a percentage of the lease, above 0 and below 100
 *   "500ms", "2s"   an absolute interval (watchlock_parse_duration's forms)
 *
 * A fraction follows the lease: with "1/3" a 9 s lease renews every 3 s,
 * and after set_lease(3000) every 1 s. An absolute interval must be below
 * the lease: the setter refuses it against the lease set at the time, and
 * an acquire refuses it if a later, shorter lease made it too long
 * (wl_renew_check, hold/hold.c); nothing falls back to lease/3 silently any more.
 */
#include "locks/locks.h"

#include <ctype.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DEN 1000000 /* "12.345%" is 12345/1000000 */

int watchlock_lock_set_renew_fraction(watchlock_lock *l, int num, int den)
{
    if (l != NULL && !(num > 0 && den > 0 && den <= MAX_DEN && num < den))
        return wl_fail(WATCHLOCK_EINVAL,
                       "lock %s: renew fraction must be num/den with 0 < num < den <= %d (below the whole lease), "
                       "got %d/%d",
                       l->hold.quoted, MAX_DEN, num, den);
    int rc = wl_check_lock(l);
    if (rc != WATCHLOCK_OK)
        return rc;
    pthread_mutex_lock(&l->hold.client->mu);
    l->hold.renew_num = num;
    l->hold.renew_den = den;
    l->hold.interval_ms = 0;
    pthread_mutex_unlock(&l->hold.client->mu);
    return WATCHLOCK_OK;
}

/* Digits, at most one '.', and nothing else; *digits counts the digits. */
static bool plain_decimal(const char *p, size_t n)
{
    size_t digits = 0, dots = 0;
    for (size_t i = 0; i < n; i++) {
        if (p[i] == '.')
            dots++;
        else if (isdigit((unsigned char)p[i]))
            digits++;
        else
            return false;
    }
    return digits > 0 && dots <= 1;
}

int watchlock_parse_renew_interval(const char *text, int64_t *out_ms, int *renew_num, int *renew_den)
{
    if (text == NULL || out_ms == NULL || renew_num == NULL || renew_den == NULL)
        return wl_fail(WATCHLOCK_EINVAL, "renew interval: NULL argument");
    *out_ms = 0;
    *renew_num = *renew_den = 0;
    size_t n = strlen(text);
    const char *slash = strchr(text, '/');
    if (slash != NULL) {
        size_t a = (size_t)(slash - text), b = n - a - 1;
        if (a == 0 || b == 0 || a > 7 || b > 7 || strspn(text, "0123456789") != a ||
            strspn(slash + 1, "0123456789") != b)
            return wl_fail(WATCHLOCK_EINVAL, "bad renew interval '%.64s': a fraction is whole numbers such as 1/3",
                           text);
        long num = strtol(text, NULL, 10), den = strtol(slash + 1, NULL, 10);
        if (!(num > 0 && num < den && den <= MAX_DEN))
            return wl_fail(WATCHLOCK_EINVAL,
                           "bad renew interval '%.64s': the fraction must be above 0 and below 1 (of the lease)", text);
        *renew_num = (int)num;
        *renew_den = (int)den;
        return WATCHLOCK_OK;
    }
    if (n > 0 && text[n - 1] == '%') {
        if (n > 12 || !plain_decimal(text, n - 1))
            return wl_fail(WATCHLOCK_EINVAL, "bad renew interval '%.64s': a percentage is a number such as 25%%",
                           text);
        double pct = strtod(text, NULL);
        long parts = (long)(pct * (MAX_DEN / 100) + 0.5); /* in millionths of the lease */
        if (!(parts > 0 && parts < MAX_DEN))
            return wl_fail(WATCHLOCK_EINVAL,
                           "bad renew interval '%.64s': the percentage must be above 0%% and below 100%% (of the lease)",
                           text);
        long g = parts, h = MAX_DEN; /* reduce: 25% is 1/4 */
        while (h != 0) {
            long t = g % h;
            g = h;
            h = t;
        }
        *renew_num = (int)(parts / g);
        *renew_den = (int)(MAX_DEN / g);
        return WATCHLOCK_OK;
    }
    return watchlock_parse_duration(out_ms, text);
}
