package leader

import (
	"net/http"
	"strings"

	utilnet "k8s.io/apimachinery/pkg/util/net"
)

// WrapTransport is a rest.Config.Wrap for the manager's config. It refuses
// every write of the manager's clients unless Check passes: the
// reconciler's, and the event broadcaster's, which posts Events from its
// own goroutine, possibly after a pause that outlived the lease. It checks
// as the request leaves, after any client-side rate limiting, so a write
// that waited for the rate limiter is checked when it is sent.
//
// TokenReviews and SubjectAccessReviews (the secure metrics endpoint's
// authentication) are POSTs that store nothing; followers must still make
// them.
func (l *Lease) WrapTransport(rt http.RoundTripper) http.RoundTripper {
	return &guardedTransport{rt: rt, lease: l}
}

type guardedTransport struct {
	rt    http.RoundTripper
	lease *Lease
}

func (t *guardedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if mutates(req) {
		if err := t.lease.Check(); err != nil {
			return nil, err
		}
	}
	return t.rt.RoundTrip(req)
}

func (t *guardedTransport) WrappedRoundTripper() http.RoundTripper { return t.rt }

var _ utilnet.RoundTripperWrapper = &guardedTransport{}

func mutates(req *http.Request) bool {
	switch req.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return false
	}
	return !strings.HasPrefix(req.URL.Path, "/apis/authentication.k8s.io/") &&
		!strings.HasPrefix(req.URL.Path, "/apis/authorization.k8s.io/")
}
