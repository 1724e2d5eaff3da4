package instance

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// The WAL on a volume of its own (spec.walStorage, WALDir). PGDATA/pg_wal
// becomes a symbolic link to WALDir, as initdb --waldir makes it, so that
// everything that reads pg_wal (the server, pg_rewind, pg_basebackup,
// which sends it as a directory) finds it where it always is.
//
// Every way of making a data directory here (initdb, a clone, a restore, a
// major upgrade) leaves pg_wal a directory, and a MyDatabase that gains
// walStorage has one in every server: before the server starts on PGDATA,
// placeWAL moves it. While pg_wal is a directory it holds the WAL, whatever
// WALDir holds (a move cut short, or the WAL of data a clone or a restore
// has since replaced), so the move can be cut short anywhere and done
// again:
//
//  1. pg_wal is copied into WALDir.new, each file synced;
//  2. WALDir.new replaces WALDir;
//  3. pg_wal is renamed pg_wal.moving, and pg_wal made a link to WALDir;
//  4. pg_wal.moving is removed.
//
// A pg_wal missing with pg_wal.moving present was cut short in step 3: the
// directory is put back, and the move starts again.

// movingSuffix names pg_wal set aside while the link replaces it.
const movingSuffix = ".moving"

// placeWAL places the WAL before the server starts on PGDATA, and says so
// when it moved it.
func (pg *pgServer) placeWAL() error {
	moved, err := pg.c.placeWAL()
	if err != nil {
		return fmt.Errorf("placing the WAL on its volume: %w", err)
	}
	if moved {
		pg.log("moved pg_wal to the WAL volume, %s", pg.c.WALDir)
	}
	return nil
}

// placeWAL makes PGDATA/pg_wal a link to c.WALDir, moving the WAL there
// when pg_wal is a directory; nothing without a WAL volume. It reports
// whether it moved the WAL.
func (c Config) placeWAL() (bool, error) {
	link := filepath.Join(c.PGData, "pg_wal")
	if c.WALDir == "" {
		if target, err := os.Readlink(link); err == nil {
			if _, err := os.Stat(link); err != nil {
				return false, fmt.Errorf("%s links to %s, which this pod does not mount: the data was made with "+
					"spec.walStorage, which this MyDatabase lacks; give it spec.walStorage again", link, target)
			}
		}
		return false, nil
	}
	moving := link + movingSuffix
	if _, err := os.Lstat(link); errors.Is(err, fs.ErrNotExist) {
		if _, err := os.Lstat(moving); err == nil {
			if err := os.Rename(moving, link); err != nil {
				return false, err
			}
		}
	}
	fi, err := os.Lstat(link)
	if err != nil {
		return false, fmt.Errorf("the data directory has no pg_wal: %w", err)
	}
	if fi.Mode()&fs.ModeSymlink != 0 {
		target, err := os.Readlink(link)
		if err != nil {
			return false, err
		}
		if target != c.WALDir {
			return false, fmt.Errorf("%s links to %s, not to the WAL volume's %s: move the WAL there by hand", link, target, c.WALDir)
		}
		if _, err := os.Stat(c.WALDir); err != nil {
			return false, fmt.Errorf("%s links to the WAL volume's %s, which is gone (%w): "+
				"the volume was replaced, and the data cannot start without its WAL", link, c.WALDir, err)
		}
		return false, os.RemoveAll(moving)
	}
	if !fi.IsDir() {
		return false, fmt.Errorf("%s is neither a directory nor a link", link)
	}
	staging := c.WALDir + ".new"
	if err := os.RemoveAll(staging); err != nil {
		return false, err
	}
	if err := copyTree(link, staging, func(string) {}); err != nil {
		return false, fmt.Errorf("copying %s to the WAL volume: %w", link, err)
	}
	if err := syncTree(staging); err != nil {
		return false, err
	}
	if err := os.RemoveAll(c.WALDir); err != nil {
		return false, err
	}
	if err := os.Rename(staging, c.WALDir); err != nil {
		return false, err
	}
	if err := syncDir(filepath.Dir(c.WALDir)); err != nil {
		return false, err
	}
	if err := os.Rename(link, moving); err != nil {
		return false, err
	}
	if err := os.Symlink(c.WALDir, link); err != nil {
		return false, err
	}
	if err := syncDir(c.PGData); err != nil {
		return false, err
	}
	return true, os.RemoveAll(moving)
}

// syncTree syncs every directory below dir, dir included (copyFile syncs
// the files).
func syncTree(dir string) error {
	return filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		return syncDir(path)
	})
}
