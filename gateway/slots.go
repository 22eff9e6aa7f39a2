package gateway

import "sync"

// slots counts what a gateway holds at once (synchronous invocations, live streams), in
// all and per key (a tenant, or a tenant's subject), and refuses past the limits.
type slots struct {
	max, maxPerKey int // zero: no limit

	mu    sync.Mutex
	total int
	byKey map[string]int
}

func newSlots(max, maxPerKey int) *slots {
	return &slots{max: max, maxPerKey: maxPerKey, byKey: map[string]int{}}
}

// acquire takes a slot for key and returns its release (safe to call more than once),
// or nil when the gateway or the key is at its limit.
func (s *slots) acquire(key string) func() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if (s.max > 0 && s.total >= s.max) || (s.maxPerKey > 0 && s.byKey[key] >= s.maxPerKey) {
		return nil
	}
	s.total++
	s.byKey[key]++
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			s.total--
			if s.byKey[key]--; s.byKey[key] == 0 {
				delete(s.byKey, key)
			}
		})
	}
}
