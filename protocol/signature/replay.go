package signature

import (
	"container/heap"
	"context"
	"crypto/sha256"
	"errors"
	"sync"
	"time"
)

// DefaultReplayCache is how many accepted signatures a [Verifier] remembers by default:
// about 10 MB at most.
const DefaultReplayCache = 100_000

// Verifier verifies signatures as [Verify] does, with the keys its [KeyFunc] returns for
// the tenant a request names, and refuses replays: a signature it accepted once is
// refused with ErrReplayed for as long as its timestamp is within the window, so a
// captured request cannot be sent again, whichever of its signatures it keeps. Only
// requests that verified are remembered (by a hash of their signed message),
// so nobody without a key can fill its memory; when it is full, it forgets first the
// signatures closest to leaving the window. It is safe for concurrent use.
type Verifier struct {
	keys   KeyFunc
	window time.Duration
	max    int

	mu   sync.Mutex
	seen map[[sha256.Size]byte]struct{}
	exp  expiries // the keys of seen, soonest expiry first
}

// NewVerifier returns a Verifier that accepts signatures made with the keys keys returns,
// at most window from its clock (DefaultWindow when zero), and remembers up to size
// accepted signatures (DefaultReplayCache when zero).
func NewVerifier(window time.Duration, size int, keys KeyFunc) *Verifier {
	if window <= 0 {
		window = DefaultWindow
	}
	if size <= 0 {
		size = DefaultReplayCache
	}
	return &Verifier{keys: keys, window: window, max: size, seen: map[[sha256.Size]byte]struct{}{}}
}

// Check verifies header against r at now like [Verify], with no replay check (for
// requests that change nothing, such as the manifest), and returns the tenant.
func (v *Verifier) Check(ctx context.Context, header string, r Request, now time.Time) (string, error) {
	p, _, err := v.check(ctx, header, r, now)
	return p.Tenant, err
}

// Verify verifies header against r at now like [Verify], then refuses with
// ErrReplayed a signature it accepted before. It returns the tenant.
//
// Its memory is this Verifier's alone: another process, or this one restarted, accepts
// the same request again within the window. The SDKs keep a replay sent to a fresh
// process from running any step by asking the gateway, before the invocation's first
// step that the journal does not hold, whether the invocation still owns its run.
func (v *Verifier) Verify(ctx context.Context, header string, r Request, now time.Time) (string, error) {
	p, msg, err := v.check(ctx, header, r, now)
	if err != nil {
		return "", err
	}
	key := sha256.Sum256(msg)
	v.mu.Lock()
	defer v.mu.Unlock()
	for len(v.exp) > 0 && v.exp[0].at < now.Unix() {
		delete(v.seen, heap.Pop(&v.exp).(expiry).key)
	}
	v.shrink()
	if _, ok := v.seen[key]; ok {
		return "", ErrReplayed
	}
	if len(v.seen) >= v.max {
		delete(v.seen, heap.Pop(&v.exp).(expiry).key)
	}
	v.seen[key] = struct{}{}
	// After t+window the timestamp check refuses the signature by itself.
	heap.Push(&v.exp, expiry{at: p.T + int64(v.window/time.Second) + 1, key: key})
	return p.Tenant, nil
}

func (v *Verifier) check(ctx context.Context, header string, r Request, now time.Time) (Parsed, []byte, error) {
	p, err := Parse(header)
	if err != nil {
		return Parsed{}, nil, err
	}
	if err := checkVersion(p); err != nil {
		return Parsed{}, nil, err
	}
	if d := now.Sub(time.Unix(p.T, 0)); d > v.window || d < -v.window {
		// Before asking for keys: an expired request costs no key lookup.
		return Parsed{}, nil, ErrExpired
	}
	keys, err := v.keys(ctx, p.Tenant, false)
	if err != nil {
		return Parsed{}, nil, err
	}
	msg, err := check(p, r, now, v.window, keys)
	if errors.Is(err, ErrMismatch) || errors.Is(err, ErrNoKeys) {
		// The keys may have been rotated since they were fetched.
		if keys, err = v.keys(ctx, p.Tenant, true); err != nil {
			return Parsed{}, nil, err
		}
		msg, err = check(p, r, now, v.window, keys)
	}
	return p, msg, err
}

type expiry struct {
	at  int64 // Unix seconds
	key [sha256.Size]byte
}

// shrink gives back the memory of a burst once most of its signatures have expired: Go
// maps and slices keep their peak size otherwise.
func (v *Verifier) shrink() {
	if c := cap(v.exp); c < 4096 || len(v.exp) > c/4 {
		return
	}
	v.exp = append(make(expiries, 0, 2*len(v.exp)), v.exp...) // still a heap: same order
	v.seen = make(map[[sha256.Size]byte]struct{}, len(v.exp))
	for _, e := range v.exp {
		v.seen[e.key] = struct{}{}
	}
}

// expiries is a min-heap of expiry by at.
type expiries []expiry

func (e expiries) Len() int           { return len(e) }
func (e expiries) Less(i, j int) bool { return e[i].at < e[j].at }
func (e expiries) Swap(i, j int)      { e[i], e[j] = e[j], e[i] }
func (e *expiries) Push(x any)        { *e = append(*e, x.(expiry)) }
func (e *expiries) Pop() any {
	old := *e
	x := old[len(old)-1]
	*e = old[:len(old)-1]
	return x
}
