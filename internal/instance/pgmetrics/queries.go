package pgmetrics

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/yaml"
)

// Queries are custom queries in postgres_exporter's queries.yaml format:
//
//	pg_orders:                      # the metrics' prefix
//	  query: "SELECT status, count(*) AS total FROM ..."
//	  primary: true                 # optional: only on the primary
//	  metrics:
//	    - status:
//	        usage: LABEL            # a label of the other columns' metrics
//	        description: ...
//	    - total:
//	        usage: GAUGE            # or COUNTER; DISCARD ignores the column
//	        description: Orders by status.
//
// gives pg_orders_total{status="..."}. Each query runs in the database
// postgres as the postgres superuser, with a 2 s statement timeout.
// postgres_exporter's master (only the DSN's database) is accepted and
// changes nothing here, where there is one database; any other key is
// refused, as is an unknown usage.
type Queries map[string]Query

// Query is one entry of Queries.
type Query struct {
	Query   string              `json:"query"`
	Primary bool                `json:"primary,omitempty"`
	Master  bool                `json:"master,omitempty"`
	Metrics []map[string]Column `json:"metrics"`
}

// Column says what a column of a Query's result is.
type Column struct {
	Usage       string `json:"usage"`
	Description string `json:"description,omitempty"`
}

// Column usages.
const (
	usageLabel   = "LABEL"
	usageGauge   = "GAUGE"
	usageCounter = "COUNTER"
	usageDiscard = "DISCARD"
)

// ParseQueries reads and checks queries.yaml.
func ParseQueries(data []byte) (Queries, error) {
	var q Queries
	if err := yaml.UnmarshalStrict(data, &q); err != nil {
		return nil, err
	}
	for name, query := range q {
		if strings.TrimSpace(query.Query) == "" {
			return nil, fmt.Errorf("%s: no query", name)
		}
		for _, m := range query.Metrics {
			for column, c := range m {
				switch strings.ToUpper(c.Usage) {
				case usageLabel, usageGauge, usageCounter, usageDiscard:
				default:
					return nil, fmt.Errorf("%s: column %s: usage %q, want LABEL, GAUGE, COUNTER or DISCARD", name, column, c.Usage)
				}
			}
		}
	}
	return q, nil
}

// runCustomQueries runs the queries of file, if any: a missing file means
// none (the ConfigMap volume is optional). It reports the first failure
// after running every query it could.
func runCustomQueries(ctx context.Context, conn *pgx.Conn, file string, primary bool, s *sink) error {
	if file == "" {
		return nil
	}
	data, err := os.ReadFile(file)
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("%s does not exist: is the ConfigMap there, with the key queries.yaml?", file)
	}
	if err != nil {
		return err
	}
	queries, err := ParseQueries(data)
	if err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(queries)) {
		q := queries[name]
		if q.Primary && !primary {
			continue
		}
		if err := runQuery(ctx, conn, name, q, s); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
		}
	}
	return errors.Join(errs...)
}

// runQuery runs one query and turns each row into its metrics. Nothing of
// a query is kept unless all of its rows convert.
func runQuery(ctx context.Context, conn *pgx.Conn, name string, q Query, s *sink) error {
	columns := map[string]Column{}
	for _, m := range q.Metrics {
		for column, c := range m {
			columns[column] = Column{Usage: strings.ToUpper(c.Usage), Description: c.Description}
		}
	}
	rows, err := conn.Query(ctx, q.Query)
	if err != nil {
		return err
	}
	defer rows.Close()
	fields := rows.FieldDescriptions()
	var labelNames []string
	for _, f := range fields {
		if columns[f.Name].Usage == usageLabel {
			labelNames = append(labelNames, f.Name)
		}
	}
	descs := map[string]*prometheus.Desc{}
	var out []prometheus.Metric
	for rows.Next() {
		values, err := rows.Values()
		if err != nil {
			return err
		}
		labels := make([]string, 0, len(labelNames))
		for i, f := range fields {
			if columns[f.Name].Usage == usageLabel {
				labels = append(labels, labelValue(values[i]))
			}
		}
		for i, f := range fields {
			c, ok := columns[f.Name]
			if !ok || (c.Usage != usageGauge && c.Usage != usageCounter) {
				continue
			}
			if descs[f.Name] == nil {
				descs[f.Name] = prometheus.NewDesc(name+"_"+f.Name, c.Description, labelNames, nil)
			}
			v, err := number(values[i])
			if err != nil {
				return fmt.Errorf("column %s: %w", f.Name, err)
			}
			kind := prometheus.GaugeValue
			if c.Usage == usageCounter {
				kind = prometheus.CounterValue
			}
			m, err := prometheus.NewConstMetric(descs[f.Name], kind, v, labels...)
			if err != nil {
				return err
			}
			out = append(out, m)
		}
	}
	if err := rows.Err(); err != nil {
		return err
	}
	s.metrics = append(s.metrics, out...)
	return nil
}

func labelValue(v any) string {
	if v == nil {
		return ""
	}
	return fmt.Sprint(v)
}

// number converts a column's value to a sample: numbers, booleans (1 or
// 0), times (Unix seconds); NULL is NaN, as in postgres_exporter.
func number(v any) (float64, error) {
	switch x := v.(type) {
	case nil:
		return math.NaN(), nil
	case int16:
		return float64(x), nil
	case int32:
		return float64(x), nil
	case int64:
		return float64(x), nil
	case float32:
		return float64(x), nil
	case float64:
		return x, nil
	case bool:
		return boolValue(x), nil
	case time.Time:
		return float64(x.UnixNano()) / 1e9, nil
	case pgtype.Numeric:
		f, err := x.Float64Value()
		if err != nil {
			return 0, err
		}
		return f.Float64, nil
	default:
		return 0, fmt.Errorf("a %T is not a number", v)
	}
}
