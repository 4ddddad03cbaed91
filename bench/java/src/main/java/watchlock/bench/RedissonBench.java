package watchlock.bench;

import java.io.IOException;
import java.io.RandomAccessFile;
import java.lang.management.ManagementFactory;
import java.nio.ByteOrder;
import java.nio.MappedByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.LockSupport;

import org.redisson.Redisson;
import org.redisson.api.RBucket;
import org.redisson.api.RLock;
import org.redisson.api.RPermitExpirableSemaphore;
import org.redisson.api.RReadWriteLock;
import org.redisson.api.RedissonClient;
import org.redisson.api.redisnode.RedisNode;
import org.redisson.api.redisnode.RedisNodes;
import org.redisson.config.Config;

/**
 * Redisson peer of bench/c/wlbench.c, run by bench/bench.py. One mode per
 * run; prints one JSON object on stdout.
 *
 * <pre>
 *   ping     URL N MAX_S                 RBucket.get() loop (Redisson's floor: one GET round trip)
 *   cycle    URL N MAX_S                 RLock lock() + unlock(), uncontended
 *   handoff  URL SHM ID HOLD_US POLITE   one of the contending processes
 *   watchdog URL LOCKS LEASE_MS HOLD_S   one client holds LOCKS locks renewed by its watchdog
 *   rwmix    URL SHM ID HOLD_US WRITE    one reader (WRITE 0) or the writer (1) of the RReadWriteLock
 *                                        mixed workload (slots as in wlbench.c's rwmix)
 * </pre>
 *
 * cycle and handoff take the lock kind from -Dbench.kind: lock (RLock, the default), fair
 * (RFairLock), sem (RPermitExpirableSemaphore with 1 permit: acquire() / release(permitId)),
 * read / write (the sides of an RReadWriteLock).
 *
 * System.nanoTime() is CLOCK_MONOTONIC on Linux, the clock of the C and
 * Python workers, so hand-off latencies across languages are comparable.
 */
public final class RedissonBench {
    private RedissonBench() {}

    private static RedissonClient open(String url, long watchdogMs) {
        Config config = new Config();
        config.useSingleServer().setAddress(url);
        if (watchdogMs > 0) {
            config.setLockWatchdogTimeout(watchdogMs);
        }
        return Redisson.create(config);
    }

    private static String ping(String url, long n, double maxS) {
        RedissonClient client = open(url, 0);
        RBucket<String> bucket = client.getBucket("bench:floor");
        for (int i = 0; i < 2000; i++) { // warm-up (JIT)
            bucket.get();
        }
        long t0 = System.nanoTime();
        long limit = t0 + (long) (maxS * 1e9);
        long done = 0;
        while (done < n) {
            bucket.get();
            done++;
            if ((done & 63) == 0 && System.nanoTime() > limit) {
                break;
            }
        }
        long t1 = System.nanoTime();
        client.shutdown();
        return String.format("{\"ops\": %d, \"seconds\": %.6f}", done, (t1 - t0) / 1e9);
    }

    /** One lock handle of the kind -Dbench.kind names. */
    private interface Held {
        boolean acquire(long waitMs) throws InterruptedException;

        void release();
    }

    private static Held held(RedissonClient client, String name) {
        String kind = System.getProperty("bench.kind", "lock");
        if (kind.equals("sem")) {
            RPermitExpirableSemaphore sem = client.getPermitExpirableSemaphore(name);
            sem.trySetPermits(1);
            return new Held() {
                private String permit;

                public boolean acquire(long waitMs) throws InterruptedException {
                    permit = sem.tryAcquire(waitMs, TimeUnit.MILLISECONDS);
                    return permit != null;
                }

                public void release() {
                    sem.release(permit);
                }
            };
        }
        RLock lock = kind.equals("fair") ? client.getFairLock(name)
                : kind.equals("read") ? client.getReadWriteLock(name).readLock()
                : kind.equals("write") ? client.getReadWriteLock(name).writeLock()
                : client.getLock(name);
        return new Held() {
            public boolean acquire(long waitMs) throws InterruptedException {
                if (waitMs == 0) {
                    lock.lock(); // uncontended cycle: lock() without a lease, as users mostly call it
                    return true;
                }
                return lock.tryLock(waitMs, TimeUnit.MILLISECONDS);
            }

            public void release() {
                lock.unlock();
            }
        };
    }

    private static String cycle(String url, long n, double maxS) throws InterruptedException {
        RedissonClient client = open(url, 0);
        Held lock = held(client, "bench:cycle:redisson:" + ProcessHandle.current().pid());
        for (int i = 0; i < 2000; i++) { // warm-up (JIT)
            lock.acquire(0);
            lock.release();
        }
        long t0 = System.nanoTime();
        long limit = t0 + (long) (maxS * 1e9);
        long done = 0;
        while (done < n) {
            lock.acquire(0); // no lease given: the watchdog keeps it, as users mostly call it
            lock.release();
            done++;
            if ((done & 63) == 0 && System.nanoTime() > limit) {
                break;
            }
        }
        long t1 = System.nanoTime();
        client.shutdown();
        return String.format("{\"ops\": %d, \"seconds\": %.6f}", done, (t1 - t0) / 1e9);
    }

    // Slots of the shared file, as in wlbench.c.
    private static final int RELEASE_NS = 0, TURNS = 1, LAST_HOLDER = 2, STOP_NS = 3, IN_CS = 4,
            VIOLATIONS = 5, START_NS = 6, OUT_OF_ORDER = 7, READY = 8, RW_READERS = 32, RW_WRITER = 33,
            ARRIVAL = 40;

    private static String handoff(String url, String shmPath, int id, long holdUs, boolean polite)
            throws IOException, InterruptedException {
        MappedByteBuffer shm;
        try (RandomAccessFile f = new RandomAccessFile(shmPath, "rw")) {
            shm = f.getChannel().map(FileChannel.MapMode.READ_WRITE, 0, 64 * 8);
        }
        shm.order(ByteOrder.LITTLE_ENDIAN);
        RedissonClient client = open(url, 0);
        Held lock = held(client, "bench:handoff");
        // Warm the JIT on another name so the first turns are not interpreted.
        Held warm = held(client, "bench:handoff:warm:" + id);
        for (int i = 0; i < 1000; i++) {
            warm.acquire(0);
            warm.release();
        }
        List<Long> lat = new ArrayList<>();
        long turns = 0, same = 0;
        shm.putLong((READY + id) * 8, 1);
        while (shm.getLong(START_NS * 8) == 0) {
            LockSupport.parkNanos(200_000);
        }
        long stop = shm.getLong(STOP_NS * 8);
        while (System.nanoTime() < stop) {
            long arrived = System.nanoTime();
            shm.putLong((ARRIVAL + id) * 8, arrived);
            if (!lock.acquire(30_000)) {
                throw new IllegalStateException("tryLock timed out after 30 s");
            }
            long tAcq = System.nanoTime();
            shm.putLong((ARRIVAL + id) * 8, 0);
            for (int i = 0; i < 8; i++) { // granted while an earlier arrival still waits
                long other = shm.getLong((ARRIVAL + i) * 8);
                if (i != id && other != 0 && other < arrived) {
                    shm.putLong(OUT_OF_ORDER * 8, shm.getLong(OUT_OF_ORDER * 8) + 1);
                    break;
                }
            }
            if (shm.getLong(IN_CS * 8) != 0) {
                shm.putLong(VIOLATIONS * 8, shm.getLong(VIOLATIONS * 8) + 1);
            }
            shm.putLong(IN_CS * 8, 1);
            long rel = shm.getLong(RELEASE_NS * 8);
            long prev = shm.getLong(LAST_HOLDER * 8);
            if (rel != 0 && tAcq < stop) {
                if (prev != id + 1) {
                    lat.add(tAcq - rel);
                } else {
                    same++;
                }
            }
            turns++;
            long myTurn = shm.getLong(TURNS * 8) + 1;
            shm.putLong(TURNS * 8, myTurn);
            shm.putLong(LAST_HOLDER * 8, id + 1);
            Thread.sleep(holdUs / 1000, (int) (holdUs % 1000) * 1000);
            shm.putLong(IN_CS * 8, 0);
            shm.putLong(RELEASE_NS * 8, System.nanoTime());
            lock.release();
            while (polite && shm.getLong(TURNS * 8) == myTurn && System.nanoTime() < stop) {
                LockSupport.parkNanos(50_000);
            }
        }
        client.shutdown();
        StringBuilder sb = new StringBuilder();
        sb.append("{\"turns\": ").append(turns).append(", \"same_holder\": ").append(same)
                .append(", \"handoff_ns\": [");
        for (int i = 0; i < lat.size(); i++) {
            if (i > 0) {
                sb.append(',');
            }
            sb.append(lat.get(i));
        }
        return sb.append("]}").toString();
    }

    private static long rssBytes() throws IOException {
        String[] f = new String(Files.readAllBytes(Paths.get("/proc/self/statm"))).trim().split(" ");
        return Long.parseLong(f[1]) * 4096;
    }

    private static long heapUsed() {
        for (int i = 0; i < 3; i++) {
            System.gc();
        }
        Runtime rt = Runtime.getRuntime();
        return rt.totalMemory() - rt.freeMemory();
    }

    private static long processCpuNs() {
        return ((com.sun.management.OperatingSystemMXBean) ManagementFactory.getOperatingSystemMXBean())
                .getProcessCpuTime();
    }

    /** Script calls (EVAL + EVALSHA) the server has run so far, from INFO commandstats. */
    private static long serverScriptCalls(RedissonClient client) {
        java.util.Map<String, String> stats = client.getRedisNodes(RedisNodes.SINGLE).getInstance()
                .info(RedisNode.InfoSection.COMMANDSTATS);
        long n = 0;
        for (String key : new String[] {"cmdstat_eval", "cmdstat_evalsha"}) {
            String v = stats.get(key);
            if (v == null) {
                continue;
            }
            for (String field : v.split(",")) {
                if (field.startsWith("calls=")) {
                    n += Long.parseLong(field.substring(6).trim());
                }
            }
        }
        return n;
    }

    private static String watchdog(String url, int n, long leaseMs, double holdS) throws Exception {
        RedissonClient client = open(url, leaseMs);
        // Warm up (JIT, connection pool) on a separate name, with an explicit
        // lease: lock()/unlock() churn would leave extra renewal timer chains
        // behind (see bench/README.md) and inflate the watchdog's numbers.
        RLock warm = client.getLock("bench:watchdog:warm");
        for (int i = 0; i < 1000; i++) {
            warm.lock(60, TimeUnit.SECONDS);
            warm.unlock();
        }
        long rss0 = rssBytes();
        long heap0 = heapUsed();
        long ta0 = System.nanoTime();
        RLock[] locks = new RLock[n];
        for (int i = 0; i < n; i++) {
            locks[i] = client.getLock("bench:watchdog:redisson:" + i);
            locks[i].lock(); // no lease: renewed by the watchdog every lease/3
        }
        long ta1 = System.nanoTime();
        long rssHeld = rssBytes();
        long heapHeld = heapUsed();
        long cpu0 = processCpuNs();
        long cmds0 = serverScriptCalls(client);
        long t0 = System.nanoTime();
        long rssMax = rssHeld;
        while (System.nanoTime() - t0 < (long) (holdS * 1e9)) {
            Thread.sleep(100);
            rssMax = Math.max(rssMax, rssBytes());
        }
        long t1 = System.nanoTime();
        long cmds = serverScriptCalls(client) - cmds0;
        long cpu = processCpuNs() - cpu0;
        long lostServer = 0;
        for (RLock l : locks) {
            if (!l.isHeldByCurrentThread() || l.remainTimeToLive() <= 0) {
                lostServer++;
            }
        }
        long releaseFail = 0;
        for (RLock l : locks) {
            try {
                l.unlock();
            } catch (IllegalMonitorStateException e) {
                releaseFail++;
            }
        }
        client.shutdown();
        return String.format("{\"locks\": %d, \"lease_ms\": %d, \"hold_s\": %.3f, \"acquire_s\": %.3f, "
                + "\"rss_before\": %d, \"rss_held\": %d, \"rss_max\": %d, \"heap_before\": %d, "
                + "\"heap_held\": %d, \"process_cpu_us\": %d, \"lost_server\": %d, "
                + "\"release_failures\": %d, \"server_script_calls\": %d, \"batch_size\": %d}",
                n, leaseMs, (t1 - t0) / 1e9, (ta1 - ta0) / 1e9, rss0, rssHeld, rssMax, heap0, heapHeld,
                cpu / 1000, lostServer, releaseFail, cmds, client.getConfig().getLockWatchdogBatchSize());
    }

    /**
     * One process of the mixed read/write workload: a reader (write false) or the writer takes its side of
     * the RReadWriteLock "bench:rwmix", holds it HOLD_US, releases, and contends again at once. Checks
     * exclusion through the shared slots: readers count themselves in RW_READERS, the writer sets RW_WRITER.
     */
    private static String rwmix(String url, String shmPath, int id, long holdUs, boolean write)
            throws IOException, InterruptedException {
        java.lang.invoke.VarHandle slot = java.lang.invoke.MethodHandles.byteBufferViewVarHandle(long[].class,
                ByteOrder.LITTLE_ENDIAN);
        MappedByteBuffer shm;
        try (RandomAccessFile f = new RandomAccessFile(shmPath, "rw")) {
            shm = f.getChannel().map(FileChannel.MapMode.READ_WRITE, 0, 64 * 8);
        }
        RedissonClient client = open(url, 0);
        RReadWriteLock rw = client.getReadWriteLock("bench:rwmix");
        RLock lock = write ? rw.writeLock() : rw.readLock();
        RLock warm = write ? client.getReadWriteLock("bench:rwmix:warm:" + id).writeLock()
                : client.getReadWriteLock("bench:rwmix:warm:" + id).readLock();
        for (int i = 0; i < 1000; i++) {
            warm.lock();
            warm.unlock();
        }
        List<Long> waits = new ArrayList<>();
        long turns = 0, timeouts = 0;
        slot.setVolatile(shm, (READY + id) * 8, 1L);
        while ((long) slot.getVolatile(shm, START_NS * 8) == 0) {
            LockSupport.parkNanos(200_000);
        }
        long stop = (long) slot.getVolatile(shm, STOP_NS * 8);
        while (System.nanoTime() < stop) {
            long t0 = System.nanoTime();
            if (!lock.tryLock(Math.max(1, (stop - t0) / 1_000_000 + 1000), TimeUnit.MILLISECONDS)) {
                timeouts++;
                continue;
            }
            waits.add(System.nanoTime() - t0); // also after stop: a starved writer's only wait
            if (write) {
                if ((long) slot.getAndAdd(shm, RW_WRITER * 8, 1L) != 0
                        || (long) slot.getVolatile(shm, RW_READERS * 8) != 0) {
                    slot.getAndAdd(shm, VIOLATIONS * 8, 1L);
                }
            } else {
                slot.getAndAdd(shm, RW_READERS * 8, 1L);
                if ((long) slot.getVolatile(shm, RW_WRITER * 8) != 0) {
                    slot.getAndAdd(shm, VIOLATIONS * 8, 1L);
                }
            }
            turns++;
            Thread.sleep(holdUs / 1000, (int) (holdUs % 1000) * 1000);
            slot.getAndAdd(shm, (write ? RW_WRITER : RW_READERS) * 8, -1L);
            lock.unlock();
        }
        client.shutdown();
        StringBuilder sb = new StringBuilder();
        sb.append("{\"turns\": ").append(turns).append(", \"timeouts\": ").append(timeouts)
                .append(", \"write\": ").append(write ? 1 : 0).append(", \"wait_ns\": [");
        for (int i = 0; i < waits.size(); i++) {
            if (i > 0) {
                sb.append(',');
            }
            sb.append(waits.get(i));
        }
        return sb.append("]}").toString();
    }

    public static void main(String[] args) throws Exception {
        String out;
        if (args.length == 4 && args[0].equals("ping")) {
            out = ping(args[1], Long.parseLong(args[2]), Double.parseDouble(args[3]));
        } else if (args.length == 4 && args[0].equals("cycle")) {
            out = cycle(args[1], Long.parseLong(args[2]), Double.parseDouble(args[3]));
        } else if (args.length == 6 && args[0].equals("handoff")) {
            out = handoff(args[1], args[2], Integer.parseInt(args[3]), Long.parseLong(args[4]),
                    args[5].equals("1"));
        } else if (args.length == 6 && args[0].equals("rwmix")) {
            out = rwmix(args[1], args[2], Integer.parseInt(args[3]), Long.parseLong(args[4]),
                    args[5].equals("1"));
        } else if (args.length == 5 && args[0].equals("watchdog")) {
            out = watchdog(args[1], Integer.parseInt(args[2]), Long.parseLong(args[3]),
                    Double.parseDouble(args[4]));
        } else {
            System.err.println("usage: RedissonBench ping|cycle URL N MAX_S | handoff URL SHM ID HOLD_US POLITE"
                    + " | watchdog URL LOCKS LEASE_MS HOLD_S");
            System.exit(2);
            return;
        }
        System.out.println(out);
        System.out.flush();
        System.exit(0); // Redisson leaves non-daemon threads behind on some versions
    }
}
