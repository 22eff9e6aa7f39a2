package auth

import (
	"errors"
	"slices"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// NewToken signs an HS256 token for id that expires after ttl, with the first secret of
// c, its issuer and audience when set, and the tenant and roles in c's claims, so that a
// Verifier of c accepts it. For development and automation (`stepgate dev`, `stepgate
// token create`); production callers bring tokens from their identity provider.
func (c Config) NewToken(id Identity, ttl time.Duration) (string, error) {
	if len(c.Secrets) == 0 {
		return "", errors.New("auth: no HS secret to sign tokens with")
	}
	c = c.withDefaults()
	if !slices.Contains(c.Algorithms, "HS256") {
		return "", errors.New("auth: HS256 is not an accepted algorithm, so a token signed with it would be refused")
	}
	now := time.Now()
	claims := jwt.MapClaims{}
	for k, v := range id.Claims {
		claims[k] = v
	}
	claims["sub"] = id.Subject
	claims["iat"] = jwt.NewNumericDate(now)
	claims["exp"] = jwt.NewNumericDate(now.Add(ttl))
	if c.Issuer != "" {
		claims["iss"] = c.Issuer
	}
	if c.Audience != "" {
		claims["aud"] = c.Audience
	}
	if id.Tenant != "" {
		claims[c.TenantClaim] = id.Tenant
	}
	if len(id.Roles) > 0 {
		claims[c.RolesClaim] = slices.Clone(id.Roles)
	}
	return jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString(c.Secrets[0])
}

// NewToken signs an HS256 token for id with secret that expires after ttl; see
// [Config.NewToken].
func NewToken(secret []byte, id Identity, ttl time.Duration) (string, error) {
	return Config{Secrets: [][]byte{secret}}.NewToken(id, ttl)
}
