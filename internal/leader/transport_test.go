package leader

import (
	"errors"
	"net/http"
	"testing"

	"github.com/google/go-cmp/cmp"
)

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func TestTransport(t *testing.T) {
	requests := []struct{ method, path string }{
		{http.MethodGet, "/api/v1/namespaces/ns/configmaps"},
		{http.MethodGet, "/api/v1/namespaces/ns/configmaps?watch=true"},
		{http.MethodPost, "/apis/events.k8s.io/v1/namespaces/ns/events"},
		{http.MethodPatch, "/apis/events.k8s.io/v1/namespaces/ns/events/e"},
		{http.MethodPost, "/api/v1/namespaces/ns/events"},
		{http.MethodPut, "/api/v1/namespaces/ns/configmaps/cm"},
		{http.MethodDelete, "/api/v1/namespaces/ns/configmaps/cm"},
		{http.MethodPost, "/apis/authentication.k8s.io/v1/tokenreviews"},
		{http.MethodPost, "/apis/authorization.k8s.io/v1/subjectaccessreviews"},
	}
	cases := map[string]struct {
		lease func(*testing.T) *Lease
		want  []string
	}{
		"fresh": {func(t *testing.T) *Lease { l, _ := fresh(t); return l }, []string{
			"GET /api/v1/namespaces/ns/configmaps",
			"GET /api/v1/namespaces/ns/configmaps",
			"POST /apis/events.k8s.io/v1/namespaces/ns/events",
			"PATCH /apis/events.k8s.io/v1/namespaces/ns/events/e",
			"POST /api/v1/namespaces/ns/events",
			"PUT /api/v1/namespaces/ns/configmaps/cm",
			"DELETE /api/v1/namespaces/ns/configmaps/cm",
			"POST /apis/authentication.k8s.io/v1/tokenreviews",
			"POST /apis/authorization.k8s.io/v1/subjectaccessreviews",
		}},
		"stale: reads and reviews only": {stale, []string{
			"GET /api/v1/namespaces/ns/configmaps",
			"GET /api/v1/namespaces/ns/configmaps",
			"POST /apis/authentication.k8s.io/v1/tokenreviews",
			"POST /apis/authorization.k8s.io/v1/subjectaccessreviews",
		}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var got []string
			rt := tc.lease(t).WrapTransport(roundTripperFunc(func(r *http.Request) (*http.Response, error) {
				got = append(got, r.Method+" "+r.URL.Path)
				return &http.Response{StatusCode: http.StatusOK}, nil
			}))
			for _, r := range requests {
				req, err := http.NewRequest(r.method, "https://apiserver"+r.path, nil)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := rt.RoundTrip(req); err != nil && !errors.Is(err, ErrNotLeader) {
					t.Fatal(err)
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Fatalf("requests through (-want +got):\n%s", diff)
			}
		})
	}
}
