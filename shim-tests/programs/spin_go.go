// Busy goroutines, each locked to its own OS thread, that report where their thread ended up,
// read from the thread's own /proc files.
//
// Go binaries are static: LD_PRELOAD cannot reach them, so only goset's housekeeper can place
// their threads. Run with GOMAXPROCS=2. Each busy goroutine spins, re-reading its thread's
// Cpus_allowed_list, until every busy thread is allowed exactly one CPU and no two share one,
// and has been for os.Args[3] seconds (default 0: a placement inherited by chance must not end
// the run before the housekeeper saw it), or os.Args[2] seconds (default 30) pass; then it
// reads the CPU it runs on (stat field 39); all stop at the first that saw the condition hold,
// and none ends before all read where they are (an ended thread frees its CPU, and the
// housekeeper may move another there between its last reads). os.Args[1] is the number of busy goroutines
// (default 2). main prints one line each:
//
//	busy <i> tid <tid> allowed <cpulist> processor <cpu>
//
// Exit status 0 when the condition was met, 3 on the deadline.
package main

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

func allowedList(tid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/self/task/%d/status", tid))
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "Cpus_allowed_list:") {
			return strings.TrimSpace(strings.TrimPrefix(line, "Cpus_allowed_list:"))
		}
	}
	return ""
}

func processor(tid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/self/task/%d/stat", tid))
	if err != nil {
		return -1
	}
	s := string(b)
	fields := strings.Fields(s[strings.LastIndex(s, ")")+1:])
	// fields[0] is field 3; field 39 is fields[36].
	if len(fields) < 37 {
		return -1
	}
	c, _ := strconv.Atoi(fields[36])
	return c
}

func main() {
	n := 2
	if len(os.Args) > 1 {
		n, _ = strconv.Atoi(os.Args[1])
	}
	seconds := func(i int, def float64) time.Duration {
		if len(os.Args) > i {
			if v, err := strconv.ParseFloat(os.Args[i], 64); err == nil {
				def = v
			}
		}
		return time.Duration(def * float64(time.Second))
	}
	deadline, hold := seconds(2, 30), seconds(3, 0)
	single := make([]int64, n)
	for i := range single {
		atomic.StoreInt64(&single[i], -1)
	}
	allPlaced := func() bool {
		for i := 0; i < n; i++ {
			c := atomic.LoadInt64(&single[i])
			if c < 0 {
				return false
			}
			for j := 0; j < i; j++ {
				if atomic.LoadInt64(&single[j]) == c {
					return false
				}
			}
		}
		return true
	}
	tids := make([]int, n)
	allowed := make([]string, n)
	procs := make([]int, n)
	var timedOut, done, recorded int32
	var wg sync.WaitGroup
	end := time.Now().Add(deadline)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			// The goroutine keeps this OS thread, so the thread's files are its own.
			runtime.LockOSThread()
			tid := syscall.Gettid()
			tids[i] = tid
			x := 0
			var since time.Time // when allPlaced() last became true
			for {
				// About a millisecond of computation between reads: a CPU-bound thread.
				for k := 0; k < 1000000; k++ {
					x += k
				}
				allowed[i] = allowedList(tid)
				c, err := strconv.Atoi(allowed[i])
				if err != nil {
					c = -1
				}
				atomic.StoreInt64(&single[i], int64(c))
				if atomic.LoadInt32(&done) != 0 {
					break
				}
				if !allPlaced() {
					since = time.Time{}
				} else if since.IsZero() {
					since = time.Now()
				}
				if !since.IsZero() && time.Since(since) >= hold {
					atomic.StoreInt32(&done, 1)
					break
				}
				if time.Now().After(end) {
					atomic.StoreInt32(&timedOut, 1)
					break
				}
			}
			procs[i] = processor(tid)
			atomic.AddInt32(&recorded, 1)
			for atomic.LoadInt32(&recorded) < int32(n) {
				x++
			}
			_ = x
		}(i)
	}
	wg.Wait()
	for i := 0; i < n; i++ {
		fmt.Printf("busy %d tid %d allowed %s processor %d\n", i, tids[i], allowed[i], procs[i])
	}
	if timedOut != 0 {
		os.Exit(3)
	}
}
