package invoker

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/stepgate/stepgate/journal"
	"github.com/stepgate/stepgate/protocol"
	"github.com/stepgate/stepgate/protocol/awaits"
)

// callbackCheckpoint: the run makes a callback (step.Callback), journaled with a new
// token and its URL (see journal.CreateCallback); the answer's output is the entry's
// {"url", "token", "expires_at"}. The checkpoint's output may be
// {"timeout": "<duration>"} (1s to MaxCallbackTimeout; DefaultCallbackTimeout when
// absent). A repeated checkpoint answers the first output. The token is 256 random
// bits, base64url: only the gateway makes it; the database keeps its SHA-256 in
// stepgate.callback and the journal keeps it sealed (journal.CallbackKey), which the
// gateway opens for the run's own invocations only.
func init() { checkpointKinds[protocol.EntryKindCallback] = callbackCheckpoint }

var callbackCheckpoint = checkpointKind{
	check: func(_ Invocation, e *protocol.JournalEntry) error {
		if e.Error != nil {
			return badCheckpoint("a callback has no error")
		}
		_, err := callbackSpec(e)
		return err
	},
	journal: func(inv *Invoker, ctx context.Context, in Invocation, checkpoint protocol.JournalEntry) (CheckpointAck, error) {
		timeout, _ := callbackSpec(&checkpoint) // checked by check
		e := entryFromAPI(checkpoint)
		key, err := inv.callbackKeyOf(ctx)
		if err != nil {
			return CheckpointAck{}, err
		}
		token, url := inv.newCallbackToken()
		var out json.RawMessage
		err = pgx.BeginFunc(ctx, inv.pool, func(tx pgx.Tx) error {
			var err error
			out, err = journal.CreateCallback(ctx, tx, in.RunID, in.Number, journal.NewCallback{
				Seq: e.Seq, Name: e.Name, Token: token, URL: url, Key: key, Timeout: timeout, Window: e.Window,
			}, inv.limits.Bounds())
			return err
		})
		return CheckpointAck{Output: out}, inv.failOnCheckpoint(ctx, in.RunID, in.Number, err)
	},
}

// newCallbackToken returns a new callback token, CallbackTokenBytes random bytes in
// base64url, and the URL that resolves it.
func (inv *Invoker) newCallbackToken() (token, url string) {
	b := make([]byte, CallbackTokenBytes)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	token = base64.RawURLEncoding.EncodeToString(b)
	return token, inv.callbackURL(token)
}

// callbackSpec reads a callback checkpoint's timeout from its output, absent or
// {"timeout": "<duration>"}: a *BadCheckpointError otherwise.
func callbackSpec(e *protocol.JournalEntry) (timeout time.Duration, err error) {
	var spec struct {
		Timeout *string `json:"timeout"`
	}
	if e.Output != nil && len(*e.Output) > 0 && string(*e.Output) != "null" {
		dec := json.NewDecoder(strings.NewReader(string(*e.Output)))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&spec); err != nil {
			return 0, badCheckpoint(`a callback's output is absent or {"timeout": "<duration>"}: %v`, err)
		}
	}
	timeout, bad := awaits.CallbackTimeout("callback", spec.Timeout, DefaultCallbackTimeout)
	if bad != nil {
		return 0, badCheckpoint("%s", bad.Message)
	}
	return timeout, nil
}
