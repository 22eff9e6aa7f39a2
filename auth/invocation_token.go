package auth

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/stepgate/stepgate/journal"
	"github.com/stepgate/stepgate/journal/keyring"
)

// MinInvocationKeyBytes is the shortest invocation token key accepted.
const MinInvocationKeyBytes = 32

// InvocationTokens issues and checks invocation tokens:
//
//	<key id>.<run id>.<invocation>.<expiry unix>.<base64url HMAC-SHA256 of the rest>
//
// A token binds one invocation of one run until it expires; the journal fences the rest
// (a superseded invocation's writes are refused even while its token is still valid).
//
// Its keys never leave the gateways and derive from nothing that does: they are either
// the operator's (STEPGATE_INVOCATION_KEY, see [NewInvocationTokens]) or random secrets
// that the first gateway on a database makes and every gateway reads from it
// ([LoadInvocationTokens]). The current key signs; older keys verify until they retire,
// so a rotation invalidates no token in flight. It is safe for concurrent use.
type InvocationTokens struct {
	db journal.DB // nil for the operator's keys

	mu       sync.Mutex
	keys     []keyring.InvocationKey // current first
	loadedAt time.Time
	tried    time.Time // the last reload for an unknown key id
}

// keyID names a key in its tokens: derived from the secret, so gateways agree on it.
func keyID(secret []byte) string {
	sum := sha256.Sum256(append([]byte("stepgate invocation key id\n"), secret...))
	return base64.RawURLEncoding.EncodeToString(sum[:6])
}

// NewInvocationTokens returns tokens keyed with the operator's secrets, newest first: the
// first signs, all verify. Each must be at least MinInvocationKeyBytes long.
func NewInvocationTokens(secrets ...[]byte) (*InvocationTokens, error) {
	if len(secrets) == 0 {
		return nil, errors.New("auth: no invocation token key")
	}
	t := &InvocationTokens{}
	for i, s := range secrets {
		if len(s) < MinInvocationKeyBytes {
			return nil, fmt.Errorf("auth: invocation token key %d is %d bytes; at least %d are required", i+1, len(s), MinInvocationKeyBytes)
		}
		t.keys = append(t.keys, keyring.InvocationKey{ID: keyID(s), Secret: s})
	}
	return t, nil
}

// invocationKeyRefresh is how often gateways read the database's invocation keys again,
// so a rotation made by one reaches the others.
const invocationKeyRefresh = time.Minute

// LoadInvocationTokens returns tokens keyed with the database's invocation keys (db is a
// system pool), making the deployment's first key when there is none. Keys are read
// again every minute, and at once (at most once a second) for a token whose key id is
// unknown, so a rotation on any gateway reaches them all.
func LoadInvocationTokens(ctx context.Context, db journal.DB) (*InvocationTokens, error) {
	t := &InvocationTokens{db: db}
	if err := t.reload(ctx); err != nil {
		return nil, err
	}
	return t, nil
}

// NewInvocationKey returns a new random invocation key.
func NewInvocationKey() keyring.InvocationKey {
	s := make([]byte, 32)
	rand.Read(s)
	return keyring.InvocationKey{ID: keyID(s), Secret: s}
}

// RotateInvocationKey makes a new random key the current one in db and retires the
// current one after overlap, which should outlast the longest invocation (the longest
// function timeout plus the lease grace). Gateways pick it up within a minute.
func RotateInvocationKey(ctx context.Context, db journal.DB, overlap time.Duration) error {
	return keyring.RotateInvocationKey(ctx, db, NewInvocationKey(), overlap)
}

func (t *InvocationTokens) reload(ctx context.Context) error {
	keys, err := keyring.InvocationKeys(ctx, t.db, NewInvocationKey())
	if err != nil {
		return fmt.Errorf("auth: invocation keys: %w", err)
	}
	t.mu.Lock()
	t.keys, t.loadedAt = keys, time.Now()
	t.mu.Unlock()
	return nil
}

// current returns the key that signs, reading the database's keys again when they are
// older than invocationKeyRefresh (keeping the old ones if that fails).
func (t *InvocationTokens) current(ctx context.Context) keyring.InvocationKey {
	t.mu.Lock()
	stale := t.db != nil && time.Since(t.loadedAt) > invocationKeyRefresh
	if stale {
		t.loadedAt = time.Now() // one reload at a time; a failed one waits for the next period
	}
	t.mu.Unlock()
	if stale {
		_ = t.reload(ctx) // the keys in hand still sign and verify
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.keys[0]
}

// find returns the key named id that still verifies at now, reading the database's keys
// again once when it is unknown.
func (t *InvocationTokens) find(ctx context.Context, id string, now time.Time) (keyring.InvocationKey, bool) {
	for try := 0; ; try++ {
		t.mu.Lock()
		for _, k := range t.keys {
			if k.ID == id && (k.RetiresAt == nil || k.RetiresAt.After(now)) {
				t.mu.Unlock()
				return k, true
			}
		}
		again := try == 0 && t.db != nil && time.Since(t.tried) > time.Second
		if again {
			t.tried = time.Now()
		}
		t.mu.Unlock()
		if !again || t.reload(ctx) != nil {
			return keyring.InvocationKey{}, false
		}
	}
}

// Issue returns a token for invocation of runID that expires at exp.
func (t *InvocationTokens) Issue(ctx context.Context, runID string, invocation int, exp time.Time) string {
	k := t.current(ctx)
	payload := k.ID + "." + runID + "." + strconv.Itoa(invocation) + "." + strconv.FormatInt(exp.Unix(), 10)
	return payload + "." + base64.RawURLEncoding.EncodeToString(mac(k.Secret, payload))
}

// Verify checks token at now and returns the run id and invocation it binds. Errors
// wrap ErrUnauthorized.
func (t *InvocationTokens) Verify(ctx context.Context, token string, now time.Time) (runID string, invocation int, err error) {
	malformed := fmt.Errorf("%w: invocation token is malformed", ErrUnauthorized)
	if len(token) > 512 {
		return "", 0, malformed
	}
	i := strings.LastIndexByte(token, '.')
	if i < 0 {
		return "", 0, malformed
	}
	payload, sig := token[:i], token[i+1:]
	parts := strings.Split(payload, ".")
	if len(parts) != 4 {
		return "", 0, malformed
	}
	k, ok := t.find(ctx, parts[0], now)
	if !ok {
		return "", 0, fmt.Errorf("%w: invocation token is signed with an unknown or retired key", ErrUnauthorized)
	}
	got, err := base64.RawURLEncoding.DecodeString(sig)
	if err != nil || !hmac.Equal(got, mac(k.Secret, payload)) {
		return "", 0, fmt.Errorf("%w: invocation token signature is invalid", ErrUnauthorized)
	}
	invocation, err1 := strconv.Atoi(parts[2])
	exp, err2 := strconv.ParseInt(parts[3], 10, 64)
	if err1 != nil || err2 != nil {
		return "", 0, malformed
	}
	if now.Unix() > exp {
		return "", 0, fmt.Errorf("%w: invocation token is expired", ErrUnauthorized)
	}
	return parts[1], invocation, nil
}

func mac(key []byte, payload string) []byte {
	h := hmac.New(sha256.New, key)
	h.Write([]byte(payload))
	return h.Sum(nil)
}
