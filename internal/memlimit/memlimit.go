package memlimit

import (
	"os"
	"runtime/debug"
	"strconv"
	"strings"
)

// CgroupMemoryFiles hold the container's memory limit: cgroup v2, then v1.
var CgroupMemoryFiles = []string{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}

// SoftMemoryLimit sets the Go runtime's soft memory limit to 90% of the
// container's memory limit read from files (CgroupMemoryFiles), so that
// the garbage collector works harder as the heap nears the limit instead
// of letting it grow to twice the live heap and the kernel kill the
// process. Without a limit, or with GOMEMLIMIT set, it changes nothing.
// It returns the soft limit it set, 0 if none.
func SoftMemoryLimit(files []string) int64 {
	if os.Getenv("GOMEMLIMIT") != "" {
		return 0
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		if err != nil || n <= 0 || n >= 1<<60 { // "max", or v1's "unlimited" (near MaxInt64)
			return 0
		}
		soft := n / 10 * 9
		debug.SetMemoryLimit(soft)
		return soft
	}
	return 0
}
