package pgmetrics

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5/pgtype"
)

func TestParseQueries(t *testing.T) {
	cases := map[string]struct {
		yaml    string
		want    Queries
		wantErr string
	}{
		"postgres_exporter's format, primary and master": {
			yaml: `
pg_orders:
  query: "SELECT status, count(*) AS total FROM orders GROUP BY status"
  primary: true
  master: true
  metrics:
    - status: {usage: LABEL, description: the status}
    - total: {usage: gauge, description: orders}
`,
			want: Queries{"pg_orders": {Query: "SELECT status, count(*) AS total FROM orders GROUP BY status", Primary: true, Master: true,
				Metrics: []map[string]Column{{"status": {Usage: "LABEL", Description: "the status"}}, {"total": {Usage: "gauge", Description: "orders"}}}}},
		},
		"an unknown key": {
			yaml:    "q:\n  query: SELECT 1\n  cache_seconds: 30\n",
			wantErr: `unknown field "cache_seconds"`,
		},
		"an unknown usage": {
			yaml:    "q:\n  query: SELECT 1 AS one\n  metrics:\n    - one: {usage: HISTOGRAM}\n",
			wantErr: `q: column one: usage "HISTOGRAM", want LABEL, GAUGE, COUNTER or DISCARD`,
		},
		"no query": {
			yaml:    "q:\n  metrics: []\n",
			wantErr: "q: no query",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := ParseQueries([]byte(tc.yaml))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestNumber(t *testing.T) {
	var numeric pgtype.Numeric
	if err := numeric.Scan("12.5"); err != nil {
		t.Fatal(err)
	}
	cases := map[string]struct {
		in   any
		want float64
	}{
		"int16":   {int16(3), 3},
		"int32":   {int32(-4), -4},
		"int64":   {int64(1) << 40, 1 << 40},
		"float32": {float32(0.5), 0.5},
		"float64": {2.25, 2.25},
		"true":    {true, 1},
		"false":   {false, 0},
		"time":    {time.Unix(1700000000, 500000000), 1700000000.5},
		"numeric": {numeric, 12.5},
	}
	for name, tc := range cases {
		got, err := number(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("%s: number(%v) = %v, %v; want %v", name, tc.in, got, err, tc.want)
		}
	}
	if got, err := number(nil); err != nil || !math.IsNaN(got) {
		t.Errorf("number(NULL) = %v, %v; want NaN", got, err)
	}
	if _, err := number("text"); err == nil {
		t.Errorf("number(a string) succeeded, want an error")
	}
}
