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
 * </pre>
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

    private static String cycle(String url, long n, double maxS) {
        RedissonClient client = open(url, 0);
        RLock lock = client.getLock("bench:cycle:redisson:" + ProcessHandle.current().pid());
        for (int i = 0; i < 2000; i++) { // warm-up (JIT)
            lock.lock();
            lock.unlock();
        }
        long t0 = System.nanoTime();
        long limit = t0 + (long) (maxS * 1e9);
        long done = 0;
        while (done < n) {
            lock.lock(); // no lease given: the watchdog keeps it, as users mostly call it
            lock.unlock();
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
            VIOLATIONS = 5, START_NS = 6, READY = 8;

    private static String handoff(String url, String shmPath, int id, long holdUs, boolean polite)
            throws IOException, InterruptedException {
        MappedByteBuffer shm;
        try (RandomAccessFile f = new RandomAccessFile(shmPath, "rw")) {
            shm = f.getChannel().map(FileChannel.MapMode.READ_WRITE, 0, 64 * 8);
        }
        shm.order(ByteOrder.LITTLE_ENDIAN);
        RedissonClient client = open(url, 0);
        RLock lock = client.getLock("bench:handoff");
        // Warm the JIT on another name so the first turns are not interpreted.
        RLock warm = client.getLock("bench:handoff:warm:" + id);
        for (int i = 0; i < 1000; i++) {
            warm.lock();
            warm.unlock();
        }
        List<Long> lat = new ArrayList<>();
        long turns = 0, same = 0;
        shm.putLong((READY + id) * 8, 1);
        while (shm.getLong(START_NS * 8) == 0) {
            LockSupport.parkNanos(200_000);
        }
        long stop = shm.getLong(STOP_NS * 8);
        while (System.nanoTime() < stop) {
            if (!lock.tryLock(30, TimeUnit.SECONDS)) {
                throw new IllegalStateException("tryLock timed out after 30 s");
            }
            long tAcq = System.nanoTime();
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
            lock.unlock();
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

    public static void main(String[] args) throws Exception {
        String out;
        if (args.length == 4 && args[0].equals("ping")) {
            out = ping(args[1], Long.parseLong(args[2]), Double.parseDouble(args[3]));
        } else if (args.length == 4 && args[0].equals("cycle")) {
            out = cycle(args[1], Long.parseLong(args[2]), Double.parseDouble(args[3]));
        } else if (args.length == 6 && args[0].equals("handoff")) {
            out = handoff(args[1], args[2], Integer.parseInt(args[3]), Long.parseLong(args[4]),
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
