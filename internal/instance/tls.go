package instance

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// The server certificate reaches the pod as a Secret volume (TLS_DIR),
// whose files are the kubelet's: group-readable through fsGroup and
// replaced by a symlink swap when the Secret changes. PostgreSQL refuses a
// key that others than its owner may read unless root owns it, so the
// instance manager keeps copies of its own, mode 0600, in the socket
// directory (an emptyDir, never the data volume), points the server at
// them, and when the Secret's files change it replaces the copies and
// reloads the server: SIGHUP makes PostgreSQL load the new certificate
// for new connections, and the open ones keep their session.

// tlsFiles are the files the server uses, in TLS_DIR and in the copy.
var tlsFiles = []string{"tls.crt", "tls.key"}

// tlsCopyDir is where the copies live.
func (c Config) tlsCopyDir() string { return filepath.Join(c.SocketDir, "tls") }

// tlsArgs turn TLS on with the copies; none when the pod has no TLS_DIR.
func (c Config) tlsArgs() []string {
	if c.TLSDir == "" {
		return nil
	}
	dir := c.tlsCopyDir()
	return []string{"-c", "ssl=on",
		"-c", "ssl_cert_file=" + filepath.Join(dir, "tls.crt"), "-c", "ssl_key_file=" + filepath.Join(dir, "tls.key")}
}

// copyTLS brings the copies in line with TLS_DIR. It reports whether
// they changed; a half-written pair is never left behind (each file is
// written aside and renamed, the key last, and PostgreSQL reads them only
// at a reload, which follows).
func (c Config) copyTLS() (bool, error) {
	if c.TLSDir == "" {
		return false, nil
	}
	dir := c.tlsCopyDir()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return false, err
	}
	changed := false
	for _, name := range tlsFiles {
		want, err := os.ReadFile(filepath.Join(c.TLSDir, name))
		if err != nil {
			return false, fmt.Errorf("the server certificate Secret: %w", err)
		}
		have, err := os.ReadFile(filepath.Join(dir, name))
		if err == nil && bytes.Equal(have, want) {
			continue
		}
		tmp := filepath.Join(dir, "."+name)
		if err := os.WriteFile(tmp, want, 0o600); err != nil {
			return false, err
		}
		if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
			return false, err
		}
		changed = true
	}
	return changed, nil
}

// keepCertificate follows the Secret: a running server reloads when its
// certificate changed.
func (m *manager) keepCertificate() {
	changed, err := m.c.copyTLS()
	if err != nil {
		m.logOnce(err)
		return
	}
	if changed && m.server != nil && !m.server.exitedNow() {
		m.log("the server certificate changed: reloading")
		_ = m.server.cmd.Process.Signal(syscall.SIGHUP)
	}
}
