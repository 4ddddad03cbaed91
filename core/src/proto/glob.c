/*
 * glob.c - Redis-style globs on lock names (watchlock_client_list, admin.c):
 * matching a name, and the SCAN MATCH pattern of the keys that may hold a
 * matching name. Pure functions of bytes.
 */
#include "proto/proto.h"

#include <stdlib.h>
#include <string.h>

/* Redis's glob (stringmatchlen in its util.c), bounds-checked and
 * case-sensitive. *give_up stops the retries of outer '*'s once a
 * '*' has failed against every suffix (they could only fail too), which
 * keeps patterns such as "*a*a*a*b" linear per '*'. */
bool wl_glob_match(const unsigned char *p, size_t plen, const unsigned char *s, size_t slen, bool *give_up)
{
    while (plen > 0 && slen > 0) {
        switch (p[0]) {
        case '*':
            while (plen > 1 && p[1] == '*') {
                p++;
                plen--;
            }
            if (plen == 1)
                return true;
            while (slen > 0) {
                if (wl_glob_match(p + 1, plen - 1, s, slen, give_up))
                    return true;
                if (*give_up)
                    return false;
                s++;
                slen--;
            }
            *give_up = true;
            return false;
        case '?':
            break;
        case '[': {
            p++;
            plen--;
            bool negate = plen > 0 && p[0] == '^';
            if (negate) {
                p++;
                plen--;
            }
            bool match = false;
            for (;;) {
                if (plen == 0) { /* unterminated: as Redis, the class ends here */
                    p--;
                    plen++;
                    break;
                }
                if (p[0] == '\\' && plen >= 2) {
                    p++;
                    plen--;
                    match |= p[0] == s[0];
                } else if (p[0] == ']') {
                    break;
                } else if (plen >= 3 && p[1] == '-') {
                    unsigned char lo = p[0], hi = p[2];
                    if (lo > hi) {
                        unsigned char t = lo;
                        lo = hi;
                        hi = t;
                    }
                    match |= s[0] >= lo && s[0] <= hi;
                    p += 2;
                    plen -= 2;
                } else {
                    match |= p[0] == s[0];
                }
                p++;
                plen--;
            }
            if (negate)
                match = !match;
            if (!match)
                return false;
            break;
        }
        case '\\':
            if (plen >= 2) {
                p++;
                plen--;
            }
            /* fall through */
        default:
            if (p[0] != s[0])
                return false;
            break;
        }
        s++;
        slen--;
        p++;
        plen--;
        if (slen == 0) {
            while (plen > 0 && p[0] == '*') {
                p++;
                plen--;
            }
            break;
        }
    }
    return plen == 0 && slen == 0;
}

/* The MATCH pattern for SCAN: "watchlock:{" + the name glob with literal
 * bytes escaped as keys.c escapes names and '?' / [classes] widened to
 * '*' (one name byte may be three key bytes) + "}". Every lock key whose
 * name matches the glob matches it; wl_glob_match() then decides. */
char *wl_key_glob(const unsigned char *p, size_t plen, size_t *out_len)
{
    static const char pre[] = "watchlock:{";
    char *out = malloc(sizeof pre - 1 + plen * 3 + 2);
    if (out == NULL)
        return NULL;
    size_t n = sizeof pre - 1;
    memcpy(out, pre, n);
    for (size_t i = 0; i < plen; i++) {
        unsigned char ch = p[i];
        if (ch == '*' || ch == '?' || ch == '[') {
            if (ch == '[') { /* skip the class as glob_match reads it */
                size_t j = i + 1;
                if (j < plen && p[j] == '^')
                    j++;
                while (j < plen && p[j] != ']') {
                    if (p[j] == '\\' && j + 1 < plen)
                        j += 2;
                    else if (j + 2 < plen && p[j + 1] == '-') /* a range, its end may be ']' */
                        j += 3;
                    else
                        j++;
                }
                i = j < plen ? j : plen - 1;
            }
            if (n == 0 || out[n - 1] != '*' || (n >= 2 && out[n - 2] == '\\'))
                out[n++] = '*';
        } else if (ch == '\\' && i + 1 < plen) {
            unsigned char next = p[++i];
            if (next == '%' || next == '{' || next == '}') {
                n += wl_escape_byte(next, out + n); /* "%25" etc.: no glob characters */
            } else {
                out[n++] = '\\';
                out[n++] = (char)next;
            }
        } else if (ch == '%' || ch == '{' || ch == '}') {
            n += wl_escape_byte(ch, out + n);
        } else if (ch == ']' || ch == '\\') {
            out[n++] = '\\';
            out[n++] = (char)ch;
        } else {
            out[n++] = (char)ch;
        }
    }
    out[n++] = '}';
    *out_len = n;
    return out;
}
