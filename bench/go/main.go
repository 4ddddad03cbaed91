// redsync-bench: the Go peer of the watchlock Redlock benchmarks (bench/bench.py,
// scenario "redlock"). redsync (github.com/go-redsync/redsync/v4) over go-redis v9,
// one pool per master, with redsync's default retry policy (32 tries, 50-250 ms
// apart), as users get it. One mode per invocation; prints one JSON object.
//
//	redsync-bench cycle   "URL1 URL2 ..." N MAX_S
//	redsync-bench handoff "URL1 URL2 ..." SHM ID HOLD_US POLITE
//
// The shared-memory layout of handoff is bench/c/wlbench.c's (slots of int64).
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	goredislib "github.com/redis/go-redis/v9"
)

const leaseS = 10

// Slots of the shared file (same numbers as wlbench.c).
const (
	shmReleaseNs  = 0
	shmTurns      = 1
	shmLastHolder = 2
	shmStopNs     = 3
	shmInCS       = 4
	shmViolations = 5
	shmStartNs    = 6
	shmOutOfOrder = 7
	shmReady      = 8
	shmArrival    = 40
	shmSlots      = 64
)

func monoNs() int64 {
	var ts syscall.Timespec
	// CLOCK_MONOTONIC = 1, the clock of the C, Python and Java workers.
	syscall.Syscall(syscall.SYS_CLOCK_GETTIME, 1, uintptr(unsafe.Pointer(&ts)), 0)
	return ts.Sec*1e9 + ts.Nsec
}

func newMutex(urls string, name string) *redsync.Mutex {
	var pools []redis.Pool
	for _, u := range strings.Fields(urls) {
		opt, err := goredislib.ParseURL(u)
		if err != nil {
			fail(err)
		}
		pools = append(pools, goredis.NewPool(goredislib.NewClient(opt)))
	}
	rs := redsync.New(pools...)
	return rs.NewMutex(name, redsync.WithExpiry(leaseS*time.Second))
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "redsync-bench:", err)
	os.Exit(1)
}

func cycle(urls string, n int, maxS float64) map[string]any {
	m := newMutex(urls, fmt.Sprintf("bench:cycle:redsync:%d", os.Getpid()))
	ctx := context.Background()
	for i := 0; i < 100 && i < n; i++ {
		if err := m.LockContext(ctx); err != nil {
			fail(err)
		}
		if _, err := m.UnlockContext(ctx); err != nil {
			fail(err)
		}
	}
	t0 := time.Now()
	limit := t0.Add(time.Duration(maxS * float64(time.Second)))
	done := 0
	for done < n {
		if err := m.LockContext(ctx); err != nil {
			fail(fmt.Errorf("lock on a free name: %w", err))
		}
		if _, err := m.UnlockContext(ctx); err != nil {
			fail(err)
		}
		done++
		if done&15 == 0 && time.Now().After(limit) {
			break
		}
	}
	return map[string]any{"ops": done, "seconds": time.Since(t0).Seconds()}
}

func handoff(urls, shmPath string, id int, holdUs int64, polite bool) map[string]any {
	f, err := os.OpenFile(shmPath, os.O_RDWR, 0)
	if err != nil {
		fail(err)
	}
	mem, err := syscall.Mmap(int(f.Fd()), 0, shmSlots*8, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		fail(err)
	}
	f.Close()
	slot := func(i int) *int64 { return (*int64)(unsafe.Pointer(&mem[i*8])) }
	m := newMutex(urls, "bench:handoff")
	ctx := context.Background()
	lat := []int64{}
	turns, same := 0, 0
	atomic.StoreInt64(slot(shmReady+id), 1)
	for atomic.LoadInt64(slot(shmStartNs)) == 0 {
		time.Sleep(200 * time.Microsecond)
	}
	stop := atomic.LoadInt64(slot(shmStopNs))
	for monoNs() < stop {
		// redsync gives up after its 32 tries (a few seconds): try again, as a
		// caller that must have the lock does.
		arrived := monoNs()
		atomic.StoreInt64(slot(shmArrival+id), arrived)
		for {
			err := m.LockContext(ctx)
			if err == nil {
				break
			}
			if monoNs() > stop+30e9 {
				fail(fmt.Errorf("no lock in 30 s: %w", err))
			}
		}
		tAcq := monoNs()
		atomic.StoreInt64(slot(shmArrival+id), 0)
		for i := 0; i < 8; i++ { // granted while an earlier arrival still waits
			if o := atomic.LoadInt64(slot(shmArrival + i)); i != id && o != 0 && o < arrived {
				atomic.AddInt64(slot(shmOutOfOrder), 1)
				break
			}
		}
		if atomic.SwapInt64(slot(shmInCS), 1) != 0 {
			atomic.AddInt64(slot(shmViolations), 1)
		}
		rel := atomic.LoadInt64(slot(shmReleaseNs))
		prev := atomic.LoadInt64(slot(shmLastHolder))
		if rel != 0 && tAcq < stop {
			if prev != int64(id+1) {
				lat = append(lat, tAcq-rel)
			} else {
				same++
			}
		}
		turns++
		myTurn := atomic.AddInt64(slot(shmTurns), 1)
		atomic.StoreInt64(slot(shmLastHolder), int64(id+1))
		time.Sleep(time.Duration(holdUs) * time.Microsecond)
		atomic.StoreInt64(slot(shmInCS), 0)
		atomic.StoreInt64(slot(shmReleaseNs), monoNs())
		if _, err := m.UnlockContext(ctx); err != nil {
			fail(err)
		}
		for polite && atomic.LoadInt64(slot(shmTurns)) == myTurn && monoNs() < stop {
			time.Sleep(50 * time.Microsecond)
		}
	}
	return map[string]any{"turns": turns, "same_holder": same, "handoff_ns": lat}
}

func main() {
	a := os.Args[1:]
	var out map[string]any
	switch {
	case len(a) == 4 && a[0] == "cycle":
		n, _ := strconv.Atoi(a[2])
		maxS, _ := strconv.ParseFloat(a[3], 64)
		out = cycle(a[1], n, maxS)
	case len(a) == 6 && a[0] == "handoff":
		id, _ := strconv.Atoi(a[3])
		hold, _ := strconv.ParseInt(a[4], 10, 64)
		out = handoff(a[1], a[2], id, hold, a[5] == "1")
	case len(a) == 1 && a[0] == "probe":
		out = map[string]any{"ok": true}
	default:
		fmt.Fprintln(os.Stderr, "usage: redsync-bench cycle URLS N MAX_S | handoff URLS SHM ID HOLD_US POLITE | probe")
		os.Exit(2)
	}
	b, _ := json.Marshal(out)
	fmt.Println(string(b))
}
