package gateway_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/auth"
	"github.com/stepgate/stepgate/functions"
	"github.com/stepgate/stepgate/functions/step"
	"github.com/stepgate/stepgate/internal/wiring/stack"
	"github.com/stepgate/stepgate/protocol"
)

// orderFlow registers "order" on app: step first, a sleep of an hour, step second
// (second runs first with swapped), each step body counted in bodies; and "patched":
// step "reserve", the sleep, then, where the patch "audit" applies (withPatch), step
// "audit", then step "charge".
func orderFlow(app *functions.App, bodies *atomic.Int64, swapped, withPatch bool) {
	first, second := "reserve", "charge"
	if swapped {
		first, second = second, first
	}
	body := func(name string) func(context.Context) (string, error) {
		return func(context.Context) (string, error) {
			bodies.Add(1)
			return name + " done", nil
		}
	}
	functions.Register(app, "order", func(ctx context.Context, _ struct{}) (string, error) {
		if _, err := step.Run(ctx, first, body(first)); err != nil {
			return "", err
		}
		if err := step.Sleep(ctx, "cool off", time.Hour); err != nil {
			return "", err
		}
		return step.Run(ctx, second, body(second))
	})
	functions.Register(app, "patched", func(ctx context.Context, _ struct{}) (string, error) {
		if _, err := step.Run(ctx, "reserve", body("reserve")); err != nil {
			return "", err
		}
		if err := step.Sleep(ctx, "cool off", time.Hour); err != nil {
			return "", err
		}
		if withPatch {
			ok, err := step.Patched(ctx, "audit")
			if err != nil {
				return "", err
			}
			if ok {
				if _, err := step.Run(ctx, "audit", body("audit")); err != nil {
					return "", err
				}
			}
		}
		return step.Run(ctx, "charge", body("charge"))
	})
}

// rawApp serves a manifest naming function "order" at /order (with replay_only unless
// legacy) and answers each invocation with answer, counting them in invocations.
func rawApp(invocations *atomic.Int64, legacy bool, answer func(w http.ResponseWriter, r *http.Request, req protocol.InvocationRequest)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			m := protocol.Manifest{Protocol: new(1), Functions: []protocol.ManifestFunction{{Name: "order", Path: "order",
				Config: &protocol.FunctionConfig{Timeout: new("1s")}}}}
			if !legacy {
				m.ReplayOnly = new(true)
			}
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(m)
			return
		}
		invocations.Add(1)
		var req protocol.InvocationRequest
		_ = json.NewDecoder(r.Body).Decode(&req)
		answer(w, r, req)
	})
}

func syncCheck(t *testing.T, c *protocol.ClientWithResponses, appURL string, params protocol.SyncAppParams) *protocol.SyncAppResponse {
	t.Helper()
	resp, err := c.SyncAppWithResponse(t.Context(), &params, protocol.AppSync{URL: appURL})
	require.NoError(t, err)
	return resp
}

func functionCheckOf(t *testing.T, c protocol.AppCheck, name string) protocol.FunctionCheck {
	t.Helper()
	for _, f := range c.Functions {
		if f.Function == name {
			return f
		}
	}
	t.Fatalf("the check has no function %s: %+v", name, c)
	return protocol.FunctionCheck{}
}

func getFunction(t *testing.T, c *protocol.ClientWithResponses, name string) protocol.Function {
	t.Helper()
	resp, err := c.GetFunctionWithResponse(t.Context(), name)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode(), string(resp.Body))
	return *resp.JSON200
}

// TestSyncCheck checks an app's new code against live runs through a real gateway:
// POST /v1/apps?check=true replays them as replay-only invocations, refuses a change
// that reorders two steps while a run is suspended between them, and accepts one
// guarded by a patch.
func TestSyncCheck(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{})
	alice := auth.Identity{Subject: "alice", Tenant: "t1", Roles: []string{"developer"}}
	c := s.Client(t, s.NewToken(t, alice))

	var oldBodies, newBodies, patchBodies atomic.Int64
	v1 := s.NewApp()
	orderFlow(v1, &oldBodies, false, false)
	v1URL := s.ServeApp(t, v1)
	synced := syncCheck(t, c, v1URL, protocol.SyncAppParams{Check: new(true)})
	require.Equal(t, http.StatusOK, synced.StatusCode(), string(synced.Body))
	require.True(t, synced.JSON200.Check.Ok, "no live runs yet: %s", synced.Body)
	require.Len(t, synced.JSON200.Functions, 2)

	start := func(name string) string {
		resp := startRun(t, c, name, `{}`, &protocol.StartRunParams{})
		require.Equal(t, http.StatusAccepted, resp.StatusCode(), string(resp.Body))
		return resp.JSON202.ID
	}
	order, patched := start("order"), start("patched")
	suspended := stack.AwaitStatus(t, c, order, protocol.RunStatusSuspended)
	stack.AwaitStatus(t, c, patched, protocol.RunStatusSuspended)
	require.EqualValues(t, 2, oldBodies.Load(), "each run took its first step")

	v2 := s.NewApp() // order's steps swapped
	orderFlow(v2, &newBodies, true, false)
	v2URL := s.ServeApp(t, v2)
	v3 := s.NewApp() // patched's new step behind a patch
	orderFlow(v3, &patchBodies, false, true)
	v3URL := s.ServeApp(t, v3)

	t.Run("AReorderIsRefusedNamingTheRunAndTheDivergence", func(t *testing.T) {
		resp := syncCheck(t, c, v2URL, protocol.SyncAppParams{Check: new(true)})
		require.Equal(t, http.StatusConflict, resp.StatusCode(), string(resp.Body))
		refused := resp.ApplicationProblemJSON409
		require.Contains(t, refused.Detail, "order: 1 of 1 live runs checked")
		require.NotNil(t, refused.Check)
		chk := *refused.Check
		require.False(t, chk.Ok)
		require.False(t, chk.Registered)
		o := functionCheckOf(t, chk, "order")
		require.Equal(t, 1, o.Live)
		require.Equal(t, 1, o.Checked)
		require.Zero(t, o.Clean)
		require.Equal(t, new(1), o.Revision, "nothing was registered: the revision the function is at")
		require.Len(t, o.Broken, 1)
		b := o.Broken[0]
		require.Equal(t, order, b.RunID)
		require.Equal(t, 1, b.Revision)
		require.Nil(t, b.Error)
		require.NotNil(t, b.Divergence)
		require.Equal(t, 1, b.Divergence.Seq)
		require.Equal(t, "reserve", b.Divergence.Journal.Name)
		require.Equal(t, "charge", b.Divergence.Asked.Name)
		p := functionCheckOf(t, chk, "patched")
		require.Equal(t, 1, p.Clean, "patched did not change")

		require.Zero(t, newBodies.Load(), "a replay-only invocation runs no step body")
		fn := getFunction(t, c, "order")
		require.Equal(t, 1, fn.Revision, "nothing was registered")
		require.Equal(t, v1URL+"order", fn.URL)
		require.NotNil(t, fn.LastCheck)
		require.False(t, fn.LastCheck.Registered)
		require.Equal(t, "alice", *fn.LastCheck.Subject)
		require.Equal(t, o, fn.LastCheck.Check)
	})

	t.Run("ADryRunRegistersNothing", func(t *testing.T) {
		resp := syncCheck(t, c, v2URL, protocol.SyncAppParams{DryRun: new(true)})
		require.Equal(t, http.StatusOK, resp.StatusCode(), string(resp.Body))
		require.Empty(t, resp.JSON200.Functions)
		require.False(t, resp.JSON200.Check.Ok)
		require.False(t, resp.JSON200.Check.Registered)
		require.Equal(t, 1, getFunction(t, c, "order").Revision)
	})

	t.Run("APatchGuardedChangeIsAccepted", func(t *testing.T) {
		resp := syncCheck(t, c, v3URL, protocol.SyncAppParams{Check: new(true), CheckSample: new(5)})
		require.Equal(t, http.StatusOK, resp.StatusCode(), string(resp.Body))
		chk := resp.JSON200.Check
		require.True(t, chk.Ok, string(resp.Body))
		require.True(t, chk.Registered)
		p := functionCheckOf(t, *chk, "patched")
		// Its revision is the one the sync registered from the code checked.
		require.Equal(t, protocol.FunctionCheck{Function: "patched", URL: new(v3URL + "patched"), Revision: new(2), Live: 1, Checked: 1, Clean: 1, Broken: []protocol.RunCheck{}}, p)
		require.Zero(t, patchBodies.Load(), "a replay-only invocation runs no step body")
		fn := getFunction(t, c, "patched")
		require.Equal(t, 2, fn.Revision)
		require.True(t, fn.LastCheck.Registered)
		require.Equal(t, p, fn.LastCheck.Check)
		require.Nil(t, fn.LastCheck.Forced)
	})

	t.Run("ForceRegistersAnyway", func(t *testing.T) {
		resp := syncCheck(t, c, v2URL, protocol.SyncAppParams{Check: new(true), Force: new(true)})
		require.Equal(t, http.StatusOK, resp.StatusCode(), string(resp.Body))
		chk := resp.JSON200.Check
		require.False(t, chk.Ok)
		require.True(t, chk.Registered)
		require.True(t, *chk.Forced)
		fn := getFunction(t, c, "order")
		require.Equal(t, 3, fn.Revision, "after revisions 1 (v1) and 2 (v3)")
		require.True(t, *fn.LastCheck.Forced)
	})

	t.Run("TheLiveRunsAreUntouched", func(t *testing.T) {
		after := getRun(t, c, order)
		require.Equal(t, protocol.RunStatusSuspended, after.Status)
		require.Equal(t, suspended.Invocations, after.Invocations, "a check is no invocation of the run")
		require.Equal(t, suspended.Journal, after.Journal)
		require.Equal(t, 1, after.Revision)
		require.EqualValues(t, 2, oldBodies.Load())
	})

	t.Run("BoundsAndPermissions", func(t *testing.T) {
		for _, n := range []int{0, 101} {
			resp := syncCheck(t, c, v2URL, protocol.SyncAppParams{Check: new(true), CheckSample: new(n)})
			require.Equal(t, http.StatusBadRequest, resp.StatusCode(), string(resp.Body))
			require.Contains(t, string(resp.Body), "check_sample")
			require.Contains(t, string(resp.Body), "1 to 100")
		}
		resp := syncCheck(t, c, v2URL, protocol.SyncAppParams{Force: new(true)})
		require.Equal(t, http.StatusBadRequest, resp.StatusCode(), string(resp.Body))
		require.Contains(t, string(resp.Body), "force and check_sample go with check=true")

		writer := s.Client(t, s.NewToken(t, auth.Identity{Subject: "w", Tenant: "t1", Roles: []string{"functions:write"}}))
		resp = syncCheck(t, writer, v2URL, protocol.SyncAppParams{Check: new(true)})
		require.Equal(t, http.StatusForbidden, resp.StatusCode(), string(resp.Body))
		require.Contains(t, string(resp.Body), "runs:read")
		viewer := s.Client(t, s.NewToken(t, auth.Identity{Subject: "v", Tenant: "t1", Roles: []string{"viewer"}}))
		resp = syncCheck(t, viewer, v2URL, protocol.SyncAppParams{Check: new(true)})
		require.Equal(t, http.StatusForbidden, resp.StatusCode(), string(resp.Body))
		require.Contains(t, string(resp.Body), "functions:write")
		require.Zero(t, newBodies.Load())
	})

	t.Run("AnotherTenantSeesNeitherTheRunsNorTheCheck", func(t *testing.T) {
		mallory := s.Client(t, s.NewToken(t, auth.Identity{Subject: "mallory", Tenant: "t2", Roles: []string{"admin"}}))
		resp := syncCheck(t, mallory, v2URL, protocol.SyncAppParams{DryRun: new(true)})
		require.Equal(t, http.StatusOK, resp.StatusCode(), string(resp.Body))
		require.True(t, resp.JSON200.Check.Ok)
		require.Zero(t, functionCheckOf(t, *resp.JSON200.Check, "order").Live)
		require.NotContains(t, string(resp.Body), order)
		fr, err := mallory.GetFunctionWithResponse(t.Context(), "order")
		require.NoError(t, err)
		require.Equal(t, http.StatusNotFound, fr.StatusCode(), "a dry run registers nothing in t2 either")
		resp = syncCheck(t, mallory, v2URL, protocol.SyncAppParams{Check: new(true)})
		require.Equal(t, http.StatusOK, resp.StatusCode(), string(resp.Body))
		fn := getFunction(t, mallory, "order")
		require.Zero(t, fn.LastCheck.Check.Live, "t2's own check")
		require.Equal(t, "mallory", *fn.LastCheck.Subject)
		require.Equal(t, "alice", *getFunction(t, c, "order").LastCheck.Subject, "t1's last check is t1's")
	})

	t.Run("AnAppThatDoesNotSayReplayOnlyGetsNoInvocation", func(t *testing.T) {
		var calls atomic.Int64
		legacy := s.ServeApp(t, rawApp(&calls, true, func(w http.ResponseWriter, _ *http.Request, _ protocol.InvocationRequest) {
			_, _ = w.Write([]byte(`{"status":"completed","output":"ran a step"}`))
		}))
		resp := syncCheck(t, c, legacy, protocol.SyncAppParams{Check: new(true)})
		require.Equal(t, http.StatusConflict, resp.StatusCode(), string(resp.Body))
		require.Contains(t, resp.ApplicationProblemJSON409.Detail, "replay_only")
		require.NotNil(t, resp.ApplicationProblemJSON409.Check.Reason)
		require.Zero(t, calls.Load(), "no replay-only invocation went to an SDK that may not know it")
	})

	t.Run("AMaliciousOrBrokenFunctionIsABrokenRunNotACheckThatPasses", func(t *testing.T) {
		cases := map[string]struct {
			answer  func(w http.ResponseWriter, r *http.Request, req protocol.InvocationRequest)
			errType string
		}{
			"runs steps anyway": {func(w http.ResponseWriter, _ *http.Request, _ protocol.InvocationRequest) {
				_, _ = w.Write([]byte(`{"status":"completed","output":1}`))
			}, "not_replayed"},
			"answers garbage": {func(w http.ResponseWriter, _ *http.Request, _ protocol.InvocationRequest) {
				_, _ = w.Write([]byte(`<html>`))
			}, "malformed_answer"},
			"hangs": {func(_ http.ResponseWriter, r *http.Request, _ protocol.InvocationRequest) {
				<-r.Context().Done() // until the gateway stops waiting, past the function's 1s timeout
			}, "timeout"},
			"answers 500": {func(w http.ResponseWriter, _ *http.Request, _ protocol.InvocationRequest) {
				http.Error(w, "boom", http.StatusInternalServerError)
			}, "http_status"},
		}
		for name, tc := range cases {
			t.Run(name, func(t *testing.T) {
				var calls atomic.Int64
				bad := s.ServeApp(t, rawApp(&calls, false, tc.answer))
				resp := syncCheck(t, c, bad, protocol.SyncAppParams{DryRun: new(true)})
				require.Equal(t, http.StatusOK, resp.StatusCode(), string(resp.Body))
				o := functionCheckOf(t, *resp.JSON200.Check, "order")
				require.Len(t, o.Broken, 1, string(resp.Body))
				require.NotNil(t, o.Broken[0].Error)
				require.Equal(t, tc.errType, o.Broken[0].Error.Type, o.Broken[0].Error.Message)
				require.EqualValues(t, 1, calls.Load())
			})
		}
	})

	t.Run("AReplayOnlyInvocationCannotCheckpoint", func(t *testing.T) {
		var calls atomic.Int64
		codes := make(chan int, 1)
		var sent protocol.InvocationRequest
		sneaky := s.ServeApp(t, rawApp(&calls, false, func(w http.ResponseWriter, _ *http.Request, req protocol.InvocationRequest) {
			sent = req
			entry, _ := json.Marshal(protocol.JournalEntry{Seq: 3, Kind: protocol.EntryKindStep, Name: "sneak", Output: new(protocol.AnyJSON(`1`))})
			hreq, _ := http.NewRequest(http.MethodPost, req.Checkpoint.URL, bytes.NewReader(entry))
			hreq.Header.Set("Authorization", "Bearer "+req.Checkpoint.Token)
			hreq.Header.Set("Content-Type", "application/json")
			code := 0
			if r, err := http.DefaultClient.Do(hreq); err == nil {
				_, _ = io.Copy(io.Discard, r.Body)
				r.Body.Close()
				code = r.StatusCode
			}
			codes <- code
			_, _ = w.Write([]byte(`{"status":"replayed","replay":{"next":{"seq":3,"kind":"step","name":"charge"}}}`))
		}))
		resp := syncCheck(t, c, sneaky, protocol.SyncAppParams{DryRun: new(true)})
		require.Equal(t, http.StatusOK, resp.StatusCode(), string(resp.Body))
		require.Equal(t, http.StatusUnauthorized, <-codes, "the replay-only token checkpoints nothing")
		require.True(t, sent.ReplayOnly != nil && *sent.ReplayOnly)
		require.Equal(t, order, sent.Run.ID)
		require.Equal(t, suspended.Invocations+1, sent.Run.Attempt, "as the run's next invocation")
		require.Len(t, sent.Journal, 2, "the run's journal: its first step and its sleep")
		require.Equal(t, suspended.Journal, getRun(t, c, order).Journal, "nothing was journaled")
		require.EqualValues(t, 1, functionCheckOf(t, *resp.JSON200.Check, "order").Clean)
	})

	assert.EqualValues(t, 2, oldBodies.Load())
}
