package auth

import (
	"bytes"
	"cmp"
	"context"
	"crypto"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"
	"unicode"

	"github.com/golang-jwt/jwt/v5"
)

// DefaultLeeway is the clock difference a Verifier allows on exp, nbf and iat.
const DefaultLeeway = 30 * time.Second

// MaxTokenBytes bounds the tokens a Verifier reads; a longer one is refused unread.
const MaxTokenBytes = 32 << 10

// DefaultMaxLifetime is the longest a token may be valid for, unless configured.
const DefaultMaxLifetime = 24 * time.Hour

// Config configures a [Verifier]: which keys and algorithms verify callers' tokens, which
// claims are required, and where the identity is read from. At least one key source
// (Secrets, PublicKeys or JWKSURL) is required.
type Config struct {
	// Secrets verify HS256/384/512 tokens; each must be at least 32 bytes. A token
	// signed with any of them is accepted, so a rotation lists the new and the old
	// secret; [Config.NewToken] signs with the first.
	Secrets [][]byte
	// PublicKeys verify RS256/384/512 and PS256/384/512 (*rsa.PublicKey, at least 2048
	// bits), ES256/384/512 (*ecdsa.PublicKey on P-256/P-384/P-521) and EdDSA
	// (ed25519.PublicKey) tokens. [ParsePublicKeys] reads them from PEM.
	PublicKeys []crypto.PublicKey
	// JWKSURL is an identity provider's JSON Web Key Set (for example Auth0's
	// https://TENANT.auth0.com/.well-known/jwks.json or Keycloak's
	// https://HOST/realms/REALM/protocol/openid-connect/certs). It is fetched when the
	// Verifier is made, again every JWKSRefreshInterval, and at once when a token
	// names a key id (kid) it does not know, at most once per JWKSRefreshLimit. Only
	// its public keys are used.
	JWKSURL string
	// JWKSClient fetches JWKSURL. Defaults to a client with a 10s timeout.
	JWKSClient *http.Client
	// JWKSRefreshInterval is how often the key set is fetched again. Defaults to 1h.
	JWKSRefreshInterval time.Duration
	// JWKSRefreshLimit is the least time between two fetches triggered by unknown key
	// ids; a token with an unknown kid in between is refused at once. Defaults to 10s.
	JWKSRefreshLimit time.Duration
	// Algorithms are the accepted values of a token's alg header, from [Algorithms].
	// Defaults to every algorithm the configured keys can verify (a JWKS: every
	// asymmetric one). Each must have a key that can verify it.
	Algorithms []string
	// Issuer, when set, is required as the token's iss.
	Issuer string
	// Audience, when set, must be one of the token's aud values.
	Audience string
	// Leeway is the clock difference allowed on exp, nbf and iat. Defaults to
	// DefaultLeeway; a negative value allows none.
	Leeway time.Duration
	// TenantClaim names the claim holding the caller's tenant. Defaults to "tenant". A
	// name with dots that is not a claim itself is read as a path into nested objects
	// ("org.tenant").
	TenantClaim string
	// DefaultTenant is the tenant of a token without a tenant claim, for a
	// single-tenant deployment. Empty (the default): such a token is refused.
	DefaultTenant string
	// RolesClaim names the claim holding the caller's roles: an array of strings or a
	// string of roles separated by spaces or commas. Defaults to "roles". Dotted
	// names work as for TenantClaim (Keycloak: "realm_access.roles").
	RolesClaim string
	// ScopePrefix, when set, makes the space-separated "scope" claim grant roles: each
	// scope that starts with it grants the role after it ("stepgate:runs:invoke"
	// grants "runs:invoke" with the prefix "stepgate:"); other scopes grant nothing.
	// Empty (the default): scopes grant nothing.
	ScopePrefix string
	// MaxLifetime refuses tokens valid for longer: exp - iat, or exp - now without an
	// iat. Defaults to DefaultMaxLifetime.
	MaxLifetime time.Duration
	// IdentityClaims are the other claims copied into [Identity].Claims when the token
	// has them (for example "email", "org"), so they are stored with runs and sent to
	// functions. Nothing else of the token is kept.
	IdentityClaims []string
	// Logger receives failed JWKS fetches. Defaults to slog.Default().
	Logger *slog.Logger
}

// withDefaults returns c with its defaults applied.
func (c Config) withDefaults() Config {
	c.TenantClaim = cmp.Or(c.TenantClaim, "tenant")
	c.RolesClaim = cmp.Or(c.RolesClaim, "roles")
	switch {
	case c.Leeway == 0:
		c.Leeway = DefaultLeeway
	case c.Leeway < 0:
		c.Leeway = 0
	}
	c.JWKSRefreshInterval = cmp.Or(c.JWKSRefreshInterval, time.Hour)
	c.MaxLifetime = cmp.Or(c.MaxLifetime, DefaultMaxLifetime)
	c.JWKSRefreshLimit = cmp.Or(c.JWKSRefreshLimit, 10*time.Second)
	if c.JWKSClient == nil {
		c.JWKSClient = &http.Client{Timeout: 10 * time.Second}
	}
	c.Logger = cmp.Or(c.Logger, slog.Default())
	if len(c.Algorithms) == 0 {
		c.Algorithms = c.keyAlgorithms()
	}
	return c
}

// keyAlgorithms returns the algorithms the configured keys can verify, in the order of
// [Algorithms].
func (c Config) keyAlgorithms() []string {
	can := map[string]bool{}
	if len(c.Secrets) > 0 {
		for _, a := range hmacAlgorithms {
			can[a] = true
		}
	}
	for _, k := range c.PublicKeys {
		algs, _ := keyAlgorithms(k) // Validate reports bad keys
		for _, a := range algs {
			can[a] = true
		}
	}
	if c.JWKSURL != "" {
		for _, a := range asymmetricAlgorithms() {
			can[a] = true
		}
	}
	var algs []string
	for _, a := range Algorithms() {
		if can[a] {
			algs = append(algs, a)
		}
	}
	return algs
}

// Validate reports the first problem of c, in words an operator can act on: no key,
// a short secret, a weak or unsupported public key, a JWKS URL that is not http(s), an
// unknown algorithm, an algorithm no key can verify, or keys no accepted algorithm uses.
func (c Config) Validate() error {
	if len(c.Secrets) == 0 && len(c.PublicKeys) == 0 && c.JWKSURL == "" {
		return errors.New("auth: no key to verify tokens: configure an HS secret, a public key or a JWKS URL")
	}
	for i, s := range c.Secrets {
		if len(s) < 32 {
			return fmt.Errorf("auth: HS secret %d is %d bytes; at least 32 are required", i+1, len(s))
		}
	}
	for i, k := range c.PublicKeys {
		if _, err := keyAlgorithms(k); err != nil {
			return fmt.Errorf("auth: public key %d: %w", i+1, err)
		}
	}
	if c.JWKSURL != "" {
		u, err := url.Parse(c.JWKSURL)
		if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			return fmt.Errorf("auth: JWKS URL %q is not an http(s) URL", c.JWKSURL)
		}
	}
	if c.Leeway > 5*time.Minute {
		return fmt.Errorf("auth: a leeway of %s is more than the 5m allowed", c.Leeway)
	}
	if c.MaxLifetime < 0 {
		return fmt.Errorf("auth: a maximum token lifetime of %s is not positive", c.MaxLifetime)
	}
	if c.DefaultTenant != "" && !validTenant(c.DefaultTenant) {
		return fmt.Errorf("auth: default tenant %q is not a tenant: 1 to 255 printable characters", c.DefaultTenant)
	}
	c = c.withDefaults()
	can := c.keyAlgorithms()
	for _, a := range c.Algorithms {
		switch {
		case strings.EqualFold(a, "none"):
			return errors.New(`auth: algorithm "none" is never accepted`)
		case !slices.Contains(Algorithms(), a):
			return fmt.Errorf("auth: algorithm %q is not one of %s", a, strings.Join(Algorithms(), ", "))
		case !slices.Contains(can, a):
			return fmt.Errorf("auth: algorithm %s is accepted but no configured key can verify it", a)
		}
	}
	if len(c.Algorithms) == 0 {
		return errors.New("auth: no algorithm is accepted")
	}
	if len(c.Secrets) > 0 && !slices.ContainsFunc(c.Algorithms, func(a string) bool { return slices.Contains(hmacAlgorithms, a) }) {
		return errors.New("auth: HS secrets are configured but no HS algorithm is accepted")
	}
	for i, k := range c.PublicKeys {
		algs, _ := keyAlgorithms(k)
		if !slices.ContainsFunc(c.Algorithms, func(a string) bool { return slices.Contains(algs, a) }) {
			return fmt.Errorf("auth: public key %d can verify only %s, and none of them is accepted", i+1, strings.Join(algs, ", "))
		}
	}
	for _, name := range append([]string{c.TenantClaim, c.RolesClaim}, c.IdentityClaims...) {
		if strings.TrimSpace(name) == "" {
			return errors.New("auth: a claim name is empty")
		}
	}
	return nil
}

// Verifier checks bearer JWTs and returns the caller's [Identity]. It is safe for
// concurrent use. Close it to stop refreshing a JWKS.
type Verifier struct {
	cfg    Config
	parser *jwt.Parser
	jwks   *jwks // nil without a JWKS URL
	cache  verified
}

// NewVerifier returns a Verifier for cfg, after [Config.Validate]. With a JWKS URL it
// fetches the key set before returning; a failed fetch is logged, not returned, so a
// gateway starts while its identity provider is down and fetches again on the first
// token with an unknown key id.
func NewVerifier(cfg Config) (*Verifier, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	opts := []jwt.ParserOption{
		jwt.WithValidMethods(cfg.Algorithms),
		jwt.WithLeeway(cfg.Leeway),
		jwt.WithExpirationRequired(),
		jwt.WithIssuedAt(),
	}
	if cfg.Issuer != "" {
		opts = append(opts, jwt.WithIssuer(cfg.Issuer))
	}
	if cfg.Audience != "" {
		opts = append(opts, jwt.WithAudience(cfg.Audience))
	}
	v := &Verifier{cfg: cfg, parser: jwt.NewParser(opts...)}
	if cfg.JWKSURL != "" {
		var err error
		if v.jwks, err = newJWKS(cfg); err != nil {
			return nil, err
		}
	}
	return v, nil
}

// Close stops the JWKS refreshes. The Verifier keeps verifying with the keys it has.
func (v *Verifier) Close() {
	if v.jwks != nil {
		v.jwks.close()
	}
}

// Algorithms returns the algorithms v accepts.
func (v *Verifier) Algorithms() []string { return slices.Clone(v.cfg.Algorithms) }

// Errors a key lookup returns; reason turns them into words.
var (
	errUnknownKID = errors.New("unknown kid")
	errCrit       = errors.New("crit")
	errNoKey      = errors.New("no key for alg")
	errJWKSKey    = errors.New("jwks key unusable")
)

// Verify checks token and returns its identity. ctx bounds a JWKS fetch for an
// unknown key id. Every error wraps ErrUnauthorized and says which check failed:
// format, algorithm, key id, signature, a claim named twice, exp, nbf, iat, iss, aud, sub,
// lifetime, crit, or the tenant or roles claim; none echoes the token.
func (v *Verifier) Verify(ctx context.Context, token string) (Identity, error) {
	id, _, err := v.Check(ctx, token)
	return id, err
}

// Check is Verify, also returning when the token expires (its exp), so that what it
// opens (a live stream) can end then. A token that passed every check is remembered,
// by its SHA-256, for at most verifiedFor and never past its exp: its next uses within
// that time are not parsed and checked again (a client sends one token with many
// requests). So a key taken out of a JWKS stops opening the tokens it signed within
// verifiedFor of the key set's refresh, as other tokens do at the refresh itself.
func (v *Verifier) Check(ctx context.Context, token string) (Identity, time.Time, error) {
	if len(token) > MaxTokenBytes {
		return Identity{}, time.Time{}, fmt.Errorf("%w: token is longer than %d bytes", ErrUnauthorized, MaxTokenBytes)
	}
	key := sha256.Sum256([]byte(token))
	now := time.Now()
	if id, exp, ok := v.cache.get(key, now); ok {
		return id, exp, nil
	}
	id, exp, err := v.check(ctx, token)
	if err == nil {
		v.cache.put(key, id, exp, now)
	}
	return id, exp, err
}

// check is Check without the memory of verified tokens.
func (v *Verifier) check(ctx context.Context, token string) (Identity, time.Time, error) {
	claims := jwt.MapClaims{}
	var kidErr error // a JWKS lookup that failed while other keys were tried
	t, err := v.parser.ParseWithClaims(token, claims, func(t *jwt.Token) (any, error) { return v.keys(ctx, t, &kidErr) })
	if err != nil {
		if errors.Is(err, jwt.ErrTokenSignatureInvalid) && kidErr != nil {
			err = errors.Join(kidErr, err)
		}
		return Identity{}, time.Time{}, fmt.Errorf("%w: %s", ErrUnauthorized, v.reason(err, t, claims))
	}
	if err := v.checkUniqueClaims(token); err != nil {
		return Identity{}, time.Time{}, fmt.Errorf("%w: %s", ErrUnauthorized, err)
	}
	if err := v.checkLifetime(claims); err != nil {
		return Identity{}, time.Time{}, fmt.Errorf("%w: %s", ErrUnauthorized, err)
	}
	id, err := v.identity(claims)
	if err != nil {
		return Identity{}, time.Time{}, fmt.Errorf("%w: %s", ErrUnauthorized, err)
	}
	exp, _ := claims.GetExpirationTime() // checked by checkLifetime
	return id, exp.Time, nil
}

// checkUniqueClaims refuses a token whose payload names a key twice in any object: a
// JSON decoder keeps the last, another reader may keep the first, so the token would
// say two things (two subjects, two tenants). token's signature is verified already.
func (v *Verifier) checkUniqueClaims(token string) error {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return errors.New("token is malformed (want a JWT: three base64url parts separated by dots)")
	}
	payload, err := v.parser.DecodeSegment(parts[1])
	if err != nil {
		return errors.New("token is malformed (want a JWT: three base64url parts separated by dots)")
	}
	if key, ok := duplicateKey(json.NewDecoder(bytes.NewReader(payload))); ok {
		return fmt.Errorf("token payload names the claim %.64q more than once (a duplicate key)", key)
	}
	return nil
}

// duplicateKey reads one JSON value from d and returns the first key that an object of it
// (at any depth) has twice. A value d cannot read has none: the JWT parser read it first.
func duplicateKey(d *json.Decoder) (string, bool) {
	tok, err := d.Token()
	if err != nil {
		return "", false
	}
	switch tok {
	case json.Delim('{'):
		seen := map[string]bool{}
		for d.More() {
			k, err := d.Token()
			if err != nil {
				return "", false
			}
			key, _ := k.(string)
			if seen[key] {
				return key, true
			}
			seen[key] = true
			if key, ok := duplicateKey(d); ok {
				return key, true
			}
		}
		_, _ = d.Token() // '}'
	case json.Delim('['):
		for d.More() {
			if key, ok := duplicateKey(d); ok {
				return key, true
			}
		}
		_, _ = d.Token() // ']'
	}
	return "", false
}

// checkLifetime refuses a token valid for longer than the maximum lifetime: a token
// that leaks is then useful for that long at most.
func (v *Verifier) checkLifetime(c jwt.MapClaims) error {
	exp, err := c.GetExpirationTime()
	if err != nil || exp == nil {
		return errors.New("token has no expiry (exp)")
	}
	from, what := time.Now(), "exp - now"
	if iat, err := c.GetIssuedAt(); err == nil && iat != nil {
		from, what = iat.Time, "exp - iat"
	}
	if life := exp.Sub(from); life > v.cfg.MaxLifetime+v.cfg.Leeway {
		return fmt.Errorf("token is valid for %s (%s), longer than the gateway's maximum of %s (STEPGATE_JWT_MAX_LIFETIME)",
			life.Round(time.Second), what, v.cfg.MaxLifetime)
	}
	return nil
}

// keys returns the keys that may have signed t: the secrets for an HS algorithm; else
// the public keys of its family, and the JWKS key its kid names (or, without a kid,
// every JWKS key of its family). When the JWKS lookup fails but other keys are left to
// try, its error goes to kidErr.
func (v *Verifier) keys(ctx context.Context, t *jwt.Token, kidErr *error) (any, error) {
	if _, ok := t.Header["crit"]; ok {
		// RFC 7515 4.1.11: a critical extension that is not understood makes the token
		// invalid, and this gateway understands none.
		return nil, errCrit
	}
	alg := t.Method.Alg()
	var set jwt.VerificationKeySet
	for _, s := range v.cfg.Secrets {
		if keyFits(alg, s) {
			set.Keys = append(set.Keys, s)
		}
	}
	for _, k := range v.cfg.PublicKeys {
		if keyFits(alg, k) {
			set.Keys = append(set.Keys, k)
		}
	}
	if v.jwks != nil && !strings.HasPrefix(alg, "HS") {
		keys, err := v.jwks.keys(ctx, t)
		if err != nil && len(set.Keys) == 0 {
			return nil, err
		}
		*kidErr = err
		set.Keys = append(set.Keys, keys...)
	}
	if len(set.Keys) == 0 {
		return nil, errNoKey
	}
	return set, nil
}

// reason names the check that failed, in words, without echoing the token.
func (v *Verifier) reason(err error, t *jwt.Token, claims jwt.MapClaims) string {
	switch {
	case errors.Is(err, jwt.ErrTokenMalformed):
		return "token is malformed (want a JWT: three base64url parts separated by dots)"
	case errors.Is(err, errCrit):
		return "token header names critical extensions (crit) this gateway does not understand"
	case t != nil && t.Method != nil && !slices.Contains(v.cfg.Algorithms, t.Method.Alg()):
		return fmt.Sprintf("token algorithm %s is not accepted (accepted: %s)", t.Method.Alg(), strings.Join(v.cfg.Algorithms, ", "))
	case errors.Is(err, errUnknownKID) && errors.Is(err, jwt.ErrTokenSignatureInvalid):
		return "token key id (kid) is not in the JWKS, and no configured public key verifies its signature"
	case errors.Is(err, errUnknownKID):
		return "token key id (kid) is not in the JWKS"
	case errors.Is(err, errJWKSKey) && errors.Is(err, jwt.ErrTokenSignatureInvalid):
		return "the JWKS key named by the token's key id (kid) cannot verify its algorithm, and no configured public key verifies its signature"
	case errors.Is(err, errJWKSKey):
		return "the JWKS key named by the token's key id (kid) cannot verify its algorithm"
	case errors.Is(err, errNoKey):
		return "no configured key can verify the token's algorithm"
	case errors.Is(err, jwt.ErrTokenUnverifiable):
		return "token algorithm is not accepted"
	case errors.Is(err, jwt.ErrTokenSignatureInvalid):
		return "token signature is invalid"
	case errors.Is(err, jwt.ErrTokenExpired):
		return "token is expired (exp)"
	case errors.Is(err, jwt.ErrTokenNotValidYet):
		return "token is not valid yet (nbf)"
	case errors.Is(err, jwt.ErrTokenUsedBeforeIssued):
		return "token is issued in the future (iat)"
	case errors.Is(err, jwt.ErrTokenInvalidAudience):
		if claims["aud"] == nil {
			return fmt.Sprintf("token has no audience (aud); want %q", v.cfg.Audience)
		}
		return fmt.Sprintf("token audience (aud) does not include %q", v.cfg.Audience)
	case errors.Is(err, jwt.ErrTokenInvalidIssuer):
		return fmt.Sprintf("token issuer (iss) is not %q", v.cfg.Issuer)
	case errors.Is(err, jwt.ErrTokenRequiredClaimMissing):
		switch {
		case claims["exp"] == nil:
			return "token has no expiry (exp)"
		case v.cfg.Audience != "" && claims["aud"] == nil:
			return fmt.Sprintf("token has no audience (aud); want %q", v.cfg.Audience)
		case v.cfg.Issuer != "" && claims["iss"] == nil:
			return fmt.Sprintf("token has no issuer (iss); want %q", v.cfg.Issuer)
		}
		return "token is missing a required claim"
	case errors.Is(err, jwt.ErrInvalidType):
		return "token has a registered claim (exp, nbf, iat, iss, aud) of the wrong type"
	default:
		return "token is invalid"
	}
}

// identity reads the identity out of verified claims.
func (v *Verifier) identity(c jwt.MapClaims) (Identity, error) {
	sub, _ := c["sub"].(string)
	if sub == "" {
		return Identity{}, errors.New("token has no subject (sub)")
	}
	id := Identity{Subject: sub, Tenant: v.cfg.DefaultTenant, Roles: []string{}}
	switch t := lookup(c, v.cfg.TenantClaim).(type) {
	case nil:
	case string:
		if t != "" {
			if !validTenant(t) {
				return Identity{}, fmt.Errorf("token tenant claim (%s) is not a tenant: 1 to 255 printable characters", v.cfg.TenantClaim)
			}
			id.Tenant = t
		}
	default:
		return Identity{}, fmt.Errorf("token tenant claim (%s) is not a string", v.cfg.TenantClaim)
	}
	if id.Tenant == "" {
		return Identity{}, fmt.Errorf("token has no tenant claim (%s), and this gateway has no default tenant (STEPGATE_DEFAULT_TENANT)", v.cfg.TenantClaim)
	}
	roles, ok := stringList(lookup(c, v.cfg.RolesClaim))
	if !ok {
		return Identity{}, fmt.Errorf("token roles claim (%s) is not an array of strings or a string of roles separated by spaces or commas", v.cfg.RolesClaim)
	}
	if v.cfg.ScopePrefix != "" {
		scope, ok := stringList(c["scope"])
		if !ok {
			return Identity{}, errors.New("token scope claim is not a string of scopes separated by spaces")
		}
		for _, sc := range scope {
			if r, ok := strings.CutPrefix(sc, v.cfg.ScopePrefix); ok && r != "" {
				roles = append(roles, r)
			}
		}
	}
	for _, r := range roles {
		if !slices.Contains(id.Roles, r) {
			id.Roles = append(id.Roles, r)
		}
	}
	for _, name := range v.cfg.IdentityClaims {
		if val := lookup(c, name); val != nil {
			if id.Claims == nil {
				id.Claims = map[string]any{}
			}
			id.Claims[name] = val
		}
	}
	return id, nil
}

// lookup returns the claim name, or when there is none and name has dots, the value at
// that path through nested objects.
func lookup(c jwt.MapClaims, name string) any {
	if v, ok := c[name]; ok {
		return v
	}
	var cur any = map[string]any(c)
	for part := range strings.SplitSeq(name, ".") {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = m[part]
	}
	return cur
}

// stringList reads a claim that holds a list of names: absent, an array of strings, or
// one string of names separated by spaces or commas.
func stringList(v any) ([]string, bool) {
	switch v := v.(type) {
	case nil:
		return nil, true
	case string:
		return strings.FieldsFunc(v, func(r rune) bool { return r == ',' || unicode.IsSpace(r) }), true
	case []any:
		out := make([]string, 0, len(v))
		for _, e := range v {
			s, ok := e.(string)
			if !ok {
				return nil, false
			}
			if s = strings.TrimSpace(s); s != "" {
				out = append(out, s)
			}
		}
		return out, true
	}
	return nil, false
}

func validTenant(t string) bool {
	if len(t) > 255 {
		return false
	}
	for _, r := range t {
		if !unicode.IsPrint(r) {
			return false
		}
	}
	return true
}
