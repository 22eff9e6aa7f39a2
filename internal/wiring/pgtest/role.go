package pgtest

import (
	"context"
	"crypto/rand"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

// NewRole creates a login role on the server of the database at dbURL, with the
// attributes given (such as "CREATEROLE" or "PASSWORD 'p'"), named after prefix and a
// random suffix, and returns its name (a plain identifier, lower case). When the test
// ends, before the database is dropped, what the role owns is given back and the role
// dropped.
func NewRole(tb testing.TB, dbURL, prefix, attributes string) string {
	tb.Helper()
	ctx := tb.Context()
	name := prefix + "_" + strings.ToLower(rand.Text()[:10])
	ident := pgx.Identifier{name}.Sanitize()
	admin, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		tb.Fatalf("pgtest: role: %v", err)
	}
	defer admin.Close(context.WithoutCancel(ctx))
	if _, err := admin.Exec(ctx, `CREATE ROLE `+ident+` LOGIN `+attributes); err != nil {
		tb.Fatalf("pgtest: create role %s: %v", name, err)
	}
	tb.Cleanup(func() {
		ctx := context.WithoutCancel(ctx)
		conn, err := pgx.Connect(ctx, dbURL)
		if err != nil {
			tb.Errorf("pgtest: drop role %s: %v", name, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, `REASSIGN OWNED BY `+ident+` TO CURRENT_USER; DROP OWNED BY `+ident+`; DROP ROLE `+ident); err != nil {
			tb.Errorf("pgtest: drop role %s: %v", name, err)
		}
	})
	return name
}
