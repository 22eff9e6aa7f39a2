package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/stepgate/stepgate/auth"
	"github.com/stepgate/stepgate/journal"
	"github.com/stepgate/stepgate/protocol"
)

// keys dispatches "stepgate keys ...". With no subcommand (or only flags) it lists the
// public keys.
func (c *cli) keys(ctx context.Context, args []string) error {
	if len(args) == 0 || isFlag(args[0]) {
		return c.keysList(ctx, args)
	}
	switch sub, rest := args[0], args[1:]; sub {
	case "list", "ls":
		return c.keysList(ctx, rest)
	case "secrets":
		return c.keysSecrets(ctx, rest)
	case "rotate":
		return c.keysRotate(ctx, rest)
	case "rotate-invocation":
		return cmdRotateInvocationKey(ctx, rest, c.getenv, c.stdout)
	default:
		return usagef("unknown command \"keys %s\" (want list, secrets, rotate or rotate-invocation)", sub)
	}
}

// writeKeySet prints a tenant's public keys and the line a function's environment takes.
func (c *cli) writeKeySet(set *protocol.SigningKeySet) error {
	tw := newTable(c.stdout)
	fmt.Fprintf(tw, "KID\tPUBLIC KEY (Ed25519)\tCREATED\tRETIRES\n")
	xs := make([]string, 0, len(set.Keys))
	for _, k := range set.Keys {
		retires := "-"
		if k.RetiresAt != nil {
			retires = formatTime(k.RetiresAt, c.loc)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", k.Kid, k.X, formatTime(&k.CreatedAt, c.loc), retires)
		xs = append(xs, k.X)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(c.stdout, "\n# tenant %s: your functions verify the gateway's requests with\nSTEPGATE_PUBLIC_KEYS=%s\n", set.Tenant, strings.Join(xs, ","))
	return err
}

// keysList runs "stepgate keys".
func (c *cli) keysList(ctx context.Context, args []string) error {
	return singleRequest(ctx, c, args, "keys list", "", "list signing keys", []int{http.StatusOK},
		func(ctx context.Context, cl *protocol.ClientWithResponses, _ string) (*protocol.ListSigningKeysResponse, error) {
			return cl.ListSigningKeysWithResponse(ctx)
		},
		func(resp *protocol.ListSigningKeysResponse, _ string) error { return c.writeKeySet(resp.JSON200) })
}

// keysSecrets runs "stepgate keys secrets".
func (c *cli) keysSecrets(ctx context.Context, args []string) error {
	return singleRequest(ctx, c, args, "keys secrets", "", "list signing secrets", []int{http.StatusOK},
		func(ctx context.Context, cl *protocol.ClientWithResponses, _ string) (*protocol.ListSigningSecretsResponse, error) {
			return cl.ListSigningSecretsWithResponse(ctx)
		},
		func(resp *protocol.ListSigningSecretsResponse, _ string) error {
			xs := make([]string, 0, len(resp.JSON200.Secrets))
			for _, s := range resp.JSON200.Secrets {
				xs = append(xs, s.Secret)
			}
			_, err := fmt.Fprintf(c.stdout, "# tenant %s: HMAC-SHA256 secrets; keep them secret (the public keys are the stronger choice)\nSTEPGATE_HMAC_SECRETS=%s\n",
				resp.JSON200.Tenant, strings.Join(xs, ","))
			return err
		})
}

// keysRotate runs "stepgate keys rotate [--overlap 24h]".
func (c *cli) keysRotate(ctx context.Context, args []string) error {
	fs := c.newFlagSet("keys rotate", "[--overlap 24h]")
	cf := addClientFlags(fs, true)
	overlap := fs.Duration("overlap", 24*time.Hour, "how long the replaced key keeps signing, so functions have time to take the new one")
	if _, err := parseCommand(fs, args); err != nil {
		return err
	}
	cl, err := c.client(cf, nil)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	resp, err := cl.RotateSigningKeyWithResponse(ctx, &protocol.RotateSigningKeyParams{Overlap: new(overlap.String())})
	if err != nil {
		return requestError("rotate signing key", err)
	}
	if err := expect(resp, http.StatusOK); err != nil {
		return err
	}
	if cf.json {
		return printRaw(c.stdout, resp.Body)
	}
	return c.writeKeySet(resp.JSON200)
}

// cmdRotateInvocationKey rotates the deployment's invocation token key in $DATABASE_URL:
// an operator's command, not a tenant's.
func cmdRotateInvocationKey(ctx context.Context, args []string, getenv func(string) string, out io.Writer) error {
	fs := flag.NewFlagSet("keys rotate-invocation", flag.ContinueOnError)
	overlap := fs.Duration("overlap", time.Hour, "how long the old key still verifies (longer than the longest invocation)")
	if err := fs.Parse(args); err != nil {
		return errFlagsReported
	}
	url := getenv("DATABASE_URL")
	if url == "" {
		return errors.New("keys rotate-invocation needs DATABASE_URL: it is the deployment's operators' command")
	}
	if getenv("STEPGATE_INVOCATION_KEY") != "" {
		return errors.New("STEPGATE_INVOCATION_KEY is set: the invocation keys are yours, not the database's; rotate by listing the new key first")
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return fmt.Errorf("DATABASE_URL: %w", err)
	}
	journal.ConfigurePool(cfg, true)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer pool.Close()
	if err := auth.RotateInvocationKey(ctx, pool, *overlap); err != nil {
		return err
	}
	_, err = fmt.Fprintf(out, "rotated: gateways sign with the new key within a minute; the old one verifies for %s\n", *overlap)
	return err
}
