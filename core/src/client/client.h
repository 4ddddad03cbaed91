/*
 * client/client.h - the client layer: open/close, the client's subscriber
 * (client.c), admin calls (admin.c) and check (check.c). Calls into hold/
 * and the layers below.
 */
#ifndef WATCHLOCK_CLIENT_H
#define WATCHLOCK_CLIENT_H

#include "hold/hold.h"

/* Checks shared by every entry point: NULL, forked, closed. */
int wl_check_client(const watchlock_client *c);
int wl_check_name(const void *name, size_t len);
/* Checks client and name, then makes the name's keys (admin calls). */
int wl_admin_keys(watchlock_client *c, const void *name, size_t name_len, wl_keys *keys);/* The subscriber that carries wake-ups for `channel`: the client's, or
 * under Cluster the one of the node that serves the channel's slot (made on
 * first use). NULL (ECONN set) when no node serves it. */
wl_subscriber *wl_client_sub(watchlock_client *c, const char *channel, size_t len);
/* wl_client_sub + wl_sub_join as one step (the subscriber cannot be freed
 * in between). `what` prefixes the error message. */
int wl_client_join(watchlock_client *c, const char *channel, size_t len, const char *what, wl_subscriber **sub,
                   wl_sub_entry **entry);
void wl_client_unref(watchlock_client *c);
/* watchlock_client_open without the PING: a quorum's member 0, probed in
 * parallel with the others (topology/quorum.c). */
int wl_client_open_unprobed(watchlock_client **out, const char *url);
/* One server's owner record, list and check (admin.c, check.c); the
 * public ones are quorum_client.c's, which run these on a plain client and
 * on each member of a quorum (inspect and force-release are the
 * placement's: client.c, hold.h wl_placement). */
int wl_client_inspect_owner_one(watchlock_owner **out, int *held, int64_t *remaining_ms, int64_t *fence,
                                watchlock_client *c, const void *name, size_t name_len);
/* The same on server s (a quorum's member: admin.c, used by quorum_client.c). */
int wl_client_inspect_owner_at(watchlock_owner **out, int *held, int64_t *remaining_ms, int64_t *fence,
                               watchlock_client *c, wl_server *s, const void *name, size_t name_len);
watchlock_owner *wl_owner_new(const redisReply *host, const redisReply *pid, const redisReply *label);
watchlock_owner *wl_owner_parse(const char *rec, size_t len, bool *oom);
int wl_client_list_one(watchlock_lock_list **out, watchlock_client *c, const void *pattern, size_t pattern_len);
int wl_client_check_one(watchlock_report **out, watchlock_client *client);
/* A quorum's list from its members' (admin.c): the names on at least need
 * of the n lists (NULL entries: members that did not answer). */
int wl_lock_list_majority(watchlock_lock_list **out, watchlock_lock_list *const *lists, size_t n, size_t need);

/* The check's report (report.c): adds a finding (its message made one
 * line); OK or ENOMEM. */
watchlock_report *wl_report_new(void); /* empty; NULL out of memory */
int wl_report_add(watchlock_report *r, int code, const char *fmt, ...) WL_FORMAT(3, 4);
void wl_report_clear(watchlock_report *r); /* forgets the findings, keeps the report */

#endif
