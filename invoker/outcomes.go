package invoker

import "sync"

// outcomes hands the terminal result of a run that this process finished to this
// process's waiters on it (AwaitRun), once committed, so that they answer from it instead
// of reading the run again. A waiter on a run finished elsewhere (another gateway, a
// cancel), or told by the listener before the hand-over, reads the run.
type outcomes struct {
	mu    sync.Mutex
	byRun map[string]map[chan *Result]struct{}
}

// subscribe returns a channel that gets runID's terminal result if this process finishes
// the run, and how to stop.
func (o *outcomes) subscribe(runID string) (<-chan *Result, func()) {
	ch := make(chan *Result, 1)
	o.mu.Lock()
	if o.byRun == nil {
		o.byRun = map[string]map[chan *Result]struct{}{}
	}
	if o.byRun[runID] == nil {
		o.byRun[runID] = map[chan *Result]struct{}{}
	}
	o.byRun[runID][ch] = struct{}{}
	o.mu.Unlock()
	return ch, func() {
		o.mu.Lock()
		defer o.mu.Unlock()
		delete(o.byRun[runID], ch)
		if len(o.byRun[runID]) == 0 {
			delete(o.byRun, runID)
		}
	}
}

// finished gives r, a terminal result this process has committed, to its run's waiters.
func (o *outcomes) finished(r *Result) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for ch := range o.byRun[r.RunID] {
		select {
		case ch <- r:
		default: // a run ends once: a waiter has it already
		}
	}
}
