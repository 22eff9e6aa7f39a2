package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
)

// runsExport runs "stepgate runs export ID [-o FILE]": the run's export (GET
// /v1/runs/{id}/export, a RunExport of format stepgate.run/1), indented, to stdout or to
// FILE. FILE is written only once the whole export has arrived, readable by its owner
// only (it holds the run's input, output and journal); an existing FILE is replaced.
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
	if err := os.WriteFile(out, doc.Bytes(), 0o600); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	_, err = fmt.Fprintf(c.stderr, "run %s exported to %s\n", pos[0], out)
	return err
}
