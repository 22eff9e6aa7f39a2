package functionstest

import (
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/stepgate/stepgate/functions/internal/gatewaytest"
	"github.com/stepgate/stepgate/protocol"
	"github.com/stepgate/stepgate/protocol/awaits"
)

// identity is the sender of what a test delivers: the harness's user.
func identity() map[string]any {
	return map[string]any{"subject": "user-1", "tenant": gatewaytest.Tenant, "roles": []string{"admin"}}
}

func mustJSON(v any) json.RawMessage {
	raw, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("functionstest: encode %T: %v", v, err))
	}
	return raw
}

// SendEvent sends an event called name with data (encoded as JSON), as POST /v1/events
// does: every run of the harness waiting for it (step.WaitForEvent, or among a
// step.WaitFirst) whose match it meets resumes, in start order. A run not waiting for it
// does not keep it, except for a later wait with a look-back (since, since_start). It
// returns how many runs it resumed.
func (h *Harness) SendEvent(name string, data any) int {
	h.t.Helper()
	return h.publish(awaits.Event{ID: newUUID(), Name: name, Data: mustJSON(data), Identity: identity(), At: h.now})
}

// publish stores ev and resumes the runs waiting for it; it returns how many.
func (h *Harness) publish(ev awaits.Event) int {
	h.t.Helper()
	h.evs = append(h.evs, ev)
	n := 0
	for _, r := range h.waiting() {
		if r.waiting == nil {
			continue
		}
		if e, ok := r.waiting.First(func(a awaits.Alternative) (json.RawMessage, bool) {
			if !a.TakesEvent(ev) {
				return nil, false
			}
			return r.mem.Take(ev), true
		}); ok {
			n++
			r.resume(e)
		}
	}
	return n
}

// SendEvent is the harness's SendEvent, returning this run's state after it.
func (r *Run) SendEvent(name string, data any) Result {
	r.h.t.Helper()
	r.h.SendEvent(name, data)
	return r.Result()
}

// pending returns the output that ends the alternative a now, as the gateway would
// (awaits.Memory.Pending), taking a message it uses.
func (r *Run) pending(a awaits.Alternative) (json.RawMessage, bool) {
	return r.mem.Pending(a, awaits.Elsewhere{Events: r.h.evs, Created: r.evsAtStart, RunEnd: r.h.runEnd})
}

// SendMessage sends the run a message of topic with data (encoded as JSON), as POST
// /v1/runs/{id}/messages does: the run's oldest receive of topic takes it, at once if the
// run waits for it (step.Receive, or among a step.WaitFirst), else when it next does.
func (r *Run) SendMessage(topic string, data any) Result {
	r.h.t.Helper()
	r.deliver(awaits.Message{ID: newUUID(), Topic: topic, Data: mustJSON(data), Identity: identity(), At: r.h.now})
	return r.Result()
}

func (r *Run) deliver(m awaits.Message) {
	r.mem.Send(m)
	if r.waiting != nil && r.waiting.Takes(m.Topic) {
		if e, ok := r.waiting.First(r.pending); ok {
			r.resume(e)
		}
	}
}

// SendRequest sends the run a request called name with data, as POST
// /v1/runs/{id}/requests does (a message of topic "request:"+name), drives the run, and
// returns the reply it journaled for it (step.Reply's data, or step.ReplyError's error as
// a *protocol.ErrorInfo); ok is false while the run has not replied.
func (r *Run) SendRequest(name string, data any) (reply json.RawMessage, replyErr *protocol.ErrorInfo, ok bool) {
	r.h.t.Helper()
	m := awaits.Message{ID: newUUID(), Topic: "request:" + name, Data: mustJSON(data), Identity: identity(), At: r.h.now}
	r.deliver(m)
	for _, e := range r.Journal() {
		if e.Kind == protocol.EntryKindReply && e.Name == m.ID {
			if e.Error != nil {
				return nil, e.Error, true
			}
			if e.Output != nil {
				reply = json.RawMessage(*e.Output)
			}
			return reply, nil, true
		}
	}
	return nil, nil, false
}

// ResolveCallback resolves the run's latest callback called name (step.Callback)
// with data, as a POST to its URL does: its wait resumes with data, at once if the run
// waits for it, else when it does.
func (r *Run) ResolveCallback(name string, data any) Result {
	r.h.t.Helper()
	return r.settleCallback(name, awaits.Resolution(mustJSON(data), nil, r.h.now))
}

// RejectCallback rejects the run's latest callback called name with an error of type
// typ ("rejected" when empty) and message msg, as POST <url>/reject does: its wait
// returns a *step.Error of that type.
func (r *Run) RejectCallback(name, typ, msg string) Result {
	r.h.t.Helper()
	if typ == "" {
		typ = "rejected"
	}
	return r.settleCallback(name, awaits.Resolution(nil, &protocol.ErrorInfo{Type: typ, Message: msg}, r.h.now))
}

func (r *Run) settleCallback(name string, out json.RawMessage) Result {
	r.h.t.Helper()
	seq := 0
	for _, e := range r.Journal() {
		if e.Kind == protocol.EntryKindCallback && e.Name == name {
			seq = e.Seq
		}
	}
	if seq == 0 {
		r.h.t.Fatalf("functionstest: run %s has no callback %q", r.id, name)
	}
	if !r.mem.Settle(seq, out) {
		r.h.t.Fatalf("functionstest: run %s: callback %q (seq %d) is already settled", r.id, name, seq)
	}
	if r.waiting != nil {
		if e, ok := r.waiting.First(func(a awaits.Alternative) (json.RawMessage, bool) {
			return out, a.CallbackSeq == seq
		}); ok {
			r.resume(e)
		}
	}
	return r.Result()
}

// Sent is an event (step.SendEvent) or a message (step.Send) the run sent.
type Sent struct {
	Seq   int
	Name  string // The event's name, or the message's topic.
	RunID string // The message's run; "" for an event.
	Data  json.RawMessage
}

// SentEvents returns the events the run sent, in seq order.
func (r *Run) SentEvents() []Sent { return r.sent(protocol.EntryKindEvent) }

// SentMessages returns the messages the run sent, in seq order.
func (r *Run) SentMessages() []Sent { return r.sent(protocol.EntryKindSend) }

func (r *Run) sent(kind protocol.EntryKind) []Sent {
	var out []Sent
	for _, e := range r.Journal() {
		if e.Kind != kind || e.Output == nil || e.Error != nil {
			continue
		}
		var o struct {
			RunID string          `json:"run_id"`
			Data  json.RawMessage `json:"data"`
		}
		_ = json.Unmarshal(*e.Output, &o)
		out = append(out, Sent{Seq: e.Seq, Name: e.Name, RunID: o.RunID, Data: o.Data})
	}
	return out
}

// routeSends delivers what the run's new journal entries send, as the gateway does: an
// event (step.SendEvent) to the runs of the harness waiting for it, a message
// (step.Send) to its run when that is one of the harness's; a message to another run id
// is recorded only.
func (r *Run) routeSends() {
	if r.scanned == nil {
		r.scanned = map[int]bool{}
	}
	for _, e := range r.Journal() {
		if r.scanned[e.Seq] {
			continue
		}
		r.scanned[e.Seq] = true
		if e.Kind == protocol.EntryKindEvent && e.Output != nil {
			var o struct {
				Name string          `json:"name"`
				Data json.RawMessage `json:"data"`
				ID   string          `json:"id"`
			}
			_ = json.Unmarshal(*e.Output, &o)
			r.h.publish(awaits.Event{ID: o.ID, Name: o.Name, Data: o.Data, Identity: identity(), At: r.h.now})
			continue
		}
		if e.Kind != protocol.EntryKindSend || e.Output == nil {
			continue
		}
		var o struct {
			RunID string          `json:"run_id"`
			Topic string          `json:"topic"`
			Data  json.RawMessage `json:"data"`
		}
		_ = json.Unmarshal(*e.Output, &o)
		if to := r.h.byID[o.RunID]; to != nil && to != r {
			to.deliver(awaits.Message{ID: r.id + ":" + strconv.Itoa(e.Seq), Topic: o.Topic, Data: o.Data, Identity: identity(), Source: r.id, At: r.h.now})
		}
	}
}
