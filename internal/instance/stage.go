package instance

import (
	"bufio"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// A major version upgrade needs the binaries of both majors in one
// container, and an official image holds one. The Job of an upgrade
// (internal/specs, upgrade.go) runs the OLD image in an init container that
// stages its PostgreSQL into an emptyDir (StageBinaries), and the NEW image
// in the container that runs pg_upgrade (Upgrade).
//
// The two images need not share a base (here postgres:15 is Debian 12 and
// postgres:17 Debian 13), so the old binaries take their shared libraries
// with them: every library they need, by soname, except glibc's own (the
// newer glibc runs older binaries). At upgrade time only the sonames the new
// image lacks are put on LD_LIBRARY_PATH (libraryPath): a library the new
// image has (libssl.so.3, say) must come from the new image, or the new
// binaries, which inherit the environment, would load the old copy.

// Debian's layout of PostgreSQL <major>, which the official images share.
// The staged copy keeps it below the destination, so that PostgreSQL's
// relocatable path lookup finds the share and lib directories from the
// postgres binary's own place.
func debianDirs(major string) []string {
	return []string{
		"/usr/lib/postgresql/" + major + "/bin",
		"/usr/lib/postgresql/" + major + "/lib",
		"/usr/share/postgresql/" + major,
	}
}

// OldBinDir is where the staged binaries of major are below dest.
func OldBinDir(dest, major string) string { return filepath.Join(dest, debianDirs(major)[0]) }

// stagedLibs is the directory below the destination holding the libraries
// the staged binaries need, one file per soname.
const stagedLibs = "libs"

// glibc's own libraries: never staged, the new image's are used.
func glibc(soname string) bool {
	if strings.HasPrefix(soname, "ld-linux") || strings.HasPrefix(soname, "libnss_") {
		return true
	}
	switch soname {
	case "libc.so.6", "libm.so.6", "libpthread.so.0", "libdl.so.2", "librt.so.1", "libresolv.so.2", "libutil.so.1", "libanl.so.1", "libmvec.so.1":
		return true
	}
	return false
}

// StageBinaries copies PostgreSQL major's bin, lib and share directories
// into dest, keeping their layout, and the shared libraries their ELF files
// need (the closure, glibc's left out) into dest/libs. The JIT provider is
// left out: it needs LLVM (over 100 MB), and a server without it simply
// runs without JIT. The copy is made in a scratch directory renamed into
// place when complete.
func StageBinaries(major, dest string) error {
	scratch := dest + "/.staging"
	if err := os.RemoveAll(scratch); err != nil {
		return err
	}
	var elves []string
	for _, dir := range debianDirs(major) {
		if _, err := os.Stat(dir); err != nil {
			return fmt.Errorf("this image has no PostgreSQL %s where Debian puts it: %w", major, err)
		}
		if err := copyTree(dir, scratch+dir, func(path string) {
			if isELF(path) {
				elves = append(elves, path)
			}
		}); err != nil {
			return err
		}
	}
	libs, err := libraryClosure(elves, librarySearchPath())
	if err != nil {
		return err
	}
	if err := os.MkdirAll(scratch+"/"+stagedLibs, 0o755); err != nil {
		return err
	}
	for _, soname := range slices.Sorted(maps.Keys(libs)) {
		if err := copyFile(libs[soname], scratch+"/"+stagedLibs+"/"+soname, 0o755); err != nil {
			return err
		}
	}
	final := filepath.Join(dest, "pg"+major)
	if err := os.RemoveAll(final); err != nil {
		return err
	}
	return os.Rename(scratch, final)
}

// StagedRoot is the directory StageBinaries made for major below dest.
func StagedRoot(dest, major string) string { return filepath.Join(dest, "pg"+major) }

// copyTree copies the regular files, directories and symbolic links of src
// into dst, calling seen with each regular file copied (its source path),
// every file synced.
func copyTree(src, dst string, seen func(string)) error {
	return filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		to := filepath.Join(dst, rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			return os.MkdirAll(to, info.Mode().Perm()|0o700)
		case strings.HasPrefix(d.Name(), "llvmjit"):
			return nil
		case d.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(path)
			if err != nil {
				return err
			}
			return os.Symlink(target, to)
		case d.Type().IsRegular():
			seen(path)
			return copyFile(path, to, info.Mode().Perm())
		}
		return nil
	})
}

func copyFile(src, dst string, mode fs.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer func() { _ = in.Close() }()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode|0o200)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	if serr := out.Sync(); err == nil {
		err = serr
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return err
}

func isELF(path string) bool {
	f, err := elf.Open(path)
	if err != nil {
		return false
	}
	_ = f.Close()
	return true
}

// librarySearchPath is where the dynamic linker looks, in its order: the
// directories of /etc/ld.so.conf (and what it includes), then the
// defaults.
func librarySearchPath() []string {
	var dirs []string
	var read func(string)
	read = func(file string) {
		f, err := os.Open(file)
		if err != nil {
			return
		}
		defer func() { _ = f.Close() }()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			line := strings.TrimSpace(sc.Text())
			switch {
			case line == "" || strings.HasPrefix(line, "#"):
			case strings.HasPrefix(line, "include "):
				matches, _ := filepath.Glob(strings.TrimSpace(strings.TrimPrefix(line, "include ")))
				slices.Sort(matches)
				for _, m := range matches {
					read(m)
				}
			default:
				dirs = append(dirs, line)
			}
		}
	}
	read("/etc/ld.so.conf")
	for _, d := range []string{"/lib64", "/usr/lib64", "/lib", "/usr/lib"} {
		if !slices.Contains(dirs, d) {
			dirs = append(dirs, d)
		}
	}
	return dirs
}

// findLibrary is the file of soname in the first directory that has it.
func findLibrary(soname string, dirs []string) (string, bool) {
	for _, d := range dirs {
		p := filepath.Join(d, soname)
		if _, err := os.Stat(p); err == nil {
			return p, true
		}
	}
	return "", false
}

// libraryClosure resolves every library the files need, directly or through
// another library, but glibc's: soname to file.
func libraryClosure(files []string, dirs []string) (map[string]string, error) {
	found := map[string]string{}
	queue := slices.Clone(files)
	for len(queue) > 0 {
		path := queue[0]
		queue = queue[1:]
		f, err := elf.Open(path)
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", path, err)
		}
		needed, err := f.ImportedLibraries()
		_ = f.Close()
		if err != nil && !errors.Is(err, elf.ErrNoSymbols) {
			return nil, fmt.Errorf("reading the libraries %s needs: %w", path, err)
		}
		for _, soname := range needed {
			if _, ok := found[soname]; ok || glibc(soname) {
				continue
			}
			lib, ok := findLibrary(soname, dirs)
			if !ok {
				// A library of a module nobody loads (the JIT's LLVM)
				// is not needed; anything else shows when it runs.
				continue
			}
			found[soname] = lib
			queue = append(queue, lib)
		}
	}
	return found, nil
}

// libraryPath makes dir a directory of links to the staged libraries whose
// soname this image lacks, and returns it for LD_LIBRARY_PATH ("" when the
// image has them all).
func libraryPath(staged, dir string) (string, error) {
	entries, err := os.ReadDir(filepath.Join(staged, stagedLibs))
	if err != nil {
		return "", err
	}
	if err := os.RemoveAll(dir); err != nil {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	search := librarySearchPath()
	var missing []string
	for _, e := range entries {
		if _, ok := findLibrary(e.Name(), search); ok {
			continue
		}
		if err := os.Symlink(filepath.Join(staged, stagedLibs, e.Name()), filepath.Join(dir, e.Name())); err != nil {
			return "", err
		}
		missing = append(missing, e.Name())
	}
	if len(missing) == 0 {
		return "", nil
	}
	return dir, nil
}
