package gateway_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/functions"
	"github.com/stepgate/stepgate/functions/step"
	"github.com/stepgate/stepgate/internal/wiring/stack"
	"github.com/stepgate/stepgate/protocol"
)

// TestRerunPastACallback reruns runs from seqs past their callback's entry: the new run
// never gets the old run's callback token. Its copy of the callback is a fresh one, with
// a token of its own that resolves it (by URL, by name, listed), and the old token
// resolves nothing of the new run; a copy whose await is copied too keeps its
// resolution.
func TestRerunPastACallback(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{})
	c := s.Client(t, s.Token)

	var mu sync.Mutex
	seen := map[string][]string{} // run id -> the callback URLs its function got
	var failed sync.Map           // input key -> charge failed once
	app := s.NewApp()
	// approve makes a callback (seq 1), hands its URL out (2), waits for it (3) and
	// charges (4), which fails once per key.
	functions.Register(app, "approve", func(ctx context.Context, in struct {
		Key string `json:"key"`
	}) (approvalOutcome, error) {
		cb, err := step.Callback[approval](ctx, "approval", step.Timeout(time.Hour))
		if err != nil {
			return approvalOutcome{}, err
		}
		mu.Lock()
		id := functions.RunFrom(ctx).ID
		seen[id] = append(seen[id], cb.URL)
		mu.Unlock()
		if _, err := step.Run(ctx, "notify", func(context.Context) (string, error) { return cb.URL, nil }); err != nil {
			return approvalOutcome{}, err
		}
		out, err := approvalOf(cb)
		if err != nil {
			return out, err
		}
		_, err = step.Run(ctx, "charge", func(context.Context) (bool, error) {
			if _, again := failed.LoadOrStore(in.Key, true); !again {
				return false, step.NonRetryable(errors.New("card declined"))
			}
			return true, nil
		})
		return out, err
	})
	s.Sync(t, s.ServeApp(t, app))

	urlsOf := func(id string) []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), seen[id]...)
	}
	rerun := func(t *testing.T, id string, from int) string {
		t.Helper()
		resp, err := c.RerunRunWithResponse(t.Context(), id, protocol.RerunRunJSONRequestBody{FromSeq: &from})
		require.NoError(t, err)
		require.Equal(t, http.StatusAccepted, resp.StatusCode(), string(resp.Body))
		return resp.JSON202.ID
	}
	// cancelled starts a run of key, waits for it to await its callback, cancels it and
	// returns its id and callback URL.
	cancelled := func(t *testing.T, key string) (string, string) {
		t.Helper()
		id := startAsync(t, c, "approve", `{"key":"`+key+`"}`)
		_, url := waitingForCallback(t, c, id)
		resp, err := c.CancelRunWithResponse(t.Context(), id)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode(), string(resp.Body))
		stack.AwaitStatus(t, c, id, protocol.RunStatusCancelled)
		return id, url
	}
	// notTheOld checks that none of the URLs the run id's function got is old, nor
	// holds old's token.
	notTheOld := func(t *testing.T, id, old string) {
		t.Helper()
		urls := urlsOf(id)
		require.NotEmpty(t, urls)
		token := old[strings.LastIndex(old, "/")+1:]
		for _, u := range urls {
			require.NotContains(t, u, token, "the new run got the old run's callback token")
			require.True(t, strings.HasPrefix(u, s.URL+"/v1/callbacks/"), u)
		}
	}
	// oldResolvesNothing checks that old's token does not resolve the callback of run
	// id, which still waits.
	oldResolvesNothing := func(t *testing.T, id, old string) {
		t.Helper()
		code, body := postNoAuth(t, old, `{"ok":true}`)
		require.NotEqual(t, http.StatusOK, code, body)
		run := waitingForCallbackOnly(t, c, id)
		require.Equal(t, protocol.RunStatusSuspended, run.Status)
	}

	t.Run("FromBetweenTheCallbackAndItsURLsHandOff", func(t *testing.T) {
		t.Parallel()
		old, oldURL := cancelled(t, "handoff")
		id := rerun(t, old, 2)
		run, url := waitingForCallback(t, c, id)
		require.True(t, *run.Journal[0].Copied, "the callback's entry is a copy")
		require.NotEqual(t, oldURL, url, "notify ran anew, with the fresh callback's URL")
		notTheOld(t, id, oldURL)
		oldResolvesNothing(t, id, oldURL)

		code, body := postNoAuth(t, url, `{"ok":true}`)
		require.Equal(t, http.StatusOK, code, body)
		done := stack.AwaitStatus(t, c, id, protocol.RunStatusFailed) // charge fails once for the key
		require.Contains(t, done.Error.Message, "card declined")
	})

	t.Run("FromTheAwait", func(t *testing.T) {
		t.Parallel()
		old, oldURL := cancelled(t, "await")
		id := rerun(t, old, 3)
		waitingForCallbackOnly(t, c, id)
		notTheOld(t, id, oldURL)
		oldResolvesNothing(t, id, oldURL)

		// The fresh callback is listed with its own URL, which resolves it.
		listed, err := c.ListRunCallbacksWithResponse(t.Context(), id)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, listed.StatusCode(), string(listed.Body))
		require.Len(t, listed.JSON200.Callbacks, 1)
		fresh := listed.JSON200.Callbacks[0]
		require.Equal(t, 1, fresh.Seq)
		require.True(t, *fresh.Awaited)
		require.Equal(t, urlsOf(id)[0], fresh.URL, "the URL the function got")
		require.WithinDuration(t, time.Now().Add(time.Hour), fresh.ExpiresAt, 5*time.Minute, "the callback's timeout, from the rerun")
		code, body := postNoAuth(t, fresh.URL, `{"ok":true}`)
		require.Equal(t, http.StatusOK, code, body)
		stack.AwaitStatus(t, c, id, protocol.RunStatusFailed)
	})

	t.Run("ByNameAfterTheHandOff", func(t *testing.T) {
		t.Parallel()
		old, oldURL := cancelled(t, "by-name")
		id := rerun(t, old, 3)
		waitingForCallbackOnly(t, c, id)
		notTheOld(t, id, oldURL)
		resp, err := c.ResolveRunCallbackWithResponse(t.Context(), id, "approval", protocol.AnyJSON(`{"ok":true}`))
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode(), string(resp.Body))
		require.True(t, resp.JSON200.Resumed)
		stack.AwaitStatus(t, c, id, protocol.RunStatusFailed)
	})

	t.Run("PastTheAwaitTheResolutionIsKept", func(t *testing.T) {
		t.Parallel()
		id := startAsync(t, c, "approve", `{"key":"past"}`)
		_, oldURL := waitingForCallback(t, c, id)
		code, body := postNoAuth(t, oldURL, `{"ok":true}`)
		require.Equal(t, http.StatusOK, code, body)
		failedRun := stack.AwaitStatus(t, c, id, protocol.RunStatusFailed)
		require.Contains(t, failedRun.Error.Message, "card declined")

		again := rerun(t, id, 4)
		done := stack.AwaitStatus(t, c, again, protocol.RunStatusCompleted)
		var out approvalOutcome
		require.NoError(t, json.Unmarshal(*done.Output, &out))
		require.Equal(t, approvalOutcome{OK: true, Resolver: "token"}, out, "the copied resolution")
		notTheOld(t, again, oldURL)
		code, body = postNoAuth(t, oldURL, `{"ok":false}`)
		require.Equal(t, http.StatusConflict, code, body)
		// The copy's token resolves nothing either: its callback is resolved already.
		code, body = postNoAuth(t, urlsOf(again)[0], `{"ok":false}`)
		require.Equal(t, http.StatusConflict, code, body)
	})
}
