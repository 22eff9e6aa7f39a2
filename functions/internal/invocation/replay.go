package invocation

import (
	"fmt"

	"github.com/stepgate/stepgate/protocol"
)

// Replay-only invocations (InvocationRequest replay_only): the gateway asks only what the
// code would do past its journal. The State then runs no step function and journals
// nothing: the first time the code asks for a seq the journal does not hold (any kind,
// a patch's marker included), the State halts with a Stop answering status replayed and
// that seq, kind and name as replay.next, before anything is run, claimed or
// checkpointed; where the code asks for another entry than the journal holds, it halts
// with replay.divergence instead of failing the run with nondeterminism. Checkpoint and
// CheckOwner halt too, as a guard; a stream write is skipped (it is not an entry); a
// journaled sleep is never waited out in the process. The caller answers End when the
// code would complete or fail.

// KindEnd is the kind of a ReplayStep where the code would complete or fail, named
// EndCompleted or EndFailed.
const (
	KindEnd      = "end"
	EndCompleted = "completed"
	EndFailed    = "failed"
)

// ReplayOnly says whether the invocation only replays its journal.
func (s *State) ReplayOnly() bool { return s.replayOnly }

// Replayed returns a Stop answering a replay-only invocation with o.
func Replayed(o protocol.ReplayOutcome) *Stop {
	return &Stop{Answer: &protocol.InvocationAnswer{Status: protocol.AnswerStatusReplayed, Replay: &o}}
}

// IsReplayed says whether stop answers a replay-only invocation.
func (stop *Stop) IsReplayed() bool {
	return stop != nil && stop.Answer != nil && stop.Answer.Status == protocol.AnswerStatusReplayed
}

// haltNext halts a replay-only invocation whose code asks for the entry at seq, past its
// journal.
func (s *State) haltNext(seq int, kind, name string) error {
	return s.Halt(Replayed(protocol.ReplayOutcome{Next: &protocol.ReplayStep{Seq: seq, Kind: kind, Name: name}}))
}

// Diverged halts the invocation where its code asks, at seq, for asked while the journal
// holds journal there: with the nondeterminism failure msg, or, replay-only, with that
// divergence.
func (s *State) Diverged(seq int, journal, asked protocol.ReplayStep, msg string) error {
	if s.replayOnly {
		return s.Halt(Replayed(protocol.ReplayOutcome{Divergence: &protocol.ReplayDivergence{Seq: seq, Journal: journal, Asked: asked}}))
	}
	return s.Halt(Failed("nondeterminism", msg))
}

// End is the answer of a replay-only invocation whose code would end as how
// (EndCompleted or EndFailed) after the seqs it took: next {seq, "end", how} at the seq
// after them, or a divergence when the journal holds an entry past them (the code
// ends where the journal goes on).
func (s *State) End(how string) *Stop {
	s.mu.Lock()
	seq := s.seq + 1
	s.mu.Unlock()
	asked := protocol.ReplayStep{Seq: seq, Kind: KindEnd, Name: how}
	if e := s.firstFrom(seq); e != nil {
		asked.Seq = e.Seq
		return Replayed(protocol.ReplayOutcome{Divergence: &protocol.ReplayDivergence{
			Seq: e.Seq, Journal: protocol.ReplayStep{Seq: e.Seq, Kind: string(e.Kind), Name: e.Name}, Asked: asked}})
	}
	return Replayed(protocol.ReplayOutcome{Next: &asked})
}

// firstFrom returns the journal's entry of the lowest seq at least seq, or nil.
func (s *State) firstFrom(seq int) *protocol.JournalEntry {
	var first *protocol.JournalEntry
	for i := range s.journal {
		if e := &s.journal[i]; e.Seq >= seq && (first == nil || e.Seq < first.Seq) {
			first = e
		}
	}
	return first
}

// replayGuard halts a replay-only invocation that reached what journals or claims
// (where, for the message) although every path past the journal halts before: a
// retryable failure, as for a bug of the SDK, rather than a side effect.
func (s *State) replayGuard(where string) error {
	return s.Halt(Retry("replay", fmt.Sprintf("%s: a replay-only invocation journals and claims nothing", where)))
}
