// go_spin WORKERS SECONDS: a pure Go program (built without cgo: static, out of the shim's
// reach, so the housekeeper places its threads) whose WORKERS goroutines spin for SECONDS
// without a system call, beside the runtime's own threads (sysmon wakes every few
// milliseconds, idle Ms sleep). Prints "spun WORKERS" to stderr.
package main

import (
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"
)

func main() {
	workers, err1 := strconv.Atoi(os.Args[1])
	seconds, err2 := strconv.ParseFloat(os.Args[2], 64)
	if err1 != nil || err2 != nil || workers < 1 {
		fmt.Fprintln(os.Stderr, "usage: go_spin WORKERS SECONDS")
		os.Exit(100)
	}
	end := time.Now().Add(time.Duration(seconds * float64(time.Second)))
	sums := make([]uint64, workers)
	var wg sync.WaitGroup
	for i := range sums {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			for time.Now().Before(end) {
				for k := uint64(0); k < 100000; k++ {
					sums[i] += k
				}
			}
		}(i)
	}
	wg.Wait()
	fmt.Fprintln(os.Stderr, "spun", len(sums))
}
