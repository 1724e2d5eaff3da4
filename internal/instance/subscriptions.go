package instance

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"example.com/myoperator/internal/contract"
)

// Declared subscriptions (spec.databases[].subscriptions): the primary
// keeps each one in its database, connected to the publisher its Secret
// describes (contract.Subscription). The password never enters
// PostgreSQL's catalog, which every replica and every backup holds: the
// subscription's connection names a passfile (and the publisher's CA) that
// the instance manager writes in the socket directory, the same path on
// every instance, so that a subscription keeps working on a new primary
// once its instance manager has written them (its worker retries until
// then).

// pgSubscription is a subscription as a database has it.
type pgSubscription struct {
	conninfo     string
	publications []string // sorted
	enabled      bool
}

// subscriptionPlan is the statements that make a database's subscription
// (have, nil when there is none) the declared one, connecting with
// conninfo. failover is whether this server can make the publisher's slot
// a failover slot (PostgreSQL 17).
func subscriptionPlan(want contract.Subscription, conninfo string, have *pgSubscription, failover bool) []string {
	name := ident(want.Name)
	publications := slices.Sorted(slices.Values(want.Publications))
	quoted := make([]string, len(publications))
	for i, p := range publications {
		quoted[i] = ident(p)
	}
	switch {
	case want.Absent && have == nil:
		return nil
	case want.Absent:
		return []string{"DROP SUBSCRIPTION " + name}
	case have == nil:
		// The apply worker commits as every session does, through the
		// fence (and the quorum, with synchronous replication): a change
		// is confirmed to the publisher only once this server may
		// acknowledge it. PostgreSQL's default for subscriptions, off,
		// would confirm changes a deposed primary applied.
		with := "enabled = " + boolean(want.Enabled) + ", copy_data = " + boolean(want.CopyData) + ", synchronous_commit = 'on'"
		if failover && want.Failover {
			with += ", failover = true"
		}
		return []string{"CREATE SUBSCRIPTION " + name + " CONNECTION " + literal(conninfo) +
			" PUBLICATION " + strings.Join(quoted, ", ") + " WITH (" + with + ")"}
	}
	var plan []string
	if have.conninfo != conninfo {
		plan = append(plan, "ALTER SUBSCRIPTION "+name+" CONNECTION "+literal(conninfo))
	}
	if want.Enabled && !have.enabled {
		plan = append(plan, "ALTER SUBSCRIPTION "+name+" ENABLE")
	}
	if !slices.Equal(have.publications, publications) {
		// A disabled subscription cannot fetch the new tables now; it
		// does when enabled and refreshed.
		plan = append(plan, "ALTER SUBSCRIPTION "+name+" SET PUBLICATION "+strings.Join(quoted, ", ")+" WITH (refresh = "+boolean(want.Enabled)+")")
	}
	if !want.Enabled && have.enabled {
		plan = append(plan, "ALTER SUBSCRIPTION "+name+" DISABLE")
	}
	return plan
}

// dropSubscriptionAloneSQL drops a subscription and leaves its slot on
// the publisher alone.
func dropSubscriptionAloneSQL(subscription string) []string {
	name := ident(subscription)
	return []string{"ALTER SUBSCRIPTION " + name + " DISABLE", "ALTER SUBSCRIPTION " + name + " SET (slot_name = NONE)", "DROP SUBSCRIPTION " + name}
}

// publisher is a subscription's connection as its Secret describes it.
type publisher struct {
	keywords map[string]string // libpq's, without the password
	password string
	ca       []byte
}

// publisherOf reads the connection of a Secret's data: the URI, the
// password (the Secret's, else the URI's) and the CA; database, when
// set, in place of the URI's.
func publisherOf(data map[string][]byte, database string) (publisher, error) {
	raw := string(data[contract.SubscriptionURIKey])
	if raw == "" {
		return publisher{}, fmt.Errorf("it has no %q key", contract.SubscriptionURIKey)
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "postgresql" && u.Scheme != "postgres") || u.Hostname() == "" {
		return publisher{}, fmt.Errorf("its %q is not a postgresql://host URI", contract.SubscriptionURIKey)
	}
	p := publisher{keywords: map[string]string{"host": u.Hostname()}, ca: data[contract.SubscriptionCAKey]}
	if port := u.Port(); port != "" {
		p.keywords["port"] = port
	}
	if u.User != nil {
		p.keywords["user"] = u.User.Username()
		p.password, _ = u.User.Password()
	}
	if password, ok := data[contract.SubscriptionPasswordKey]; ok {
		p.password = string(password)
	}
	if dbname := strings.TrimPrefix(u.Path, "/"); dbname != "" {
		p.keywords["dbname"] = dbname
	}
	if database != "" {
		p.keywords["dbname"] = database
	}
	for key, values := range u.Query() {
		if key != "password" && len(values) > 0 {
			p.keywords[key] = values[len(values)-1]
		}
	}
	if p.keywords["dbname"] == "" {
		return publisher{}, errors.New("it names no database: give its uri a path, or set source.database")
	}
	return p, nil
}

// conninfo is the subscription's connection string, in key order (the
// same publisher, the same string): the publisher's keywords, and the
// files that hold its password and CA.
func (p publisher) conninfo(passfile, rootcert string) string {
	keywords := maps.Clone(p.keywords)
	if keywords["connect_timeout"] == "" {
		keywords["connect_timeout"] = "10" // CREATE SUBSCRIPTION waits for it
	}
	if p.password != "" {
		keywords["passfile"] = passfile
	}
	if len(p.ca) > 0 {
		keywords["sslrootcert"] = rootcert
	}
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(keywords)) {
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(k + "=" + conninfoValue(keywords[k]))
	}
	return b.String()
}

// passfileEscaper quotes a passfile's field.
var passfileEscaper = strings.NewReplacer(`\`, `\\`, `:`, `\:`)

// passfileLine is a passfile that gives password to every connection.
func passfileLine(password string) string {
	return "*:*:*:*:" + passfileEscaper.Replace(password) + "\n"
}

// subscriptionFiles are the passfile and CA of a subscription.
func (c Config) subscriptionFiles(database, name string) (passfile, rootcert string) {
	base := filepath.Join(c.SocketDir, "subscriptions", database+"."+name)
	return base + ".pgpass", base + ".crt"
}

// writeIfChanged writes data to path (mode 0600, through a rename) unless
// it holds it already.
func writeIfChanged(path string, data []byte) error {
	if have, err := os.ReadFile(path); err == nil && bytes.Equal(have, data) {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	tmp := path + ".new"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// subscriptionConninfo reads the subscription's Secret, writes its
// password and CA files, and returns the connection string.
func (k *declaredKeeper) subscriptionConninfo(ctx context.Context, database string, s contract.Subscription) (string, error) {
	secret, err := k.kube.secrets.Get(ctx, s.Secret, metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("reading Secret %s: %w", s.Secret, err)
	}
	p, err := publisherOf(secret.Data, s.Database)
	if err != nil {
		return "", fmt.Errorf("Secret %s: %w", s.Secret, err)
	}
	passfile, rootcert := k.c.subscriptionFiles(database, s.Name)
	if p.password != "" {
		if err := writeIfChanged(passfile, []byte(passfileLine(p.password))); err != nil {
			return "", err
		}
	}
	if len(p.ca) > 0 {
		if err := writeIfChanged(rootcert, p.ca); err != nil {
			return "", err
		}
	}
	return p.conninfo(passfile, rootcert), nil
}

// applySubscriptions applies d's subscriptions on a connection to d.
func (k *declaredKeeper) applySubscriptions(ctx context.Context, conn *pgx.Conn, d contract.Database, outcome map[string]string) error {
	if len(d.Subscriptions) == 0 {
		return nil
	}
	var version int
	if err := conn.QueryRow(ctx, "SELECT current_setting('server_version_num')::int").Scan(&version); err != nil {
		return err
	}
	rows, err := conn.Query(ctx, `SELECT subname, subconninfo, ARRAY(SELECT unnest(subpublications) ORDER BY 1), subenabled
		FROM pg_subscription WHERE subdbid = (SELECT oid FROM pg_database WHERE datname = current_database())`)
	if err != nil {
		return err
	}
	have := map[string]*pgSubscription{}
	for rows.Next() {
		var name string
		s := &pgSubscription{}
		if err := rows.Scan(&name, &s.conninfo, &s.publications, &s.enabled); err != nil {
			return err
		}
		have[name] = s
	}
	if err := rows.Err(); err != nil {
		return err
	}
	for _, s := range d.Subscriptions {
		key := contract.SubscriptionKey(d.Name, s.Name)
		conninfo, err := k.subscriptionConninfo(ctx, d.Name, s)
		if err != nil && !s.Absent {
			outcome[key] = err.Error()
			continue
		}
		// A subscription to drop is dropped with the connection it has,
		// even when its Secret is gone.
		err = each(ctx, conn, subscriptionPlan(s, conninfo, have[s.Name], version >= 170000))
		if s.Absent && slotGone(err) {
			// Its slot was lost with a primary of the publisher (before
			// PostgreSQL 17, at every failover): nothing is left there.
			k.log("subscription %s: its slot is gone from the publisher (%v): dropping the subscription alone", s.Name, err)
			err = each(ctx, conn, dropSubscriptionAloneSQL(s.Name))
		}
		why := plainError(err)
		if why == "" {
			why, err = k.workerFailing(ctx, conn, key, s)
			if err != nil {
				return err
			}
		}
		outcome[key] = why
	}
	return nil
}

// workerErrors is the errors count of a subscription's workers when last
// seen, and when it last grew.
type workerErrors struct {
	count int64
	grew  time.Time
}

// workerFailingFor is how long a subscription whose workers failed
// counts as failing: a worker tries again every 5 s
// (wal_retrieve_retry_interval), so one that keeps failing shows all the
// time, and the message says "the last minute".
const workerFailingFor = time.Minute

// workerFailing is why the declared subscription s, as it is declared
// now, is not applied after all: its apply or table sync workers failed
// in the last workerFailingFor (pg_stat_subscription_stats counts them;
// the reason is in the server log only). "" when they did not, or when
// none runs (absent, or disabled).
func (k *declaredKeeper) workerFailing(ctx context.Context, conn *pgx.Conn, key string, s contract.Subscription) (string, error) {
	if s.Absent || !s.Enabled {
		delete(k.workers, key)
		return "", nil
	}
	var count int64
	err := conn.QueryRow(ctx, `SELECT coalesce(sum(st.apply_error_count + st.sync_error_count), 0)::bigint
		FROM pg_stat_subscription_stats st JOIN pg_subscription s ON s.oid = st.subid
		WHERE s.subname = $1 AND s.subdbid = (SELECT oid FROM pg_database WHERE datname = current_database())`, s.Name).Scan(&count)
	if err != nil {
		return "", err
	}
	seen, known := k.workers[key]
	seen, failing := seen.next(known, count, time.Now())
	k.workers[key] = seen
	if !failing {
		return "", nil
	}
	// Said the same way while it fails: the message does not change at
	// every pass.
	return "its worker failed within the last minute: the server log of the primary says why " +
		"(the publisher unreachable, a slot or a publication it lacks, a row that conflicts)", nil
}

// next is what is remembered once count is seen at now (known: seen
// before), and whether the workers count as failing.
func (w workerErrors) next(known bool, count int64, now time.Time) (workerErrors, bool) {
	switch {
	case !known || count < w.count: // first seen here, or its stats reset
		w = workerErrors{count: count}
	case count > w.count:
		w = workerErrors{count: count, grew: now}
	}
	return w, !w.grew.IsZero() && now.Sub(w.grew) < workerFailingFor
}

// slotGone tells whether a DROP SUBSCRIPTION failed because the publisher
// has no slot of its name.
func slotGone(err error) bool {
	return err != nil && strings.Contains(err.Error(), "could not drop replication slot") && strings.Contains(err.Error(), "does not exist")
}
