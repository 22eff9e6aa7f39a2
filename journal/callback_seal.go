package journal

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/stepgate/stepgate/journal/internal/dbsqlc"
)

// MaskedToken stands for a callback's token where it is kept or shown without it: in
// the journal's callback entry (sealed beside it, see CallbackKey) and in the API.
const MaskedToken = "xxxxx"

// CallbackKey seals the tokens of callbacks in the journal. A callback entry keeps its
// url and token masked (MaskedToken) and, in "sealed", base64url (no padding) of a
// 16-byte random salt followed by the token's bytes XORed with the keystream
// SHA-256(key || salt || 0x00) || SHA-256(key || salt || 0x01) || ... The key is
// stepgate.callback_key's, made by the baseline migration and read by the gateways' system role
// only; stepgate.callback keeps the token's SHA-256 for the lookup. So the token is
// nowhere in the database: the gateway opens it for the run's own function (its
// invocations' journal, its checkpoint's answer), so that a replay returns the same
// handle, and for no one else but a caller who may resolve the callback by name anyway
// (runs:manage in its tenant and mayResolveCallbacks), who lists a run's open callbacks
// (OpenCallbacks).
type CallbackKey []byte

// sealSaltBytes is the length of a sealed token's salt.
const sealSaltBytes = 16

// LoadCallbackKey reads the deployment's callback key; db must be a system pool.
func LoadCallbackKey(ctx context.Context, db DB) (CallbackKey, error) {
	k, err := dbsqlc.New(db).CallbackKeyLoad(ctx)
	if err != nil {
		return nil, fmt.Errorf("load callback key: %w", err)
	}
	return k, nil
}

// xor XORs b in place with the keystream of salt.
func (k CallbackKey) xor(salt, b []byte) {
	var block [sha256.Size]byte
	for i := range b {
		if i%sha256.Size == 0 {
			h := sha256.New()
			h.Write(k)
			h.Write(salt)
			h.Write([]byte{byte(i / sha256.Size)})
			h.Sum(block[:0])
		}
		b[i] ^= block[i%sha256.Size]
	}
}

// storedCallback is a callback entry's output as the journal keeps it.
type storedCallback struct {
	URL       string          `json:"url"`
	Token     string          `json:"token"`
	ExpiresAt json.RawMessage `json:"expires_at"`
	Sealed    string          `json:"sealed,omitempty"`
}

// seal returns the stored form of the output of a callback of token, at url.
func (k CallbackKey) seal(url, token string, expiresAt json.RawMessage) (json.RawMessage, error) {
	if len(k) == 0 {
		return nil, errors.New("seal a callback's token: no callback key")
	}
	if len(token) == 0 || len(token) > 255*sha256.Size || !strings.HasSuffix(url, token) {
		return nil, errors.New("seal a callback's token: its url does not end with a token of 1 to 8160 bytes")
	}
	b := make([]byte, sealSaltBytes+len(token))
	_, _ = rand.Read(b[:sealSaltBytes]) // never fails (crypto/rand)
	copy(b[sealSaltBytes:], token)
	k.xor(b[:sealSaltBytes], b[sealSaltBytes:])
	return json.Marshal(storedCallback{
		URL: strings.TrimSuffix(url, token) + MaskedToken, Token: MaskedToken, ExpiresAt: expiresAt,
		Sealed: base64.RawURLEncoding.EncodeToString(b),
	})
}

// OpenCallback returns the output of a callback entry that the run's function gets,
// {"url", "token", "expires_at"}, from the output stored in the journal. An output with
// nothing sealed is returned as it is.
func (k CallbackKey) OpenCallback(stored json.RawMessage) (json.RawMessage, error) {
	var s storedCallback
	if !bytes.Contains(stored, []byte(`"sealed"`)) || json.Unmarshal(stored, &s) != nil || s.Sealed == "" {
		return stored, nil
	}
	b, err := base64.RawURLEncoding.DecodeString(s.Sealed)
	if err != nil || len(b) <= sealSaltBytes || !strings.HasSuffix(s.URL, MaskedToken) {
		return nil, errors.New("open a callback's token: the entry's sealed token is malformed")
	}
	if len(k) == 0 {
		return nil, errors.New("open a callback's token: no callback key")
	}
	token := b[sealSaltBytes:]
	k.xor(b[:sealSaltBytes], token)
	return json.Marshal(storedCallback{
		URL: strings.TrimSuffix(s.URL, MaskedToken) + string(token), Token: string(token), ExpiresAt: s.ExpiresAt,
	})
}

// MaskCallback returns e with a callback's token masked (MaskedToken) in its output's
// url and token, and without the sealed token, as the API shows it to readers and a
// replay-only invocation sends it; an output that is not a callback's is dropped. Any
// other entry is returned as it is.
func MaskCallback(e Entry) Entry {
	if e.Kind != KindCallback || e.Output == nil {
		return e
	}
	var cb CallbackOutput
	if json.Unmarshal(e.Output, &cb) != nil {
		e.Output = nil
		return e
	}
	if i := strings.LastIndex(cb.URL, "/"); i >= 0 {
		cb.URL = cb.URL[:i+1] + MaskedToken
	}
	cb.Token = MaskedToken
	if raw, err := json.Marshal(cb); err == nil {
		e.Output = raw
	}
	return e
}

// OpenCallback is a callback of a run that a POST to its URL would resolve now.
type OpenCallback struct {
	Seq       int
	Name      string
	URL       string // With its token in clear: the credential that resolves it.
	ExpiresAt time.Time
	Awaited   bool // The run waits for it now.
}

// maxOpenCallbacks bounds the callbacks OpenCallbacks returns.
const maxOpenCallbacks = 1000

// OpenCallbacks returns the callbacks of the run runID of tenant that a POST to their
// URL would resolve now (pending, not expired, the run not finished), oldest first, at
// most maxOpenCallbacks (more: the run has others), their URLs opened with key, for id,
// who must be allowed to resolve them by name (mayResolveCallbacks). It returns
// ErrNotFound when tenant has no such run, and a *ResumeForbiddenError when id may not.
func OpenCallbacks(ctx context.Context, db DB, key CallbackKey, tenant, runID string, id Identity) (cbs []OpenCallback, more bool, err error) {
	if err := mayResolveCallbacks(ctx, db, tenant, runID, id); err != nil {
		return nil, false, err
	}
	rows, err := dbsqlc.New(db).CallbackListOpen(ctx, dbsqlc.CallbackListOpenParams{Tenant: tenant, RunID: runID, MaxRows: maxOpenCallbacks + 1})
	if err != nil {
		return nil, false, fmt.Errorf("list open callbacks of run %s: %w", runID, err)
	}
	if len(rows) > maxOpenCallbacks {
		rows, more = rows[:maxOpenCallbacks], true
	}
	cbs = make([]OpenCallback, 0, len(rows))
	for _, r := range rows {
		opened, err := key.OpenCallback(r.Output)
		if err != nil {
			return nil, false, fmt.Errorf("callback %d of run %s: %w", r.Seq, runID, err)
		}
		var out CallbackOutput
		if err := json.Unmarshal(opened, &out); err != nil {
			return nil, false, fmt.Errorf("callback %d of run %s: %w", r.Seq, runID, err)
		}
		cbs = append(cbs, OpenCallback{Seq: int(r.Seq), Name: r.Name, URL: out.URL, ExpiresAt: r.ExpiresAt, Awaited: r.Awaited})
	}
	return cbs, more, nil
}
