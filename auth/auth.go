// Package auth verifies the callers' JWTs (golang-jwt v5), carries their identity in
// request contexts, and issues and checks the short-lived invocation tokens that fence
// a function's checkpoints to one invocation of one run.
package auth

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// DefaultTenant is the tenant of a token that names none.
const DefaultTenant = "default"

// Identity is who is calling: taken from a verified token, never the token itself.
type Identity struct {
	Subject string         `json:"subject"`
	Tenant  string         `json:"tenant"`
	Roles   []string       `json:"roles"`
	Claims  map[string]any `json:"claims,omitempty"`
}

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

// ErrUnauthorized wraps every verification failure; its message says which check failed
// and never includes the token.
var ErrUnauthorized = errors.New("unauthorized")

// Verifier checks HS256 bearer tokens with a shared secret.
type Verifier struct {
	secret []byte
	parser *jwt.Parser
}

// NewVerifier returns a Verifier for tokens signed with secret (HS256). Tokens must have
// a subject; exp and nbf are checked with 30s of leeway.
func NewVerifier(secret []byte) (*Verifier, error) {
	if len(secret) < 32 {
		return nil, errors.New("auth: the JWT secret must be at least 32 bytes")
	}
	return &Verifier{
		secret: secret,
		parser: jwt.NewParser(jwt.WithValidMethods([]string{"HS256"}), jwt.WithLeeway(30*time.Second)),
	}, nil
}

type claims struct {
	jwt.RegisteredClaims
	Tenant string   `json:"tenant,omitempty"`
	Roles  []string `json:"roles,omitempty"`
}

// Verify checks token and returns its identity. Errors wrap ErrUnauthorized.
func (v *Verifier) Verify(token string) (Identity, error) {
	var c claims
	_, err := v.parser.ParseWithClaims(token, &c, func(*jwt.Token) (any, error) { return v.secret, nil })
	if err != nil {
		return Identity{}, fmt.Errorf("%w: %s", ErrUnauthorized, reason(err))
	}
	if c.Subject == "" {
		return Identity{}, fmt.Errorf("%w: token has no subject (sub)", ErrUnauthorized)
	}
	id := Identity{Subject: c.Subject, Tenant: c.Tenant, Roles: c.Roles}
	if id.Tenant == "" {
		id.Tenant = DefaultTenant
	}
	if id.Roles == nil {
		id.Roles = []string{}
	}
	return id, nil
}

// reason names the check that failed, in words, without echoing the token.
func reason(err error) string {
	switch {
	case errors.Is(err, jwt.ErrTokenMalformed):
		return "token is malformed"
	case errors.Is(err, jwt.ErrTokenSignatureInvalid):
		return "token signature is invalid"
	case errors.Is(err, jwt.ErrTokenUnverifiable):
		return "token is signed with an algorithm that is not accepted"
	case errors.Is(err, jwt.ErrTokenExpired):
		return "token is expired"
	case errors.Is(err, jwt.ErrTokenNotValidYet):
		return "token is not valid yet"
	default:
		return "token is invalid"
	}
}

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

// NewToken signs an HS256 token for id that expires after ttl, for development and
// automation (`stepgate dev`, `stepgate token create`).
func NewToken(secret []byte, id Identity, ttl time.Duration) (string, error) {
	now := time.Now()
	c := claims{
		RegisteredClaims: jwt.RegisteredClaims{
			Subject:   id.Subject,
			IssuedAt:  jwt.NewNumericDate(now),
			ExpiresAt: jwt.NewNumericDate(now.Add(ttl)),
		},
		Tenant: id.Tenant,
		Roles:  slices.Clone(id.Roles),
	}
	return jwt.NewWithClaims(jwt.SigningMethodHS256, c).SignedString(secret)
}
