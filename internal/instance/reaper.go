package instance

import (
	"os"
	"os/exec"
	"os/signal"
	"sync"
	"syscall"
)

// reaper waits for every child of this process, as the first process of a
// container must: processes whose parent dies (a server killed with its
// backends, the shell of an archive command) become its children, and
// would stay zombies. The exit of a watched child is delivered to its
// watcher. It runs only while no exec.Cmd is waited for, since it takes
// every child's exit.
type reaper struct {
	sigs chan os.Signal
	done chan struct{}

	mu      sync.Mutex
	watched map[int]chan syscall.WaitStatus
}

func startReaper() *reaper {
	r := &reaper{sigs: make(chan os.Signal, 1), done: make(chan struct{}),
		watched: map[int]chan syscall.WaitStatus{}}
	signal.Notify(r.sigs, syscall.SIGCHLD)
	go r.loop()
	return r
}

func (r *reaper) loop() {
	for {
		select {
		case <-r.done:
			return
		case <-r.sigs:
		}
		// Signals coalesce: take every exit there is.
		for {
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
			if err != nil || pid <= 0 {
				break
			}
			r.mu.Lock()
			if ch, ok := r.watched[pid]; ok {
				ch <- ws
				delete(r.watched, pid)
			}
			r.mu.Unlock()
		}
	}
}

// start starts cmd and returns a channel that receives its exit. The lock
// keeps the loop from reaping it before it is watched. Every child is
// started on the main thread (reexec.go), whose end alone fires a
// parent-death signal.
func (r *reaper) start(cmd *exec.Cmd) (<-chan syscall.WaitStatus, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var err error
	onMainThread(func() { err = cmd.Start() })
	if err != nil {
		return nil, err
	}
	ch := make(chan syscall.WaitStatus, 1)
	r.watched[cmd.Process.Pid] = ch
	return ch, nil
}

// watch returns a channel that receives the exit of pid, a child this
// process did not start (one it adopted, reexec.go), and looks for exits
// at once: one may have come before the watch.
func (r *reaper) watch(pid int) <-chan syscall.WaitStatus {
	r.mu.Lock()
	defer r.mu.Unlock()
	ch := make(chan syscall.WaitStatus, 1)
	r.watched[pid] = ch
	select {
	case r.sigs <- syscall.SIGCHLD:
	default:
	}
	return ch
}

func (r *reaper) stop() {
	signal.Stop(r.sigs)
	close(r.done)
}
