package gateway

import (
	"encoding/json"

	"github.com/stepgate/stepgate/journal"
	"github.com/stepgate/stepgate/protocol"
)

// This file shapes what the API's readers see of a run: its journal, errors, failed
// attempts and what it awaits. The function protocol's converters (an invocation's
// journal, a function's checkpoints and answer) are the invoker's own (invoker/convert.go).

// entryForReaders returns a journal entry in its protocol form for the API's readers:
// a callback's token, the credential that resolves it, is masked (journal.MaskedToken)
// in its output and its URL, and its sealed form (journal.CallbackKey) is left out. Only
// the run's function (its invocations' journal, opened by the gateway) gets it, and a
// caller with runs:manage who lists the run's open callbacks (ListRunCallbacks, which
// shows no journal entry). It is the gateway's only conversion of a journal entry, so
// none reaches a reader unmasked.
func entryForReaders(e journal.Entry) protocol.JournalEntry {
	e = journal.MaskCallback(e)
	out := protocol.JournalEntry{
		Seq:        e.Seq,
		Kind:       protocol.EntryKind(e.Kind),
		Name:       e.Name,
		Attempt:    &e.Attempt,
		Until:      e.WakeAt,
		StartedAt:  e.StartedAt,
		FinishedAt: &e.FinishedAt,
		Error:      errorToAPI(e.Error),
	}
	if e.Copied {
		out.Copied = &e.Copied
	}
	if e.Output != nil {
		o := protocol.AnyJSON(e.Output)
		out.Output = &o
	}
	return out
}

// errorToAPI returns e in its protocol form; nil stays nil.
func errorToAPI(e *journal.ErrorInfo) *protocol.ErrorInfo {
	if e == nil {
		return nil
	}
	return &protocol.ErrorInfo{Type: e.Type, Message: e.Message, Retryable: &e.Retryable}
}

// failureToAPI returns a failed attempt in its API form.
func failureToAPI(f journal.Failure) protocol.AttemptFailure {
	return protocol.AttemptFailure{
		Seq: f.Seq, Attempt: f.Attempt, Name: &f.Name, CreatedAt: f.CreatedAt,
		Error: *errorToAPI(&f.Error),
	}
}

// awaitingToAPI returns what a run awaits for the API, or nil. The stored form's JSON
// is the API's (TestAwaitingIsTheAPIs keeps their fields the same), so every await
// kind's fields reach the API with no code of its own.
func awaitingToAPI(a *journal.Awaiting) *protocol.Awaiting {
	if a == nil {
		return nil
	}
	out := protocol.Awaiting{Kind: protocol.AwaitingKind(a.Kind), Seq: a.Seq, Name: a.Name}
	if raw, err := json.Marshal(a); err == nil {
		_ = json.Unmarshal(raw, &out) // the same fields: a field that does not decode keeps its zero
	}
	return &out
}
