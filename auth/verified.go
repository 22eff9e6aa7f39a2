package auth

import (
	"maps"
	"slices"
	"sync"
	"time"
)

// verifiedFor is how long a verified token is remembered (Verifier.Check), and
// maxVerified how many are at most: past it the memory starts afresh.
const (
	verifiedFor = time.Minute
	maxVerified = 4096
)

// verified remembers the tokens a Verifier has checked, by their SHA-256, with the
// identity they carry, until min(exp, when checked + verifiedFor).
type verified struct {
	mu     sync.Mutex
	tokens map[[32]byte]verifiedToken
}

type verifiedToken struct {
	id         Identity
	exp, until time.Time
}

// get returns the identity and exp of the token of key when it was verified and is
// still remembered at now. The identity's roles and claims are copies of the
// remembered ones.
func (c *verified) get(key [32]byte, now time.Time) (Identity, time.Time, bool) {
	c.mu.Lock()
	t, ok := c.tokens[key]
	c.mu.Unlock()
	if !ok || !now.Before(t.until) {
		return Identity{}, time.Time{}, false
	}
	id := t.id
	id.Roles, id.Claims = slices.Clone(id.Roles), maps.Clone(id.Claims)
	return id, t.exp, true
}

// put remembers a token verified at now, which expires at exp.
func (c *verified) put(key [32]byte, id Identity, exp, now time.Time) {
	until := now.Add(verifiedFor)
	if exp.Before(until) {
		until = exp
	}
	id.Roles, id.Claims = slices.Clone(id.Roles), maps.Clone(id.Claims)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.tokens == nil || len(c.tokens) >= maxVerified {
		c.tokens = make(map[[32]byte]verifiedToken)
	}
	c.tokens[key] = verifiedToken{id: id, exp: exp, until: until}
}
