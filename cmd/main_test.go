package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
)

func TestSplitNamespaces(t *testing.T) {
	for in, want := range map[string][]string{
		"":                 nil,
		"team-a":           {"team-a"},
		" team-a , team-b": {"team-a", "team-b"},
		"team-a,,team-a,":  {"team-a"},
	} {
		if got := splitNamespaces(in); !slices.Equal(got, want) {
			t.Errorf("splitNamespaces(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestRequireCRD: without the MyDatabase CRD the operator does not start
// (the message says what to run); without the MyDatabasePooler CRD (an
// operator upgraded before its CRDs) it starts without poolers.
func TestRequireCRD(t *testing.T) {
	for name, tc := range map[string]struct {
		kinds   []string // served by the group version; nil: not served
		poolers bool
		err     string
	}{
		"every CRD":         {kinds: []string{"MyDatabase", "MyDatabaseBackup", "MyDatabasePooler"}, poolers: true},
		"no pooler CRD":     {kinds: []string{"MyDatabase", "MyDatabaseBackup"}},
		"no MyDatabase CRD": {err: "run 'make install'"},
	} {
		t.Run(name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path != "/apis/database.example.com/v1alpha1" || tc.kinds == nil {
					http.NotFound(w, r)
					return
				}
				list := metav1.APIResourceList{GroupVersion: "database.example.com/v1alpha1"}
				for _, k := range tc.kinds {
					list.APIResources = append(list.APIResources, metav1.APIResource{Name: strings.ToLower(k) + "s", Kind: k, Namespaced: true})
				}
				w.Header().Set("Content-Type", "application/json")
				_ = json.NewEncoder(w).Encode(list)
			}))
			defer srv.Close()
			poolers, err := requireCRD(&rest.Config{Host: srv.URL})
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one saying %q", err, tc.err)
				}
				return
			}
			if err != nil || poolers != tc.poolers {
				t.Errorf("poolers %v (%v), want %v", poolers, err, tc.poolers)
			}
		})
	}
}
