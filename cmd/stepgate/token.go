package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/stepgate/stepgate/auth"
)

// stringList is a flag that may be given many times.
type stringList []string

func (l *stringList) String() string { return strings.Join(*l, ",") }

func (l *stringList) Set(v string) error {
	for part := range strings.SplitSeq(v, ",") {
		if part = strings.TrimSpace(part); part != "" {
			*l = append(*l, part)
		}
	}
	return nil
}

// tokenCmd runs "stepgate token create": it signs a token with the first HS key of
// $STEPGATE_JWT_SECRET, or else of the `stepgate dev` instance in --dir, with the
// issuer, audience and claim names the gateway is configured with (STEPGATE_JWT_ISSUER,
// STEPGATE_JWT_AUDIENCE, STEPGATE_TENANT_CLAIM, STEPGATE_ROLES_CLAIM).
func (c *cli) tokenCmd(_ context.Context, args []string) error {
	if len(args) == 0 || args[0] != "create" {
		return usagef(`unknown command "token %s" (want: token create)`, strings.Join(args, " "))
	}
	fs := c.newFlagSet("token create", "--sub SUBJECT [--tenant T] [--role R ...] [--ttl 1h] [--dir .stepgate]")
	sub := fs.String("sub", "", "the subject (who the token is for); required")
	tenant := fs.String("tenant", auth.DefaultTenant, "the tenant")
	var roles stringList
	fs.Var(&roles, "role", "a role; repeat or separate with commas (admin has every permission)")
	ttl := fs.Duration("ttl", time.Hour, "how long the token is valid")
	dir := fs.String("dir", ".stepgate", "the `stepgate dev` folder whose key signs, when $STEPGATE_JWT_SECRET is unset")
	pos, err := parseArgs(fs, args[1:])
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("token create takes no arguments, only flags")
	}
	if *sub == "" {
		return usagef("token create needs --sub")
	}
	if *ttl <= 0 {
		return usagef("--ttl must be positive")
	}
	jwt, err := readJWTConfig(c.getenv)
	if err != nil {
		return err
	}
	maxTTL := cmp.Or(jwt.maxLifetime, auth.DefaultMaxLifetime)
	if len(jwt.secrets) == 0 {
		st, err := readDevState(*dir)
		if err != nil {
			return err
		}
		jwt.secrets = [][]byte{[]byte(st.JWTSecret)}
		maxTTL = cmp.Or(jwt.maxLifetime, devTokenTTL+time.Hour)
	}
	if *ttl > maxTTL {
		return usagef("--ttl %s is longer than the gateway's maximum token lifetime of %s (STEPGATE_JWT_MAX_LIFETIME), so it would be refused", *ttl, maxTTL)
	}
	if roles == nil {
		roles = stringList{}
	}
	cfg := auth.Config{Secrets: jwt.secrets, Algorithms: jwt.algorithms, Issuer: jwt.issuer, Audience: jwt.audience,
		TenantClaim: jwt.tenantClaim, RolesClaim: jwt.rolesClaim}
	tok, err := cfg.NewToken(auth.Identity{Subject: *sub, Tenant: *tenant, Roles: roles}, *ttl)
	if err != nil {
		return err
	}
	fmt.Fprintf(c.stdout, "STEPGATE_TOKEN=%s\n", tok)
	return nil
}

// readDevState reads the keys of a `stepgate dev` instance without creating them.
func readDevState(dir string) (devState, error) {
	st, err := loadDevStateFile(filepath.Join(dir, "dev.json"))
	if errors.Is(err, os.ErrNotExist) {
		return st, fmt.Errorf("no signing key: set STEPGATE_JWT_SECRET, or run this in the folder where `stepgate dev` ran (it keeps its key in %s)", filepath.Join(dir, "dev.json"))
	}
	return st, err
}
