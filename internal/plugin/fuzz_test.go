package plugin

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// FuzzReportBundleSecret: a Secret `kubectl mydb report` puts in its
// bundle (any Secret of the namespace it was asked about: whoever may
// write Secrets there chooses its keys, values and annotations) keeps no
// value of data or stringData, nor the last-applied copy of the object:
// each reads back as Redacted. Run longer with make fuzz.
func FuzzReportBundleSecret(f *testing.F) {
	f.Add("password", []byte("s3cr3t-Passw0rd-xyz"), "uri", "postgresql://app:s3cr3t@x-rw:5432/app",
		`{"stringData":{"password":"s3cr3t"}}`, "example.com/unrelated", "kept")
	f.Add("", []byte{0, 0xff, '\n'}, "a: b", "line\nkind: Secret\n", "", "data", "password: x")
	f.Fuzz(func(t *testing.T, key string, value []byte, sKey, sValue, applied, annKey, annValue string) {
		secret := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: "x-credentials", Annotations: map[string]string{lastApplied: applied, annKey: annValue}},
			Data:       map[string][]byte{key: value},
			StringData: map[string]string{sKey: sValue},
		}
		out, err := ObjectYAML(secret, "Secret")
		if err != nil {
			t.Fatal(err)
		}
		var back struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Annotations map[string]string `json:"annotations"`
			} `json:"metadata"`
			Data       map[string]string `json:"data"`
			StringData map[string]string `json:"stringData"`
		}
		if err := yaml.Unmarshal(out, &back); err != nil {
			t.Fatalf("the bundle's Secret does not read back: %v\n%s", err, out)
		}
		// Every value, by whatever key it reads back (a key that is not
		// UTF-8, which the API server refuses anyway, does not read back
		// as itself).
		for _, v := range []map[string]string{back.Data, back.StringData} {
			for k, value := range v {
				if value != Redacted {
					t.Fatalf("the value of %q is in the bundle:\n%s", k, out)
				}
			}
		}
		if back.Kind != "Secret" || len(back.Data) != 1 || len(back.StringData) != 1 || back.Metadata.Annotations[lastApplied] != Redacted {
			t.Fatalf("the bundle's Secret:\n%s", out)
		}
		if len(sValue) >= 8 && !strings.Contains(sKey+annKey+annValue+Redacted+key+lastApplied, sValue) && strings.Contains(string(out), sValue) {
			t.Fatalf("the value %q is in the bundle:\n%s", sValue, out)
		}
	})
}
