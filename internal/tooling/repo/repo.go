// Package repo finds the stepgate repository's root for the tools and tests that read
// its files (the docs' generators and checks, the release and npm packaging tools).
package repo

import (
	"errors"
	"os"
	"path/filepath"
)

// Root returns the nearest directory at or above the working directory that holds a
// go.mod: the module's root when run inside it (go run, go test and go generate all
// run there or below).
func Root() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod at or above the working directory: run it inside the stepgate repository")
		}
		dir = parent
	}
}
