package bench

import (
	"fmt"
	"os"
	"runtime/metrics"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// cpuTimes is the CPU time used so far by this process (the operator and
// the harness), the part of it the Go runtime estimates its garbage
// collector took, and the CPU time of its child processes that are still
// running (etcd and kube-apiserver); and, machine-wide, the CPU time every
// process used (busy) and the time the hypervisor gave this machine's
// CPUs to others while they had work (stolen).
type cpuTimes struct {
	self, gc, children time.Duration
	busy, stolen       time.Duration
}

func readCPU() cpuTimes {
	var t cpuTimes
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err == nil {
		t.self = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	gc := []metrics.Sample{{Name: "/cpu/classes/gc/total:cpu-seconds"}}
	if metrics.Read(gc); gc[0].Value.Kind() == metrics.KindFloat64 {
		t.gc = time.Duration(gc[0].Value.Float64() * float64(time.Second))
	}
	t.busy, t.stolen = machineCPU()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return t
	}
	self := os.Getpid()
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		ppid, cpu, ok := procStat(pid)
		if ok && ppid == self {
			t.children += cpu
		}
	}
	return t
}

// clockTicks is USER_HZ, 100 on every Linux this runs on.
const clockTicks = 100

// procStat reads the parent and the user+system CPU time of a process from
// /proc/<pid>/stat.
func procStat(pid int) (ppid int, cpu time.Duration, ok bool) {
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, false
	}
	// The command name, field 2, is in parentheses and may contain spaces.
	i := strings.LastIndexByte(string(raw), ')')
	if i < 0 {
		return 0, 0, false
	}
	f := strings.Fields(string(raw[i+1:]))
	// f[0] is field 3 (state): ppid is field 4, utime 14, stime 15.
	if len(f) < 13 {
		return 0, 0, false
	}
	ppid, err1 := strconv.Atoi(f[1])
	utime, err2 := strconv.ParseInt(f[11], 10, 64)
	stime, err3 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil {
		return 0, 0, false
	}
	return ppid, time.Duration(utime+stime) * time.Second / clockTicks, true
}

// machineCPU reads the busy and the stolen CPU time of the whole machine
// from /proc/stat.
func machineCPU() (busy, stolen time.Duration) {
	raw, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0
	}
	line, _, _ := strings.Cut(string(raw), "\n")
	f := strings.Fields(line)
	// cpu user nice system idle iowait irq softirq steal ...
	if len(f) < 9 || f[0] != "cpu" {
		return 0, 0
	}
	var ticks [9]int64
	for i := 1; i < 9; i++ {
		ticks[i], _ = strconv.ParseInt(f[i], 10, 64)
	}
	busy = time.Duration(ticks[1]+ticks[2]+ticks[3]+ticks[6]+ticks[7]) * time.Second / clockTicks
	return busy, time.Duration(ticks[8]) * time.Second / clockTicks
}

func (t cpuTimes) sub(u cpuTimes) cpuTimes {
	return cpuTimes{self: t.self - u.self, gc: t.gc - u.gc, children: t.children - u.children,
		busy: t.busy - u.busy, stolen: t.stolen - u.stolen}
}

// other is the CPU time of every process but this one and its children.
func (t cpuTimes) other() time.Duration { return max(0, t.busy-t.self-t.children) }

// cpuSplit is CPU time over a phase, in seconds: this process's, of which
// its garbage collector's, and etcd's and kube-apiserver's.
type cpuSplit struct {
	Process      float64 `json:"process_seconds"`
	GC           float64 `json:"gc_seconds"`
	ControlPlane float64 `json:"control_plane_seconds"`
}

func (t cpuTimes) split() cpuSplit {
	return cpuSplit{Process: t.self.Seconds(), GC: t.gc.Seconds(), ControlPlane: t.children.Seconds()}
}

func (c cpuSplit) String() string {
	return fmt.Sprintf("%.1f CPU-s (collector %.1f), etcd+apiserver %.1f CPU-s", c.Process, c.GC, c.ControlPlane)
}
