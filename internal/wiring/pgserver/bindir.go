package pgserver

import (
	"cmp"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// PackageDirs are where Postgres's server binaries are looked for beyond $PATH and
// pg_config: where packages put them off $PATH (glob patterns).
var PackageDirs = []string{
	"/usr/lib/postgresql/*/bin",                          // Debian, Ubuntu
	"/usr/pgsql-*/bin",                                   // RHEL, Fedora (PGDG)
	"/opt/homebrew/opt/postgresql@*/bin",                 // Homebrew on Apple silicon (keg-only)
	"/usr/local/opt/postgresql@*/bin",                    // Homebrew on Intel
	"/opt/homebrew/opt/postgresql/bin",                   //
	"/usr/local/opt/postgresql/bin",                      //
	"/Applications/Postgres.app/Contents/Versions/*/bin", // Postgres.app
}

// Search is where Postgres's server binaries are looked for: [Start] uses
// DefaultSearch when Config.BinDir is empty, and `stepgate dev` (which runs Postgres in
// Docker when it finds none) the same.
type Search struct {
	Path string   // the directories of $PATH, for postgres, initdb, pg_config (and docker)
	Dirs []string // more directories of server binaries: glob patterns
}

// DefaultSearch looks on getenv("PATH"), from pg_config, and in PackageDirs.
func DefaultSearch(getenv func(string) string) Search {
	return Search{Path: getenv("PATH"), Dirs: PackageDirs}
}

// LookPath returns the path of the executable file in one of s.Path's directories, or
// "" if there is none.
func (s Search) LookPath(file string) string {
	for _, dir := range filepath.SplitList(s.Path) {
		if dir == "" {
			continue
		}
		p := filepath.Join(dir, file)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 {
			return p
		}
	}
	return ""
}

// BinDirs returns the directories that hold both initdb and postgres, in the order
// they are preferred: the one of postgres on $PATH (past its symlinks), pg_config's,
// then the matches of s.Dirs, the newest major version first.
func (s Search) BinDirs() []string {
	var dirs []string
	add := func(dir string) {
		if real, err := filepath.EvalSymlinks(dir); err == nil {
			dir = real
		}
		for _, bin := range []string{"initdb", "postgres"} {
			if fi, err := os.Stat(filepath.Join(dir, bin)); err != nil || !fi.Mode().IsRegular() {
				return
			}
		}
		if !slices.Contains(dirs, dir) {
			dirs = append(dirs, dir)
		}
	}
	if p := s.LookPath("postgres"); p != "" {
		if real, err := filepath.EvalSymlinks(p); err == nil {
			p = real
		}
		add(filepath.Dir(p))
	}
	if p := s.LookPath("pg_config"); p != "" {
		if out, err := exec.Command(p, "--bindir").Output(); err == nil {
			add(strings.TrimSpace(string(out)))
		}
	}
	for _, pattern := range s.Dirs {
		matches, _ := filepath.Glob(pattern)
		// "/usr/lib/postgresql/9.6/bin" before "/usr/lib/postgresql/15/bin" sorts wrong
		// as text: by version, newest first.
		slices.SortStableFunc(matches, func(a, b string) int { return cmp.Compare(binDirVersion(b), binDirVersion(a)) })
		for _, m := range matches {
			add(m)
		}
	}
	return dirs
}

// binDirVersion returns the version in the name of binDir's parent (15 for
// /usr/lib/postgresql/15/bin, /opt/homebrew/opt/postgresql@15/bin, /usr/pgsql-15/bin), or 0.
func binDirVersion(binDir string) float64 {
	path := filepath.Base(filepath.Dir(binDir))
	start := strings.IndexAny(path, "0123456789")
	if start < 0 {
		return 0
	}
	end := start
	for end < len(path) && (path[end] == '.' || path[end] >= '0' && path[end] <= '9') {
		end++
	}
	n, _ := strconv.ParseFloat(path[start:end], 64)
	return n
}

// BinDir returns the directory of the server binaries for a data directory of major
// version want ("" when it is not initialized yet): the first of s.BinDirs whose postgres
// is that version, else the first. It returns "" when there are none.
func (s Search) BinDir(want string) string {
	dirs := s.BinDirs()
	if len(dirs) == 0 {
		return ""
	}
	if want != "" {
		for _, dir := range dirs {
			// "postgres (PostgreSQL) 15.20 (Debian 15.20-0+deb12u1)"
			out, err := exec.Command(filepath.Join(dir, "postgres"), "--version").Output()
			if f := strings.Fields(string(out)); err == nil && len(f) >= 3 && strings.Split(f[2], ".")[0] == want {
				return dir
			}
		}
	}
	return dirs[0]
}
