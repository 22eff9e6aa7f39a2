package signature

import (
	"container/heap"
	"crypto/sha256"
	"sync"
	"time"
)

// DefaultReplayCache is how many accepted signatures a [Verifier] remembers by default:
// about 10 MB at most.
const DefaultReplayCache = 100_000

// Verifier verifies signatures as [Verify] does and refuses replays: a signature it
// accepted once is refused with ErrReplayed for as long as its timestamp is within the
// window, so a captured request cannot be sent again. Only signatures that verified are
// remembered, so nobody without a key can fill its memory; when it is full, it forgets
// first the signatures closest to leaving the window. It is safe for concurrent use.
type Verifier struct {
	keys   [][]byte
	window time.Duration
	max    int

	mu   sync.Mutex
	seen map[[sha256.Size]byte]struct{}
	exp  expiries // the keys of seen, soonest expiry first
}

// NewVerifier returns a Verifier that accepts signatures made with any of keys at most
// window from its clock (DefaultWindow when zero) and remembers up to size accepted
// signatures (DefaultReplayCache when zero).
func NewVerifier(window time.Duration, size int, keys ...[]byte) *Verifier {
	if window <= 0 {
		window = DefaultWindow
	}
	if size <= 0 {
		size = DefaultReplayCache
	}
	return &Verifier{keys: keys, window: window, max: size, seen: map[[sha256.Size]byte]struct{}{}}
}

// Verify checks header against body at now like [Verify], then refuses with
// ErrReplayed a signature it accepted before.
func (v *Verifier) Verify(header string, body []byte, now time.Time) error {
	t, sig, err := verify(header, body, now, v.window, v.keys)
	if err != nil {
		return err
	}
	key := [sha256.Size]byte(sig)
	v.mu.Lock()
	defer v.mu.Unlock()
	for len(v.exp) > 0 && v.exp[0].at < now.Unix() {
		delete(v.seen, heap.Pop(&v.exp).(expiry).key)
	}
	if _, ok := v.seen[key]; ok {
		return ErrReplayed
	}
	if len(v.seen) >= v.max {
		delete(v.seen, heap.Pop(&v.exp).(expiry).key)
	}
	v.seen[key] = struct{}{}
	// After t+window the timestamp check refuses the signature by itself.
	heap.Push(&v.exp, expiry{at: t + int64(v.window/time.Second) + 1, key: key})
	return nil
}

type expiry struct {
	at  int64 // Unix seconds
	key [sha256.Size]byte
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
