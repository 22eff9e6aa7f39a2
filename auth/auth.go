// Package auth verifies the callers' JWTs (golang-jwt v5) with the operator's keys, turns
// them into an [Identity] (subject, tenant, roles, chosen claims; never the token), maps
// roles to [access.Permission]s, and issues and checks the short-lived invocation tokens that
// fence a function's checkpoints to one invocation of one run.
package auth

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/stepgate/stepgate/access"
)

// DefaultTenant is the tenant of a token that names none.
const DefaultTenant = "default"

// Identity is who is calling (see access.Identity).
type Identity = access.Identity

type identityKey struct{}

// WithIdentity returns a context that carries id.
func WithIdentity(ctx context.Context, id Identity) context.Context {
	return context.WithValue(ctx, identityKey{}, id)
}

// IdentityFrom returns the identity WithIdentity put in ctx, and whether there was one.
func IdentityFrom(ctx context.Context) (Identity, bool) {
	id, ok := ctx.Value(identityKey{}).(Identity)
	return id, ok
}

type expiryKey struct{}

// WithExpiry returns a context that carries when the caller's token expires.
func WithExpiry(ctx context.Context, exp time.Time) context.Context {
	return context.WithValue(ctx, expiryKey{}, exp)
}

// ExpiryFrom returns when the caller's token expires, as WithExpiry put it in ctx, and
// whether it did.
func ExpiryFrom(ctx context.Context) (time.Time, bool) {
	exp, ok := ctx.Value(expiryKey{}).(time.Time)
	return exp, ok
}

// ErrUnauthorized wraps every verification failure; its message says which check failed
// and never includes the token.
var ErrUnauthorized = errors.New("unauthorized")

// BearerToken returns the token of an `Authorization: Bearer <token>` header value.
func BearerToken(header string) (string, error) {
	scheme, token, ok := strings.Cut(header, " ")
	if header == "" {
		return "", fmt.Errorf("%w: missing Authorization header (want: Bearer <token>)", ErrUnauthorized)
	}
	if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(token) == "" {
		return "", fmt.Errorf("%w: Authorization header is not a bearer token", ErrUnauthorized)
	}
	return strings.TrimSpace(token), nil
}
