// Markblocks puts an example comment (<!-- example: PATH --> or
// <!-- example: PATH#REGION -->) before each block of README.md and docs/*.md that
// equals the text of an example, a file under examples/ or sdk/typescript/examples/ or
// one of its regions, so that the readme package's tests check the block against it
// from then on. The go-wrap or ts-fragment comment before such a block is replaced:
// the example is compiled where it lives. Blocks that already name an example are left
// as they are, so running it again changes nothing.
//
// Usage, from anywhere in the repository:
//
//	go run ./internal/tooling/readme/cmd/markblocks [-n] [path ...]
//
// The paths (files or directories, relative to the root) replace the default example
// directories. With -n it says what it would mark, and writes nothing.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/stepgate/stepgate/internal/tooling/repo"

	"github.com/stepgate/stepgate/internal/tooling/readme"
)

func main() {
	dryRun := flag.Bool("n", false, "say what would be marked; write nothing")
	flag.Parse()
	if err := run(*dryRun, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "markblocks:", err)
		os.Exit(1)
	}
}

func run(dryRun bool, paths []string) error {
	root, err := repo.Root()
	if err != nil {
		return err
	}
	if len(paths) == 0 {
		paths = readme.ExampleDirs
	}
	sources, err := readme.Sources(root, paths...)
	if err != nil {
		return err
	}
	docs, err := readme.Docs(root)
	if err != nil {
		return err
	}
	var errs []error
	for _, doc := range docs {
		path := filepath.Join(root, doc)
		text, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		marked, marks, ambiguous, err := readme.MarkExamples(doc, string(text), sources)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, a := range ambiguous {
			errs = append(errs, errors.New(a+": mark it by hand"))
		}
		for _, m := range marks {
			replaced := ""
			if m.Replaced != "" {
				replaced = " (instead of its " + m.Replaced + " comment)"
			}
			fmt.Printf("%s:%d: <!-- example: %s -->%s\n", doc, m.Line, m.Example, replaced)
		}
		if !dryRun && marked != string(text) {
			if err := os.WriteFile(path, []byte(marked), 0o644); err != nil {
				return err
			}
		}
	}
	return errors.Join(errs...)
}
