package instance

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	"example.com/myoperator/internal/contract"
)

// The WAL's share of the data volume. PostgreSQL keeps WAL for three
// reasons, and each has a bound here unless spec.parameters sets it:
//
//   - until the checkpoint after it: max_wal_size, a quarter of the volume
//     and at most PostgreSQL's default of 1 GB (a 1 GB default on a 1 GiB
//     volume fills it under a steady write load with nothing else wrong);
//   - for replicas: wal_keep_size (128 MB) and the members' replication
//     slots, each at most max_slot_wal_keep_size, a quarter of the volume;
//   - until it is archived, with spec.backup: no bound, since PostgreSQL
//     never removes a WAL file it has not archived, which is what a restore
//     needs. This is the growth the WALSpace condition and the
//     MyDatabaseWALAccumulating alert are for.
//
// So the first two keep pg_wal under about half a volume of 512 MiB or
// more (below, the 128 MB floor of wal_keep_size is more than a quarter),
// and more than half means archiving is behind or a setting outgrew the
// volume.
//
// With a WAL volume of its own (spec.walStorage) the volume is that one.
//
// They are command-line settings, so that they follow the volume without a
// change of the pod template: a volume expanded online raises them at the
// server's next start.
func (c Config) walBoundArgs() []string {
	var size uint64
	var fs syscall.Statfs_t
	if err := syscall.Statfs(c.walVolume(), &fs); err == nil {
		size = fs.Blocks * uint64(fs.Bsize)
	}
	// Without a data directory yet (a clone's first start is after it
	// exists) the slots get their floor, since PostgreSQL's default, no
	// bound, is never wanted; max_wal_size keeps PostgreSQL's default.
	var args []string
	conf := c.ConfigDir + "/" + contract.PostgresConfFile
	if !setIn(conf, "max_slot_wal_keep_size") {
		args = append(args, "-c", "max_slot_wal_keep_size="+slotBound(size))
	}
	if !setIn(conf, "max_wal_size") && size > 0 {
		args = append(args, "-c", "max_wal_size="+walSizeBound(size))
	}
	return args
}

// slotBound is a quarter of a volume of size bytes, in megabytes, and at
// least 128 MB (wal_keep_size).
func slotBound(size uint64) string {
	return fmt.Sprintf("%dMB", max(size/4>>20, 128))
}

// walSizeBound is max_wal_size for a volume of size bytes: a quarter of it
// in megabytes, between 64 MB (four segments, so that a checkpoint is not
// asked for at every one) and PostgreSQL's default of 1 GB.
func walSizeBound(size uint64) string {
	return fmt.Sprintf("%dMB", min(max(size/4>>20, 64), 1024))
}

// walVolume is a directory on the volume pg_wal is on: the WAL volume's
// root (WALDir is below it, and exists only once the WAL moved there), or
// the data directory.
func (c Config) walVolume() string {
	if c.WALDir != "" {
		return filepath.Dir(c.WALDir)
	}
	return c.PGData
}

// storage measures the data volume, the WAL, and the WAL volume when it
// has one, for the report; nil when the data directory cannot be read.
func (c Config) storage() *contract.Storage {
	var fs syscall.Statfs_t
	if err := syscall.Statfs(c.PGData, &fs); err != nil {
		return nil
	}
	s := &contract.Storage{
		CapacityBytes:  int64(fs.Blocks) * fs.Bsize,
		AvailableBytes: int64(fs.Bavail) * fs.Bsize,
	}
	if c.WALDir != "" {
		if err := syscall.Statfs(c.walVolume(), &fs); err == nil {
			s.WALCapacityBytes, s.WALAvailableBytes = int64(fs.Blocks)*fs.Bsize, int64(fs.Bavail)*fs.Bsize
		}
	}
	entries, err := os.ReadDir(filepath.Join(c.PGData, "pg_wal"))
	if err != nil {
		return s
	}
	for _, e := range entries {
		// WAL segments and history files; archive_status holds only
		// empty marker files.
		if info, err := e.Info(); err == nil && info.Mode().IsRegular() {
			s.WALBytes += info.Size()
		}
	}
	return s
}
