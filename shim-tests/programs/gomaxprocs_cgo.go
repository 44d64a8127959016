// gomaxprocs_cgo: a Go program built with cgo, so that it is dynamically linked and its
// threads are created with pthread_create (under the shim, each on a slot). Go reads the
// affinity mask with a raw system call when it starts, which no preload can answer: the
// shim's main thread is on its one CPU by then, so GOMAXPROCS comes from the environment
// (goset-run sets it to -n). Prints one line: gomaxprocs=<runtime.GOMAXPROCS(0)>
// numcpu=<runtime.NumCPU()> pid=<C getpid()>.
package main

// #include <unistd.h>
import "C"

import (
	"fmt"
	"runtime"
)

func main() {
	fmt.Printf("gomaxprocs=%d numcpu=%d pid=%d\n", runtime.GOMAXPROCS(0), runtime.NumCPU(), int(C.getpid()))
}
