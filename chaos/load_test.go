package chaos_test

import (
	"context"
	"slices"
	"sync"
	"time"
)

// Inputs of chain: a short run, and a long one that makes progress for seconds in one
// invocation (the long runs: 20 steps of 300ms, under a 10s timeout).
var (
	shortRun = chainInput{Steps: 3, StepMS: 20}
	longRun  = chainInput{Steps: 20, StepMS: 300}
	// midRun is a long run sized down for the short suite, where a scenario's runs
	// need not outlast several faults.
	midRun = size(chainInput{Steps: 12, StepMS: 250}, longRun)
)

// load starts runs in the background at a steady pace, through the fleet's running
// gateways, until stopped.
type load struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	ids    []string
	err    error
}

// startLoad starts a run of function with input(i) every `every`, each from a goroutine
// of its own (at most 32 at once), so that a start retried on another gateway does not
// hold up the pace.
func (s *scenario) startLoad(every time.Duration, function string, input func(i int) any) *load {
	return s.startMixedLoad(every, func(i int) (string, any) { return function, input(i) }, nil)
}

// startMixedLoad is startLoad of the function and input that pick returns for the i-th
// run. after, when not nil, is called with each run started, in the goroutine that
// started it (so it holds one of the 32); its error counts as the start's.
func (s *scenario) startMixedLoad(every time.Duration, pick func(i int) (string, any), after func(ctx context.Context, id string, input any) error) *load {
	ctx, cancel := context.WithCancel(s.ctx)
	l := &load{cancel: cancel}
	sem := make(chan struct{}, 32)
	l.wg.Go(func() {
		tick := time.NewTicker(every)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-ctx.Done():
				return
			case sem <- struct{}{}:
			}
			l.wg.Go(func() {
				defer func() { <-sem }()
				function, input := pick(i)
				// A start outlives the load's end: the load stops starting, not started.
				id, err := s.f.start(context.WithoutCancel(ctx), function, input)
				if err == nil && after != nil {
					err = after(context.WithoutCancel(ctx), id, input)
				}
				l.mu.Lock()
				defer l.mu.Unlock()
				if id != "" {
					l.ids = append(l.ids, id)
				}
				if err != nil {
					l.err = cmpErr(l.err, err)
				}
			})
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	})
	return l
}

// stop stops starting runs, waits for the starts under way, and returns the ids of the
// runs started, or the first error of a start.
func (l *load) stop() ([]string, error) {
	l.cancel()
	l.wg.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.ids), l.err
}

// progressed reports whether every run of ids that is not terminal had a checkpoint
// acknowledged after since.
func (s *scenario) progressed(ids []string, since time.Time) (bool, error) {
	runs, err := s.f.runs(s.ctx, ids)
	if err != nil {
		return false, err
	}
	moved := map[string]bool{}
	for _, a := range s.a.rec.acked() {
		if a.at.After(since) {
			moved[a.runID] = true
		}
	}
	for _, r := range runs {
		if !r.terminal() && !moved[r.ID] {
			return false, nil
		}
	}
	return true, nil
}
