/* Links against an installed libwatchlock and checks header and library agree. */
#include <watchlock.h>
#include <stdio.h>
#include <string.h>

int main(void)
{
    if (watchlock_version() != WATCHLOCK_VERSION_NUMBER ||
        strcmp(watchlock_version_string(), WATCHLOCK_VERSION_STRING) != 0) {
        fprintf(stderr, "header %s, library %s\n", WATCHLOCK_VERSION_STRING, watchlock_version_string());
        return 1;
    }
    watchlock_client *c;
    if (watchlock_client_open(&c, "not-a-url") != WATCHLOCK_EINVAL || c != NULL) {
        fprintf(stderr, "malformed URL not refused\n");
        return 1;
    }
    printf("watchlock %s ok\n", watchlock_version_string());
    return 0;
}
