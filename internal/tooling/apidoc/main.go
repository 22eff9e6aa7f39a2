// Command apidoc writes the HTTP API reference (docs/api.md) and the function
// protocol reference (docs/protocol-reference.md) from openapi.yaml, the source of
// truth of both. It reads openapi.yaml as YAML nodes, so operations, fields and
// schemas keep the file's order, and the output is the same for the same file.
//
// Usage, from anywhere in the module:
//
//	go run ./internal/tooling/apidoc -o docs/api.md
//
// writes -o and, next to it, protocol-reference.md (-protocol names another file of
// that directory). -spec defaults to the module's openapi.yaml.
package main

//go:generate go run . -o ../../../docs/api.md

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/stepgate/stepgate/internal/tooling/repo"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "apidoc:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("apidoc", flag.ContinueOnError)
	specPath := fs.String("spec", "", "the OpenAPI file (default: openapi.yaml at the module's root)")
	out := fs.String("o", "", "the API reference to write (required)")
	protocol := fs.String("protocol", "protocol-reference.md", "the protocol reference's file name, written in -o's directory")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *out == "" || fs.NArg() > 0 {
		return errors.New("usage: apidoc [-spec openapi.yaml] -o docs/api.md [-protocol protocol-reference.md]")
	}
	if filepath.Base(*protocol) != *protocol {
		return fmt.Errorf("-protocol %q: a file name, not a path: the two pages link to each other", *protocol)
	}
	if *specPath == "" {
		root, err := repo.Root()
		if err != nil {
			return err
		}
		*specPath = filepath.Join(root, "openapi.yaml")
	}
	api, proto, err := render(*specPath, filepath.Dir(*out), filepath.Base(*out), *protocol)
	if err != nil {
		return err
	}
	if err := os.WriteFile(*out, []byte(api), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(filepath.Dir(*out), *protocol), []byte(proto), 0o644)
}

// render generates both pages for a directory dir, the API reference named api and
// the protocol reference named protocol.
func render(specPath, dir, api, protocol string) (string, string, error) {
	s, err := loadSpec(specPath)
	if err != nil {
		return "", "", err
	}
	absDir, err := filepath.Abs(dir)
	if err != nil {
		return "", "", err
	}
	absSpec, err := filepath.Abs(specPath)
	if err != nil {
		return "", "", err
	}
	rel, err := filepath.Rel(absDir, absSpec)
	if err != nil {
		return "", "", err
	}
	return generate(s, files{api: api, protocol: protocol, spec: filepath.ToSlash(rel)})
}
