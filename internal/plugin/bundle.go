package plugin

import (
	"archive/tar"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"
)

// Redacted replaces every value of a Secret in a support bundle.
const Redacted = "REDACTED"

// lastApplied is where `kubectl apply` keeps a copy of the whole object,
// a Secret's data included.
const lastApplied = "kubectl.kubernetes.io/last-applied-configuration"

// bundle is where report writes: a directory or a .tar.gz.
type bundle interface {
	add(name string, data []byte) error
	close() error
}

func openBundle(path string, now time.Time) (bundle, error) {
	if strings.HasSuffix(path, ".tar.gz") || strings.HasSuffix(path, ".tgz") {
		f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
		if err != nil {
			return nil, err
		}
		gz := gzip.NewWriter(f)
		return &tarBundle{f: f, gz: gz, tw: tar.NewWriter(gz), root: strings.TrimSuffix(strings.TrimSuffix(filepath.Base(path), ".tar.gz"), ".tgz"), now: now}, nil
	}
	if err := os.Mkdir(path, 0o700); err != nil {
		return nil, err
	}
	return dirBundle(path), nil
}

type dirBundle string

func (d dirBundle) add(name string, data []byte) error {
	p := filepath.Join(string(d), filepath.FromSlash(name))
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return err
	}
	return os.WriteFile(p, data, 0o600)
}

func (d dirBundle) close() error { return nil }

type tarBundle struct {
	f    *os.File
	gz   *gzip.Writer
	tw   *tar.Writer
	root string
	now  time.Time
}

func (t *tarBundle) add(name string, data []byte) error {
	if err := t.tw.WriteHeader(&tar.Header{Name: t.root + "/" + name, Mode: 0o600, Size: int64(len(data)), ModTime: t.now}); err != nil {
		return err
	}
	_, err := t.tw.Write(data)
	return err
}

func (t *tarBundle) close() error {
	errs := []error{t.tw.Close(), t.gz.Close(), t.f.Close()}
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// ObjectYAML renders obj for a bundle: without managedFields, and, for a
// Secret, with every value of data and stringData and the
// last-applied-configuration annotation replaced by Redacted (the keys
// stay, so that a missing key still shows).
func ObjectYAML(obj runtime.Object, kind string) ([]byte, error) {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, err
	}
	if md, ok := m["metadata"].(map[string]any); ok {
		delete(md, "managedFields")
	}
	m["kind"] = kind
	if kind == "Secret" {
		redactSecret(m)
	}
	out, err := yaml.Marshal(m)
	if err != nil {
		// The YAML encoder refuses some strings the API server stores
		// (C1 control characters, in an annotation anyone who may write
		// the object can set): such an object is written as JSON, which
		// is YAML too, with those characters escaped, so that it does not
		// cut the whole report short.
		return escapedJSON(m)
	}
	return out, nil
}

// escapedJSON is v as JSON with every character YAML does not allow
// unescaped (outside its printable set) written as \uXXXX: JSON leaves
// DEL and the C1 controls as they are, and they occur only in strings.
func escapedJSON(v any) ([]byte, error) {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return nil, err
	}
	var out strings.Builder
	for _, r := range string(b) {
		printable := r == '\t' || r == '\n' || r == '\r' || (r >= 0x20 && r <= 0x7e) || r == 0x85 ||
			(r >= 0xa0 && r <= 0xd7ff) || (r >= 0xe000 && r <= 0xfffd) || r >= 0x10000
		if printable {
			out.WriteRune(r)
		} else {
			fmt.Fprintf(&out, `\u%04x`, r)
		}
	}
	return []byte(out.String()), nil
}

func redactSecret(m map[string]any) {
	for _, field := range []string{"data", "stringData"} {
		if values, ok := m[field].(map[string]any); ok {
			for k := range values {
				values[k] = Redacted
			}
		}
	}
	if md, ok := m["metadata"].(map[string]any); ok {
		if ann, ok := md["annotations"].(map[string]any); ok {
			if _, ok := ann[lastApplied]; ok {
				ann[lastApplied] = Redacted
			}
		}
	}
}

// bundleName is the default file of a report.
func bundleName(namespace, name string, now time.Time) string {
	return fmt.Sprintf("report-%s-%s-%s.tar.gz", namespace, name, now.UTC().Format("20060102-150405"))
}
