/*
 * queue.c - the waiter queue engine shared by the queued lock kinds (fair
 * lock, semaphore, read-write lock). Work in progress: the declarations of
 * watchlock.h are in place, the engine follows.
 */
#include "locks/locks.h"

static int not_yet(void)
{
    return wl_fail(WATCHLOCK_EINVAL, "queued lock kinds are not implemented yet");
}

int watchlock_fair_lock_new(watchlock_lock **out, watchlock_client *client, const void *name, size_t name_len)
{
    (void)client, (void)name, (void)name_len;
    if (out)
        *out = NULL;
    return not_yet();
}

int watchlock_semaphore_new(watchlock_lock **out, watchlock_client *client, const void *name, size_t name_len,
                            int64_t permits)
{
    (void)client, (void)name, (void)name_len, (void)permits;
    if (out)
        *out = NULL;
    return not_yet();
}

int watchlock_semaphore_acquire(watchlock_lock *sem, int64_t k, int64_t wait_ms)
{
    (void)sem, (void)k, (void)wait_ms;
    return not_yet();
}

int watchlock_client_set_permits(watchlock_client *client, const void *name, size_t name_len, int64_t permits)
{
    (void)client, (void)name, (void)name_len, (void)permits;
    return not_yet();
}

int watchlock_lock_kind(const watchlock_lock *lock)
{
    return lock == NULL ? -1 : WATCHLOCK_KIND_PLAIN;
}

int64_t watchlock_lock_permits(const watchlock_lock *lock)
{
    (void)lock;
    return 1;
}

int watchlock_rwlock_new(watchlock_lock **out, watchlock_client *client, const void *name, size_t name_len, int write)
{
    (void)client, (void)name, (void)name_len, (void)write;
    if (out)
        *out = NULL;
    return not_yet();
}

int watchlock_rwlock_downgrade(watchlock_lock *write_side)
{
    (void)write_side;
    return not_yet();
}

int watchlock_client_name_info(watchlock_name_info **out, watchlock_client *client, const void *name,
                               size_t name_len)
{
    (void)client, (void)name, (void)name_len;
    if (out)
        *out = NULL;
    return not_yet();
}
int watchlock_name_info_kind(const watchlock_name_info *info) { (void)info; return WATCHLOCK_KIND_NONE; }
int64_t watchlock_name_info_permits(const watchlock_name_info *info) { (void)info; return 0; }
int64_t watchlock_name_info_in_use(const watchlock_name_info *info) { (void)info; return 0; }
int64_t watchlock_name_info_holders(const watchlock_name_info *info) { (void)info; return 0; }
int watchlock_name_info_writer(const watchlock_name_info *info) { (void)info; return 0; }
int64_t watchlock_name_info_queue_length(const watchlock_name_info *info) { (void)info; return 0; }
int64_t watchlock_name_info_oldest_wait_ms(const watchlock_name_info *info) { (void)info; return 0; }
int64_t watchlock_name_info_fence(const watchlock_name_info *info) { (void)info; return 0; }
int64_t watchlock_name_info_remaining_ms(const watchlock_name_info *info) { (void)info; return 0; }
void watchlock_name_info_free(watchlock_name_info *info) { (void)info; }
