package auth

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// InvocationTokens issues and checks invocation tokens: `<run id>.<invocation>.<expiry
// unix>.<base64url HMAC-SHA256>`. A token binds one invocation of one run until it
// expires; the journal fences the rest (a superseded invocation's writes are refused
// even while its token is still valid).
type InvocationTokens struct {
	key []byte
}

// NewInvocationTokens returns tokens keyed with key (at least 32 bytes).
func NewInvocationTokens(key []byte) (*InvocationTokens, error) {
	if len(key) < 32 {
		return nil, errors.New("auth: the invocation token key must be at least 32 bytes")
	}
	return &InvocationTokens{key: key}, nil
}

// Issue returns a token for invocation of runID that expires at exp.
func (t *InvocationTokens) Issue(runID string, invocation int, exp time.Time) string {
	payload := runID + "." + strconv.Itoa(invocation) + "." + strconv.FormatInt(exp.Unix(), 10)
	return payload + "." + base64.RawURLEncoding.EncodeToString(t.mac(payload))
}

// Verify checks token at now and returns the run id and invocation it binds. Errors
// wrap ErrUnauthorized.
func (t *InvocationTokens) Verify(token string, now time.Time) (runID string, invocation int, err error) {
	i := strings.LastIndexByte(token, '.')
	if i < 0 {
		return "", 0, fmt.Errorf("%w: invocation token is malformed", ErrUnauthorized)
	}
	payload, sig := token[:i], token[i+1:]
	got, err := base64.RawURLEncoding.DecodeString(sig)
	if err != nil || !hmac.Equal(got, t.mac(payload)) {
		return "", 0, fmt.Errorf("%w: invocation token signature is invalid", ErrUnauthorized)
	}
	parts := strings.Split(payload, ".")
	if len(parts) != 3 {
		return "", 0, fmt.Errorf("%w: invocation token is malformed", ErrUnauthorized)
	}
	invocation, err1 := strconv.Atoi(parts[1])
	exp, err2 := strconv.ParseInt(parts[2], 10, 64)
	if err1 != nil || err2 != nil {
		return "", 0, fmt.Errorf("%w: invocation token is malformed", ErrUnauthorized)
	}
	if now.Unix() > exp {
		return "", 0, fmt.Errorf("%w: invocation token is expired", ErrUnauthorized)
	}
	return parts[0], invocation, nil
}

func (t *InvocationTokens) mac(payload string) []byte {
	h := hmac.New(sha256.New, t.key)
	h.Write([]byte(payload))
	return h.Sum(nil)
}
