package invoker

import (
	"encoding/json"

	"github.com/stepgate/stepgate/journal"
	"github.com/stepgate/stepgate/protocol"
)

// This file holds the function protocol's converters: an invocation's journal as the
// function gets it, and a function's checkpoints and answer in their stored form. What
// the API's readers see is shaped by the gateway (gateway/convert.go).

// entryToAPI returns a journal entry in its protocol form, as an invocation's journal
// gives it to the run's function: a callback's output is what the caller put in it
// (call.go opens its sealed token first).
func entryToAPI(e journal.Entry) protocol.JournalEntry {
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

// entryFromAPI returns a protocol journal entry, a function's checkpoint or a step of its
// answer, in its stored form.
func entryFromAPI(e protocol.JournalEntry) journal.Entry {
	out := journal.Entry{
		Seq:       e.Seq,
		Kind:      string(e.Kind),
		Name:      e.Name,
		Attempt:   1,
		WakeAt:    e.Until,
		StartedAt: e.StartedAt,
		Error:     errorFromAPI(e.Error),
	}
	if e.Attempt != nil {
		out.Attempt = *e.Attempt
	}
	if e.Output != nil {
		out.Output = json.RawMessage(*e.Output)
	}
	if e.Window != nil {
		out.Window = *e.Window
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

// errorFromAPI returns e in its stored form; nil stays nil.
func errorFromAPI(e *protocol.ErrorInfo) *journal.ErrorInfo {
	if e == nil {
		return nil
	}
	out := &journal.ErrorInfo{Type: e.Type, Message: e.Message}
	if e.Retryable != nil {
		out.Retryable = *e.Retryable
	}
	return out
}
