package memlimit

import (
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"testing"
)

func TestSoftMemoryLimit(t *testing.T) {
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(-1))
	dir := t.TempDir()
	file := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	limited, unlimited, v1Unlimited := file("limited", "1073741824\n"), file("max", "max\n"), file("v1", "9223372036854771712\n")

	t.Setenv("GOMEMLIMIT", "")
	debug.SetMemoryLimit(math.MaxInt64)
	if got := SoftMemoryLimit([]string{filepath.Join(dir, "absent"), limited}); got != 1073741824/10*9 || debug.SetMemoryLimit(-1) != got {
		t.Errorf("a 1 GiB container: soft limit %d (runtime: %d), want 90%%", got, debug.SetMemoryLimit(-1))
	}
	debug.SetMemoryLimit(math.MaxInt64)
	for _, f := range []string{unlimited, v1Unlimited, filepath.Join(dir, "absent")} {
		if got := SoftMemoryLimit([]string{f}); got != 0 || debug.SetMemoryLimit(-1) != math.MaxInt64 {
			t.Errorf("%s: soft limit %d set without a container limit", filepath.Base(f), got)
		}
	}
	t.Setenv("GOMEMLIMIT", "100MiB")
	if got := SoftMemoryLimit([]string{limited}); got != 0 || debug.SetMemoryLimit(-1) != math.MaxInt64 {
		t.Errorf("GOMEMLIMIT set: soft limit %d set over it", got)
	}
}
