package pooler

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"example.com/myoperator/internal/contract"
)

// PgBouncer's pause: by hand (contract.Pooler.Paused), and through
// switchovers, which the clients then do not see: the pooler manager's
// half of the protocol in internal/contract (pooler.go). While the
// configuration says PauseOnSwitchover, it keeps a control connection to
// the primary, and when the primary says it hands over, it PAUSEs
// PgBouncer, says so, and RESUMEs it once a new primary answers through
// Host.

// pauses is PgBouncer's pause as the pooler manager set it: by hand, for
// a switchover, or both (then it resumes when neither holds it).
type pauses struct {
	mu                 sync.Mutex
	byHand, switchover bool
	// count and total: the switchover pauses so far, and their length.
	count int
	total time.Duration
}

// hold pauses PgBouncer (pid) by hand while want, with SIGUSR1 (PAUSE,
// which returns at once: running transactions finish first), and resumes
// it with SIGUSR2 when want ends, unless a switchover holds it.
func (ps *pauses) hold(pid *os.Process, want bool, log func(string, ...any)) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if want == ps.byHand {
		return
	}
	ps.byHand = want
	switch {
	case ps.switchover:
		log("paused by hand: %v (a switchover holds PgBouncer paused now)", want)
	case want:
		_ = pid.Signal(syscall.SIGUSR1)
		log("pausing PgBouncer by hand (pgbouncer.paused): running transactions finish, new ones wait")
	default:
		_ = pid.Signal(syscall.SIGUSR2)
		log("resuming PgBouncer: pgbouncer.paused is false")
	}
}

// ConsoleUser is the admin_users entry the pooler manager reads
// PgBouncer's console as (metrics) and pauses it with. Its password is
// made at every start and kept in PgBouncer's auth file alone, in the
// pod's own volume; the console is reached over the socket in RunDir.
const ConsoleUser = "mydatabase_console"

const (
	// pauseLimit bounds a pause: past it, PgBouncer resumes onto
	// whatever Host leads to, new primary or not.
	pauseLimit = 30 * time.Second
	// calledOff: a primary that waits for the poolers says so again on
	// every turn (a fifth of its Lease); this long without a word while
	// it still serves, and the switchover was called off.
	calledOff = 10 * time.Second
	// retry is how long the follower waits before it connects again.
	retry = time.Second
)

// console is a connection to PgBouncer's admin console, which speaks only
// the simple query protocol.
func (c Config) console(ctx context.Context) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig(fmt.Sprintf("host=%s port=%d dbname=pgbouncer user=%s sslmode=disable", c.RunDir, c.Port, ConsoleUser))
	if err != nil {
		return nil, err
	}
	cfg.Password = c.consolePassword
	cfg.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	return pgx.ConnectConfig(ctx, cfg)
}

// onConsole runs command on PgBouncer's console.
func (c Config) onConsole(ctx context.Context, command string) error {
	conn, err := c.console(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close(context.Background()) }()
	_, err = conn.Exec(ctx, command)
	return err
}

// server connects to the servers as Host leads, as contract.PoolerRole,
// with the pooler's client certificate, and reports which server answered
// and whether it takes writes.
func (c Config) server(ctx context.Context, p contract.Pooler, app string) (conn *pgx.Conn, at string, writable bool, err error) {
	tls := func(name string) string { return filepath.Join(c.RunDir, "tls", name) }
	conn, err = pgx.Connect(ctx, fmt.Sprintf(
		"host=%s port=%d dbname=postgres user=%s application_name='%s' sslmode=verify-full sslrootcert=%s sslcert=%s sslkey=%s connect_timeout=5",
		p.Host, p.Port, contract.PoolerRole, app, tls(contract.PoolerServerCAKey), tls(contract.PoolerClientCertKey), tls(contract.PoolerClientKeyKey)))
	if err != nil {
		return nil, "", false, err
	}
	var recovery bool
	if err := conn.QueryRow(ctx, "SELECT inet_server_addr() || ':' || inet_server_port(), pg_is_in_recovery()").Scan(&at, &recovery); err != nil {
		_ = conn.Close(context.Background())
		return nil, "", false, err
	}
	return conn, at, !recovery, nil
}

// follow runs the pooler manager's half of the protocol until ctx ends.
func (c Config) follow(ctx context.Context, log func(string, ...any)) {
	var last string // the last error logged, to log each once
	for ctx.Err() == nil {
		err := c.followOnce(ctx, log)
		if err != nil && err.Error() != last && ctx.Err() == nil {
			log("following switchovers: %v", err)
		}
		last = fmt.Sprint(err)
		select {
		case <-ctx.Done():
		case <-time.After(retry):
		}
	}
}

// followOnce keeps one control connection to the primary, until it ends
// or the configuration stops asking for it, and carries out the pause of
// any switchover announced on it.
func (c Config) followOnce(ctx context.Context, log func(string, ...any)) error {
	p, err := c.pooler()
	if err != nil || !p.PauseOnSwitchover {
		return err
	}
	conn, at, writable, err := c.server(ctx, p, contract.PoolerApp(p.ID, false))
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close(context.Background()) }()
	if !writable {
		return fmt.Errorf("%s leads to %s, which is in recovery", p.Host, at)
	}
	if _, err := conn.Exec(ctx, "LISTEN "+contract.PoolerSwitchoverChannel); err != nil {
		return err
	}
	for {
		wait, cancel := context.WithTimeout(ctx, 10*time.Second)
		n, err := conn.WaitForNotification(wait)
		cancel()
		switch {
		case err == nil:
			c.pauseThrough(ctx, conn, p, at, n.Payload, log)
			return nil
		case ctx.Err() != nil || conn.IsClosed():
			return err
		}
		// A quiet interval: see whether the configuration still asks.
		if p, err := c.pooler(); err != nil || !p.PauseOnSwitchover {
			return err
		}
	}
}

// pauseThrough pauses PgBouncer for the switchover of the primary at (on
// conn) to target, and resumes it on the next primary, pauseLimit at most
// after it began.
func (c Config) pauseThrough(ctx context.Context, conn *pgx.Conn, p contract.Pooler, at, target string, log func(string, ...any)) {
	began := time.Now()
	deadline := began.Add(pauseLimit)
	c.pauses.mu.Lock()
	byHand := c.pauses.byHand
	c.pauses.switchover = true
	c.pauses.mu.Unlock()
	var err error
	what := fmt.Sprintf("the primary at %s hands over to %s", at, target)
	if target == "" {
		what = fmt.Sprintf("the primary at %s stops, an election follows", at)
	}
	if byHand {
		log("%s: PgBouncer is paused by hand already", what)
	} else {
		log("%s: pausing PgBouncer", what)
		pause, cancel := context.WithDeadline(ctx, deadline)
		err = c.onConsole(pause, "PAUSE")
		cancel()
	}
	if err == nil {
		_, err = conn.Exec(ctx, "SELECT set_config('application_name', $1, false)", contract.PoolerApp(p.ID, true))
	}
	if err != nil {
		c.resume(ctx, log, began, fmt.Sprintf("pausing failed: %v", err))
		return
	}
	log("PgBouncer paused in %s", time.Since(began).Round(time.Millisecond))
	// The old primary goes: its server stops, and the connection with it.
	for !conn.IsClosed() {
		wait, cancel := context.WithTimeout(ctx, calledOff)
		_, err := conn.WaitForNotification(wait)
		cancel()
		if ctx.Err() != nil {
			c.resume(context.Background(), log, began, "the pooler manager stops")
			return
		}
		if errors.Is(err, context.DeadlineExceeded) && !conn.IsClosed() {
			c.resume(ctx, log, began, fmt.Sprintf("the primary at %s stopped asking, the switchover was called off", at))
			return
		}
	}
	for time.Now().Before(deadline) && ctx.Err() == nil {
		try, cancel := context.WithTimeout(ctx, time.Second)
		next, now, writable, err := c.server(try, p, contract.PoolerProbeApp)
		cancel()
		if err == nil {
			_ = next.Close(context.Background())
			if writable && now != at {
				c.resume(ctx, log, began, "a new primary at "+now+" takes writes")
				return
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
	c.resume(context.Background(), log, began, fmt.Sprintf("no new primary within %s: PgBouncer connects wherever %s leads", pauseLimit, p.Host))
}

// resume ends a switchover's pause, saying why: RESUMEs PgBouncer, unless
// it is paused by hand.
func (c Config) resume(ctx context.Context, log func(string, ...any), began time.Time, why string) {
	c.pauses.mu.Lock()
	defer c.pauses.mu.Unlock()
	c.pauses.switchover = false
	c.pauses.count++
	c.pauses.total += time.Since(began)
	if c.pauses.byHand {
		log("the switchover's pause ends after %s (%s); PgBouncer stays paused by hand", time.Since(began).Round(time.Millisecond), why)
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := c.onConsole(ctx, "RESUME"); err != nil {
		log("resuming PgBouncer: %v", err)
		return
	}
	log("resumed PgBouncer after a pause of %s: %s", time.Since(began).Round(time.Millisecond), why)
}
