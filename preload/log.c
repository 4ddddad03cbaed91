/*
 * log.c - wlp_log_line (log.h): the shim and the keeper log the same way,
 * written once. Built into the shim's own sources and into the keeper's
 * watchlock_preload_logic, as config.c is.
 */
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>
#include <unistd.h>

#include "log.h"
#include "preload.h"

void wlp_log_line(const char *who, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    const char *dest = getenv(WLP_ENV_LOG);
    if (dest == NULL || dest[0] == '\0' || strcmp(dest, "syslog") == 0) {
        syslog(LOG_USER | LOG_WARNING, "%s[%d]: %s", who, (int)getpid(), msg);
        return;
    }
    char line[1200];
    int n = snprintf(line, sizeof line, "%s[%d]: %s\n", who, (int)getpid(), msg);
    if (n < 0)
        return;
    if ((size_t)n >= sizeof line)
        n = sizeof line - 1;
    int fd = strcmp(dest, "stderr") == 0 ? 2 : open(dest, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0)
        return;
    ssize_t w = write(fd, line, (size_t)n);
    (void)w;
    if (fd != 2)
        close(fd);
}
