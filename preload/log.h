/*
 * log.h - the one log line of the preload shim and its keeper (private).
 *
 * WATCHLOCK_PRELOAD_LOG (docs/preload.md) chooses where: syslog (the
 * default, also when empty), "stderr", or a file path appended to. Each line
 * is "WHO[PID]: message", WHO being "watchlock-preload" or
 * "watchlock-keeper". Best effort: a destination that cannot be opened or
 * written loses the line; nothing allocates (the shim runs inside any
 * program).
 */
#ifndef WATCHLOCK_PRELOAD_LOG_H
#define WATCHLOCK_PRELOAD_LOG_H

void wlp_log_line(const char *who, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif /* WATCHLOCK_PRELOAD_LOG_H */
