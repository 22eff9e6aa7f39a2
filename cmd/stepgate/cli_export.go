package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
)

// runsExport runs "stepgate runs export ID [-o FILE]": the run's export (GET
// /v1/runs/{id}/export, a RunExport of format stepgate.run/1), indented, to stdout (also
// with -o -) or to FILE. FILE is written only once the whole export has arrived,
// readable by its owner only (it holds the run's input, output and journal): an existing
// FILE is replaced whole, by a rename, or left as it was.
func (c *cli) runsExport(ctx context.Context, args []string) error {
	fs := c.newFlagSet("runs export", "ID [-o FILE]")
	cf := addClientFlags(fs, true)
	var out string
	fs.StringVar(&out, "o", "", "write the export to `FILE` (default: stdout)")
	fs.StringVar(&out, "output", "", "the same as -o")
	pos, err := parseCommand(fs, args, "ID")
	if err != nil {
		return err
	}
	cl, err := c.client(cf, nil)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	what := "export run " + pos[0]
	resp, err := cl.ExportRunWithResponse(ctx, pos[0])
	if err != nil {
		return requestError(what, err)
	}
	if err := expect(resp, http.StatusOK); err != nil {
		return err
	}
	var doc bytes.Buffer
	if err := json.Indent(&doc, resp.Body, "", "  "); err != nil {
		return fmt.Errorf("%s: the answer is not JSON: %w", what, err)
	}
	doc.WriteByte('\n')
	if out == "" || out == "-" {
		_, err = c.stdout.Write(doc.Bytes())
		return err
	}
	if err := writeFileAtomic(out, doc.Bytes()); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	_, err = fmt.Fprintf(c.stderr, "run %s exported to %s\n", pos[0], out)
	return err
}

// writeFileAtomic replaces path with data, readable by its owner only: data goes to a new
// file in path's directory, which is then renamed to path. On an error path is as it was.
func writeFileAtomic(path string, data []byte) (err error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	if _, err := f.Write(data); err != nil {
		return err
	}
	if err := f.Chmod(0o600); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}
