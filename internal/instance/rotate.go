package instance

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"

	"example.com/myoperator/internal/contract"
	"example.com/myoperator/internal/instance/scram"
)

// Password rotation, the instance manager's part (docs/password-rotation.md).
//
// Every instance reads, once per Lease duration, the Secrets named in
// PASSWORD_SECRETS (a generated Secret's staging Secret, or a user-supplied
// Secret) and compares each password with the verifier its own server
// holds for the role (pg_authid; a replica has the primary's, replayed).
// The primary sets a password its server does not accept yet with ALTER
// ROLE and a SCRAM-SHA-256 verifier computed here, so the plaintext never
// reaches the server. Each instance reports, per Secret, the
// resourceVersion whose password its server accepts; the operator changes
// a generated Secret only once the primary and every ready replica report
// its staging Secret's. The report holds no password and nothing derived
// from one. (The replication role has none: replication.go.)

// passwordSource is a role and the Secret its password comes from.
type passwordSource struct{ role, secret string }

// passwordRotation is the rotation in this instance manager: its step of
// a turn (keepPasswords) and what the report says (acceptedPasswords). It
// reaches the server through the pgServer; pw is its state, made at its
// first step.
type passwordRotation struct {
	c    Config
	t    timing
	log  Logger
	kube *kube
	pg   *pgServer
	pw   *passwords
}

// passwords is the state of the rotation in this instance manager.
type passwords struct {
	secrets  corev1client.SecretInterface
	timeout  time.Duration
	sources  []passwordSource
	polled   time.Time
	accepted map[string]string // Secret name -> resourceVersion the local server accepts
	// checked is the server the accepted passwords were checked on: a
	// server started since (a rewind, a clone, a restart) is checked again
	// before anything is reported of it.
	checked *server
	failed  map[string]string // Secret name -> the last error logged, so it is logged once
}

// parsePasswordSources reads PASSWORD_SECRETS: role=Secret pairs.
func parsePasswordSources(s string) ([]passwordSource, error) {
	var out []passwordSource
	for pair := range strings.SplitSeq(s, ",") {
		if pair == "" {
			continue
		}
		role, secret, ok := strings.Cut(pair, "=")
		if !ok || role == "" || secret == "" {
			return nil, fmt.Errorf("PASSWORD_SECRETS: %q is not role=Secret", pair)
		}
		out = append(out, passwordSource{role, secret})
	}
	return out, nil
}

func newPasswords(c Config, secrets corev1client.SecretInterface, timeout time.Duration) (*passwords, error) {
	sources, err := parsePasswordSources(c.PasswordSecrets)
	if err != nil {
		return nil, err
	}
	return &passwords{secrets: secrets, timeout: timeout, sources: sources,
		accepted: map[string]string{}, failed: map[string]string{}}, nil
}

// keepPasswords is the rotation's step of a turn. It runs only when the
// server answers in its role and the turn's action left it alone.
func (r *passwordRotation) keepPasswords(ctx context.Context, ready bool) {
	if r.c.PasswordSecrets == "" || !ready || r.pg.role == stopped {
		return
	}
	if r.pw == nil {
		pw, err := newPasswords(r.c, r.kube.secrets, r.t.tick)
		if err != nil {
			r.log("password rotation disabled: %v", err)
			r.c.PasswordSecrets = ""
			return
		}
		r.pw = pw
	}
	if time.Since(r.pw.polled) < r.t.lease {
		return
	}
	r.pw.polled, r.pw.checked = time.Now(), r.pg.server
	// The whole step gets half a tick: a slow API server or a commit
	// waiting for the fence delays the primary's next renewal by at most
	// L/10, well within the fence's margin (a renewal every L/5, the
	// fence closing 3L/5 after the last one). Unfinished work is picked up
	// at the next poll: every step of it is idempotent.
	ctx, cancel := context.WithTimeout(ctx, r.t.tick/2)
	defer cancel()
	for _, src := range r.pw.sources {
		err := r.keepPassword(ctx, src)
		r.pw.logOnce(r.log, src, err)
	}
}

// keepPassword makes the role's password the Secret's, if the Secret
// exists (primary), and records whether the local server accepts it.
func (r *passwordRotation) keepPassword(ctx context.Context, src passwordSource) error {
	secret, err := r.pw.get(ctx, src.secret)
	if apierrors.IsNotFound(err) {
		delete(r.pw.accepted, src.secret)
		return nil
	}
	if err != nil {
		return err
	}
	password := string(secret.Data["password"])
	if !scram.Supported(password) {
		if password == r.c.Password {
			// What the container started with (a user-supplied Secret
			// that never changed since): not a change to apply.
			r.pw.accepted[src.secret] = secret.ResourceVersion
			return nil
		}
		r.pw.accepted[src.secret] = contract.PasswordRefused + secret.ResourceVersion
		return fmt.Errorf("the password in Secret %s: %w", src.secret, scram.ErrUnsupported)
	}
	ok, err := r.pg.accepts(ctx, src.role, password)
	if err != nil {
		return err
	}
	if !ok && r.pg.writable() {
		if err := r.pg.setPassword(ctx, src.role, password); err != nil {
			return err
		}
		r.log("set the password of role %s from Secret %s (resourceVersion %s)", src.role, src.secret, secret.ResourceVersion)
		ok = true
	}
	if !ok {
		delete(r.pw.accepted, src.secret)
		return nil
	}
	r.pw.accepted[src.secret] = secret.ResourceVersion
	return nil
}

// accepts tells whether the local server's verifier of role accepts
// password.
func (pg *pgServer) accepts(ctx context.Context, role, password string) (bool, error) {
	var stored *string
	err := pg.withServerFor(ctx, func(ctx context.Context, conn *pgx.Conn) error {
		err := conn.QueryRow(ctx, "SELECT rolpassword FROM pg_authid WHERE rolname = $1", role).Scan(&stored)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("role %s does not exist", role)
		}
		return err
	})
	return err == nil && stored != nil && scram.Matches(*stored, password), err
}

// setPassword sets role's password by its verifier. Like every statement
// of the instance manager's, it commits locally (synchronous_commit=local,
// connectTo) without waiting for the fence: a deposed primary may commit
// it alone, and it is lost with that primary's divergent WAL. Nothing
// relies on it until it is seen elsewhere: the rotation moves on only once
// every ready server reports that it accepts the password, and the
// primary sets a declared role's password again at its next pass.
func (pg *pgServer) setPassword(ctx context.Context, role, password string) error {
	verifier, err := scram.Verifier(password)
	if err != nil {
		return err
	}
	return pg.withServerFor(ctx, func(ctx context.Context, conn *pgx.Conn) error {
		return each(ctx, conn, []string{setPasswordSQL(role, verifier)})
	})
}

// setPasswordSQL sets role's password by its verifier (base64, digits,
// '$' and ':' only; quoted anyway).
func setPasswordSQL(role, verifier string) string {
	return "ALTER ROLE " + ident(role) + " PASSWORD " + literal(verifier)
}

// withServerFor is withServer bounded by one tick, so that a statement
// waiting for a lock cannot hold the HA loop.
func (pg *pgServer) withServerFor(ctx context.Context, f func(context.Context, *pgx.Conn) error) error {
	ctx, cancel := context.WithTimeout(ctx, pg.t.tick)
	defer cancel()
	return pg.withServer(ctx, f)
}

func (p *passwords) get(ctx context.Context, name string) (*secretData, error) {
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	s, err := p.secrets.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	return &secretData{Data: s.Data, ResourceVersion: s.ResourceVersion}, nil
}

type secretData struct {
	Data            map[string][]byte
	ResourceVersion string
}

// logOnce logs an error of a source when it differs from the last one
// logged, and its end.
func (p *passwords) logOnce(log Logger, src passwordSource, err error) {
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	if msg == p.failed[src.secret] {
		return
	}
	p.failed[src.secret] = msg
	if err != nil {
		log("password of role %s from Secret %s: %v", src.role, src.secret, err)
	}
}

// acceptedPasswords is what the report says: per Secret, the
// resourceVersion whose password the local server accepts.
func (r *passwordRotation) acceptedPasswords() map[string]string {
	if r.pw == nil || len(r.pw.accepted) == 0 || r.pg.role == stopped {
		return nil
	}
	if r.pw.checked != r.pg.server {
		r.pw.polled = time.Time{} // check the new server at the next turn
		return nil
	}
	return maps.Clone(r.pw.accepted)
}
