package contract

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

// TestVerificationEncode: the JSON fits a termination message whatever
// the message holds, cut at a character's start.
func TestVerificationEncode(t *testing.T) {
	for name, message := range map[string]string{
		"short":            "base backup 20261203T120000Z restored",
		"long":             strings.Repeat("é", 4000),
		"escapes":          strings.Repeat("\"\x01<\n", 2000),
		"invalid UTF-8":    strings.Repeat("\xff", 5000),
		"exactly the max":  strings.Repeat("a", MaxVerificationMessage),
		"one over the max": strings.Repeat("a", MaxVerificationMessage) + "ü",
	} {
		t.Run(name, func(t *testing.T) {
			out := (Verification{Result: VerificationFailed, BackupID: "20261203T120000Z",
				ReachedLSN: "0/3000100", Message: message}).Encode()
			if len(out) > terminationMessageLimit {
				t.Fatalf("%d bytes", len(out))
			}
			if len(message) > MaxVerificationMessage && len(out) < terminationMessageLimit/2 {
				t.Fatalf("cut to %d bytes of JSON, far below %d", len(out), terminationMessageLimit)
			}
			var got Verification
			if err := json.Unmarshal(out, &got); err != nil {
				t.Fatal(err)
			}
			if len(got.Message) > MaxVerificationMessage || got.Message == "" {
				t.Fatalf("message of %d bytes", len(got.Message))
			}
			if utf8.ValidString(message) && !strings.HasPrefix(message, got.Message) {
				t.Fatalf("the message is not a prefix of the original: %q", got.Message[:min(len(got.Message), 40)])
			}
			if len(message) <= MaxVerificationMessage && !strings.ContainsAny(message, "\"\x01\n") && utf8.ValidString(message) && got.Message != message {
				t.Fatalf("a message that fits was cut to %d bytes", len(got.Message))
			}
		})
	}
}

func TestClip(t *testing.T) {
	for _, tc := range []struct {
		s    string
		n    int
		want string
	}{
		{"abc", 5, "abc"}, {"abc", 2, "ab"}, {"aé", 2, "a"}, {"aé", 3, "aé"}, {"€", 2, ""}, {"", 0, ""}, {"abc", -1, ""},
	} {
		if got := clip(tc.s, tc.n); got != tc.want {
			t.Errorf("clip(%q, %d) = %q, want %q", tc.s, tc.n, got, tc.want)
		}
	}
}
