package invoker

import (
	"encoding/json"
	"strings"

	"github.com/stepgate/stepgate/journal"
	"github.com/stepgate/stepgate/protocol"
)

// EntryToAPI returns a journal entry in its protocol form.
func EntryToAPI(e journal.Entry) protocol.JournalEntry {
	out := protocol.JournalEntry{
		Seq:        e.Seq,
		Kind:       protocol.EntryKind(e.Kind),
		Name:       e.Name,
		Attempt:    &e.Attempt,
		Until:      e.WakeAt,
		StartedAt:  e.StartedAt,
		FinishedAt: &e.FinishedAt,
		Error:      ErrorToAPI(e.Error),
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

// MaskedToken replaces a callback's token where the API shows a journal.
const MaskedToken = journal.MaskedToken

// EntryForReaders returns a journal entry in its protocol form for the API's readers:
// a callback's token, the credential that resolves it, is masked (MaskedToken) in its
// output and its URL, and its sealed form (journal.CallbackKey) is left out. Only the
// run's function (its invocations' journal, opened by the gateway) gets it.
func EntryForReaders(e journal.Entry) protocol.JournalEntry {
	if e.Kind == journal.KindCallback && e.Output != nil {
		var cb journal.CallbackOutput
		if json.Unmarshal(e.Output, &cb) == nil {
			if i := strings.LastIndex(cb.URL, "/"); i >= 0 {
				cb.URL = cb.URL[:i+1] + MaskedToken
			}
			cb.Token = MaskedToken
			if raw, err := json.Marshal(cb); err == nil {
				e.Output = raw
			}
		} else {
			e.Output = nil
		}
	}
	return EntryToAPI(e)
}

// EntryFromAPI returns a protocol journal entry in its stored form.
func EntryFromAPI(e protocol.JournalEntry) journal.Entry {
	out := journal.Entry{
		Seq:       e.Seq,
		Kind:      string(e.Kind),
		Name:      e.Name,
		Attempt:   1,
		WakeAt:    e.Until,
		StartedAt: e.StartedAt,
		Error:     ErrorFromAPI(e.Error),
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

// ErrorToAPI returns e in its protocol form; nil stays nil.
func ErrorToAPI(e *journal.ErrorInfo) *protocol.ErrorInfo {
	if e == nil {
		return nil
	}
	return &protocol.ErrorInfo{Type: e.Type, Message: e.Message, Retryable: &e.Retryable}
}

// ErrorFromAPI returns e in its stored form; nil stays nil.
func ErrorFromAPI(e *protocol.ErrorInfo) *journal.ErrorInfo {
	if e == nil {
		return nil
	}
	out := &journal.ErrorInfo{Type: e.Type, Message: e.Message}
	if e.Retryable != nil {
		out.Retryable = *e.Retryable
	}
	return out
}

// FailureToAPI returns a failed attempt in its API form.
func FailureToAPI(f journal.Failure) protocol.AttemptFailure {
	return protocol.AttemptFailure{
		Seq: f.Seq, Attempt: f.Attempt, Name: &f.Name, CreatedAt: f.CreatedAt,
		Error: *ErrorToAPI(&f.Error),
	}
}

// AwaitingToAPI returns what a run awaits for the API, or nil.
func AwaitingToAPI(a *journal.Awaiting) *protocol.Awaiting {
	if a == nil {
		return nil
	}
	out := &protocol.Awaiting{Kind: protocol.AwaitingKind(a.Kind), Seq: a.Seq, Name: a.Name}
	if a.Attempt > 0 {
		out.Attempt = &a.Attempt
	}
	if a.Count > 0 {
		out.Count = &a.Count
	}
	if a.ChildID != "" {
		out.ChildID, out.Function = &a.ChildID, &a.Function
	}
	if a.Event != "" {
		out.Event = &a.Event
		var m map[string]protocol.AnyJSON
		if json.Unmarshal(a.Match, &m) == nil && m != nil {
			out.Match = &m
		}
	}
	if a.Topic != "" {
		out.Topic = &a.Topic
	}
	if a.CallbackSeq > 0 {
		out.CallbackSeq = &a.CallbackSeq
	}
	if len(a.Of) > 0 {
		of := make([]protocol.Awaiting, len(a.Of))
		for i := range a.Of {
			of[i] = *AwaitingToAPI(&a.Of[i])
		}
		out.Of = &of
	}
	return out
}
