package main

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/stepgate/stepgate/auth"
)

// jwtConfig is how callers' tokens are verified, read from the environment variables
// documented in docs/auth.md.
type jwtConfig struct {
	secrets        [][]byte // STEPGATE_JWT_SECRET, comma-separated; the first signs dev tokens
	publicKeyFiles []string // STEPGATE_JWT_PUBLIC_KEYS: PEM files
	jwksURL        string   // STEPGATE_JWKS_URL
	algorithms     []string // STEPGATE_JWT_ALGORITHMS; empty: what the keys can verify
	issuer         string   // STEPGATE_JWT_ISSUER
	audience       string   // STEPGATE_JWT_AUDIENCE
	leeway         time.Duration
	tenantClaim    string // STEPGATE_TENANT_CLAIM
	defaultTenant  string // STEPGATE_DEFAULT_TENANT
	rolesClaim     string // STEPGATE_ROLES_CLAIM
	scopePrefix    string // STEPGATE_SCOPE_PREFIX
	maxLifetime    time.Duration
	identityClaims []string // STEPGATE_IDENTITY_CLAIMS
}

// list splits a comma-separated setting, dropping blanks.
func list(v string) []string {
	var out []string
	for part := range strings.SplitSeq(v, ",") {
		if part = strings.TrimSpace(part); part != "" {
			out = append(out, part)
		}
	}
	return out
}

func readJWTConfig(getenv func(string) string) (jwtConfig, error) {
	j := jwtConfig{
		publicKeyFiles: list(getenv("STEPGATE_JWT_PUBLIC_KEYS")),
		jwksURL:        strings.TrimSpace(getenv("STEPGATE_JWKS_URL")),
		algorithms:     list(getenv("STEPGATE_JWT_ALGORITHMS")),
		issuer:         getenv("STEPGATE_JWT_ISSUER"),
		audience:       getenv("STEPGATE_JWT_AUDIENCE"),
		tenantClaim:    strings.TrimSpace(getenv("STEPGATE_TENANT_CLAIM")),
		defaultTenant:  strings.TrimSpace(getenv("STEPGATE_DEFAULT_TENANT")),
		rolesClaim:     strings.TrimSpace(getenv("STEPGATE_ROLES_CLAIM")),
		scopePrefix:    strings.TrimSpace(getenv("STEPGATE_SCOPE_PREFIX")),
		identityClaims: list(getenv("STEPGATE_IDENTITY_CLAIMS")),
	}
	for _, s := range list(getenv("STEPGATE_JWT_SECRET")) {
		j.secrets = append(j.secrets, []byte(s))
	}
	if v := getenv("STEPGATE_JWT_LEEWAY"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 || d > 5*time.Minute {
			return j, fmt.Errorf("STEPGATE_JWT_LEEWAY %q is not a duration from 0s to 5m, such as 30s", v)
		}
		j.leeway = d
		if d == 0 {
			j.leeway = -1 // auth.Config: none
		}
	}
	if v := getenv("STEPGATE_JWT_MAX_LIFETIME"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return j, fmt.Errorf("STEPGATE_JWT_MAX_LIFETIME %q is not a positive duration, such as 24h", v)
		}
		j.maxLifetime = d
	}
	return j, nil
}

// hasKey reports whether any verification key is configured.
func (j jwtConfig) hasKey() bool {
	return len(j.secrets) > 0 || len(j.publicKeyFiles) > 0 || j.jwksURL != ""
}

// authConfig reads the PEM files and returns the verifier's config, validated; errors
// name the environment variable to fix.
func (j jwtConfig) authConfig(log *slog.Logger) (auth.Config, error) {
	c := auth.Config{
		Secrets: j.secrets, JWKSURL: j.jwksURL, Algorithms: j.algorithms, Issuer: j.issuer,
		Audience: j.audience, Leeway: j.leeway, TenantClaim: j.tenantClaim, RolesClaim: j.rolesClaim,
		IdentityClaims: j.identityClaims, Logger: log, DefaultTenant: j.defaultTenant, ScopePrefix: j.scopePrefix,
		MaxLifetime: j.maxLifetime,
	}
	for i, s := range j.secrets {
		if len(s) < 32 {
			return c, fmt.Errorf("STEPGATE_JWT_SECRET: secret %d is %d bytes; each needs at least 32 (e.g. openssl rand -base64 32)", i+1, len(s))
		}
	}
	for _, path := range j.publicKeyFiles {
		b, err := os.ReadFile(path)
		if err != nil {
			return c, fmt.Errorf("STEPGATE_JWT_PUBLIC_KEYS: %w", err)
		}
		keys, err := auth.ParsePublicKeys(b)
		if err != nil {
			return c, fmt.Errorf("STEPGATE_JWT_PUBLIC_KEYS: %s: %w", path, err)
		}
		c.PublicKeys = append(c.PublicKeys, keys...)
	}
	if err := c.Validate(); err != nil {
		return c, fmt.Errorf("token verification (STEPGATE_JWT_SECRET, STEPGATE_JWT_PUBLIC_KEYS, STEPGATE_JWKS_URL, STEPGATE_JWT_ALGORITHMS, STEPGATE_*_CLAIM): %s",
			strings.TrimPrefix(err.Error(), "auth: "))
	}
	return c, nil
}

// errNoVerificationKey is what serve says when it could not verify any token.
var errNoVerificationKey = errors.New("STEPGATE_JWT_SECRET (HS secrets of at least 32 bytes, comma-separated for rotation), " +
	"STEPGATE_JWT_PUBLIC_KEYS (PEM files of RSA, ECDSA or Ed25519 public keys) or STEPGATE_JWKS_URL (your identity provider's JWKS): " +
	"at least one, to verify callers' tokens")
