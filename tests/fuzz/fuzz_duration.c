/*
 * fuzz_duration.c - libFuzzer harness for watchlock_parse_duration()
 * (core/src/base/util.c) with a NUL-terminated copy of the input. Checks that
 * an accepted duration is within 0 .. WATCHLOCK_MAX_LEASE_MS, that a
 * refused one leaves *out_ms at 0 with a detail message, and that parsing
 * is deterministic; ASan and UBSan watch the float-to-integer conversion.
 */
#include "base/base.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    if (text == NULL)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    int64_t ms = -1, again = -1;
    int rc = watchlock_parse_duration(&ms, text);
    if (rc == WATCHLOCK_OK) {
        if (ms < 0 || ms > WATCHLOCK_MAX_LEASE_MS)
            abort();
    } else {
        if (rc != WATCHLOCK_EINVAL || ms != 0 || watchlock_last_error()[0] == '\0')
            abort();
    }
    if (watchlock_parse_duration(&again, text) != rc || again != ms)
        abort();
    free(text);
    return 0;
}
