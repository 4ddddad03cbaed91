// node-redlock peer of the watchlock Redlock benchmarks (bench/bench.py, scenario
// "redlock"): redlock 4 (npm) over ioredis, one client per master, retrying
// every 200 ms with up to 200 ms jitter (its defaults) until it has the lock.
// One mode per invocation; prints one JSON object.
//
//   node redlock_bench.js cycle   "URL1 URL2 ..." N MAX_S
//   node redlock_bench.js handoff "URL1 URL2 ..." SHM ID HOLD_US POLITE
//
// handoff uses bench/c/wlbench.c's shared file (int64 slots). Node has no
// mmap, so the slots are read and written with pread/pwrite on the same file:
// the page cache is shared with the other workers' mappings.
'use strict';
const fs = require('fs');
const Redis = require('ioredis');
const Redlock = require('redlock');

const LEASE_MS = 10000;
const RELEASE_NS = 0, TURNS = 1, LAST_HOLDER = 2, STOP_NS = 3, IN_CS = 4, VIOLATIONS = 5, START_NS = 6,
  OUT_OF_ORDER = 7, READY = 8, ARRIVAL = 40;

const now = () => process.hrtime.bigint(); // CLOCK_MONOTONIC on Linux

function clients(urls) {
  return urls.split(/\s+/).filter(Boolean).map((u) => new Redis(u, { lazyConnect: false }));
}

function makeLock(urls) {
  const cs = clients(urls);
  const redlock = new Redlock(cs, { retryCount: -1 });
  redlock.on('clientError', () => {});
  return { redlock, cs };
}

async function cycle(urls, n, maxS) {
  const { redlock, cs } = makeLock(urls);
  const name = `bench:cycle:node-redlock:${process.pid}`;
  for (let i = 0; i < Math.min(100, n); i++) {
    const l = await redlock.lock(name, LEASE_MS);
    await l.unlock();
  }
  const t0 = now();
  const limit = t0 + BigInt(Math.round(maxS * 1e9));
  let done = 0;
  while (done < n) {
    const l = await redlock.lock(name, LEASE_MS);
    await l.unlock();
    done++;
    if ((done & 15) === 0 && now() > limit) break;
  }
  const seconds = Number(now() - t0) / 1e9;
  cs.forEach((c) => c.disconnect());
  return { ops: done, seconds };
}

function shm(path) {
  const fd = fs.openSync(path, 'r+');
  const b = Buffer.alloc(8);
  return {
    get(i) { fs.readSync(fd, b, 0, 8, i * 8); return b.readBigInt64LE(0); },
    put(i, v) { b.writeBigInt64LE(BigInt(v), 0); fs.writeSync(fd, b, 0, 8, i * 8); },
  };
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function handoff(urls, path, id, holdUs, polite) {
  const s = shm(path);
  const { redlock, cs } = makeLock(urls);
  const lat = [];
  let turns = 0, same = 0;
  s.put(READY + id, 1);
  while (s.get(START_NS) === 0n) await sleep(1);
  const stop = s.get(STOP_NS);
  while (now() < stop) {
    const arrived = now();
    s.put(ARRIVAL + id, arrived);
    const l = await redlock.lock('bench:handoff', LEASE_MS);
    const tAcq = now();
    s.put(ARRIVAL + id, 0);
    for (let i = 0; i < 8; i++) { // granted while an earlier arrival still waits
      const o = s.get(ARRIVAL + i);
      if (i !== id && o !== 0n && o < arrived) { s.put(OUT_OF_ORDER, s.get(OUT_OF_ORDER) + 1n); break; }
    }
    if (s.get(IN_CS) !== 0n) s.put(VIOLATIONS, s.get(VIOLATIONS) + 1n);
    s.put(IN_CS, 1);
    const rel = s.get(RELEASE_NS), prev = s.get(LAST_HOLDER);
    if (rel !== 0n && tAcq < stop) {
      if (prev !== BigInt(id + 1)) lat.push(Number(tAcq - rel)); else same++;
    }
    turns++;
    const myTurn = s.get(TURNS) + 1n;
    s.put(TURNS, myTurn);
    s.put(LAST_HOLDER, id + 1);
    await sleep(holdUs / 1000); // setTimeout's 1 ms granularity: the hold is >= 1 ms
    s.put(IN_CS, 0);
    s.put(RELEASE_NS, now());
    await l.unlock();
    while (polite && s.get(TURNS) === myTurn && now() < stop) await sleep(0.05);
  }
  cs.forEach((c) => c.disconnect());
  return { turns, same_holder: same, handoff_ns: lat };
}

async function main(a) {
  let out;
  if (a[0] === 'cycle' && a.length === 4) out = await cycle(a[1], +a[2], +a[3]);
  else if (a[0] === 'handoff' && a.length === 6) out = await handoff(a[1], a[2], +a[3], +a[4], a[5] === '1');
  else if (a[0] === 'probe') out = { redlock: require('redlock/package.json').version };
  else {
    process.stderr.write('usage: node redlock_bench.js cycle URLS N MAX_S | handoff URLS SHM ID HOLD_US POLITE\n');
    process.exit(2);
  }
  process.stdout.write(JSON.stringify(out) + '\n');
}

main(process.argv.slice(2)).then(() => process.exit(0), (e) => {
  process.stderr.write(`node-redlock bench: ${e && e.stack || e}\n`);
  process.exit(1);
});
