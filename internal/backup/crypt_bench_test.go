package backup

import (
	"bytes"
	"io"
	"math/rand/v2"
	"strings"
	"testing"

	"filippo.io/age"
)

// BenchmarkCompressTar is the part of a base backup that encryption
// changes: a tar stream through zstd, and age when the store has a key,
// on 64 MiB of which a quarter is random hexadecimal text and the rest
// repetitive, as pgbench's tables; and age alone on incompressible bytes
// (docs/backup.md, "Encryption at rest").
//
//	go test ./internal/backup/ -run XXX -bench CompressTar -benchtime 10x
func BenchmarkCompressTar(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	const hex = "0123456789abcdef"
	var random strings.Builder
	for range 16 << 20 {
		random.WriteByte(hex[rng.IntN(16)])
	}
	repetitive := strings.Repeat("1|1|0|                                                                                    \n", (48<<20)/90)
	stream := tarOf(b, entry{name: "base/1/16384", body: random.String()}, entry{name: "base/1/16385", body: repetitive},
		entry{name: "backup_manifest", body: `{"WAL-Ranges":[{"Timeline":1,"Start-LSN":"0/2000028","End-LSN":"0/2000138"}]}`})
	for name, s := range map[string]*Store{"plain": {}, "encrypted": {keys: &keyring{identities: []*age.X25519Identity{newIdentity(b)}}}} {
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(stream)))
			for b.Loop() {
				var ranges streamFacts
				if err := s.compressTar(io.Discard, bytes.NewReader(stream), &ranges); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	// age alone, on what it sees in a backup: zstd's output, which does
	// not compress further (random bytes stand for it).
	sealed := make([]byte, 64<<20)
	for i := range sealed {
		sealed[i] = byte(rng.Uint32())
	}
	keys := &keyring{identities: []*age.X25519Identity{newIdentity(b)}}
	b.Run("age alone", func(b *testing.B) {
		b.SetBytes(int64(len(sealed)))
		for b.Loop() {
			w, err := keys.seal(io.Discard)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := w.Write(sealed); err != nil {
				b.Fatal(err)
			}
			if err := w.Close(); err != nil {
				b.Fatal(err)
			}
		}
	})
}
