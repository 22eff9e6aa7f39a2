package functions

import "github.com/stepgate/stepgate/protocol"

// OnEvent makes each event called one of names start a run of the function, with the
// event's data as its input (decoded into In as any input is) and the identity of the
// event's sender: a caller of POST /v1/events, or a run that called step.SendEvent.
// Names match exactly. Calling it again adds names.
func OnEvent(names ...string) Option {
	return Option{set: func(c *protocol.FunctionConfig) {
		var ts []protocol.EventTrigger
		if c.Triggers != nil {
			ts = *c.Triggers
		}
		for _, n := range names {
			ts = append(ts, protocol.EventTrigger{Event: n})
		}
		c.Triggers = &ts
	}}
}
