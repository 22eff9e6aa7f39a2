package gateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/auth"
	"github.com/stepgate/stepgate/functions"
	"github.com/stepgate/stepgate/functions/step"
	"github.com/stepgate/stepgate/gateway"
	"github.com/stepgate/stepgate/internal/wiring/stack"
	"github.com/stepgate/stepgate/protocol"
)

// manifestApp serves a manifest, with replay_only, naming each of names at a path of its
// name, and answers each invocation with answer.
func manifestApp(names []string, answer http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet {
			if answer == nil {
				http.Error(w, "no invocation expected", http.StatusInternalServerError)
				return
			}
			answer(w, r)
			return
		}
		m := protocol.Manifest{Protocol: new(1), ReplayOnly: new(true)}
		for _, n := range names {
			m.Functions = append(m.Functions, protocol.ManifestFunction{Name: n, Path: n})
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(m)
	})
}

// TestSyncCheckBounds checks that a check of an app's new code against live runs is
// bounded as a bulk operation is: one at a time per tenant, across gateways; a bounded
// manifest; a bounded sum of journal bytes sent; and no check kept for a name that is
// not registered.
func TestSyncCheckBounds(t *testing.T) {
	t.Parallel()

	t.Run("OneCheckAtATimePerTenantAcrossGateways", func(t *testing.T) {
		t.Parallel()
		a := stack.Start(t, stack.Options{})
		b := stack.Start(t, stack.Options{DatabaseURL: a.Pool.Config().ConnString()})
		alice := auth.Identity{Subject: "alice", Tenant: "t1", Roles: []string{"developer"}}
		ca, cb := a.Client(t, a.NewToken(t, alice)), b.Client(t, b.NewToken(t, alice))
		var bodies atomic.Int64
		v1 := a.NewApp()
		orderFlow(v1, &bodies, false, false)
		v1URL := a.ServeApp(t, v1)
		synced := syncCheck(t, ca, v1URL, protocol.SyncAppParams{Check: new(true)})
		require.Equal(t, http.StatusOK, synced.StatusCode(), string(synced.Body))
		resp := startRun(t, ca, "order", `{}`, &protocol.StartRunParams{})
		require.Equal(t, http.StatusAccepted, resp.StatusCode(), string(resp.Body))
		stack.AwaitStatus(t, ca, resp.JSON202.ID, protocol.RunStatusSuspended)

		entered, release := make(chan struct{}, 10), make(chan struct{})
		var calls atomic.Int64
		slow := a.ServeApp(t, rawApp(&calls, false, func(w http.ResponseWriter, r *http.Request, _ protocol.InvocationRequest) {
			entered <- struct{}{}
			select {
			case <-release:
			case <-r.Context().Done():
			}
			_, _ = w.Write([]byte(`{"status":"replayed","replay":{"next":{"seq":3,"kind":"step","name":"charge"}}}`))
		}))
		first := make(chan *protocol.SyncAppResponse, 1)
		go func() {
			r, err := ca.SyncAppWithResponse(context.WithoutCancel(t.Context()), &protocol.SyncAppParams{DryRun: new(true)}, protocol.AppSync{URL: slow})
			if err != nil {
				t.Error(err)
			}
			first <- r
		}()
		select {
		case <-entered:
		case <-time.After(30 * time.Second):
			t.Fatal("the first check never sent its replay")
		}

		second := syncCheck(t, cb, v1URL, protocol.SyncAppParams{DryRun: new(true)})
		require.Equal(t, http.StatusConflict, second.StatusCode(), string(second.Body))
		detail := second.ApplicationProblemJSON409.Detail
		require.Contains(t, detail, "one check at a time")
		require.Contains(t, detail, "alice")
		require.Contains(t, detail, strings.TrimSuffix(strings.TrimPrefix(slow, "http://"), "/"), "it names the app of the running check")
		require.Nil(t, second.ApplicationProblemJSON409.Check, "no check ran")
		registering := syncCheck(t, cb, v1URL, protocol.SyncAppParams{Check: new(true)})
		require.Equal(t, http.StatusConflict, registering.StatusCode(), string(registering.Body))
		plain := syncCheck(t, cb, v1URL, protocol.SyncAppParams{})
		require.Equal(t, http.StatusOK, plain.StatusCode(), "a sync without a check is no check: %s", plain.Body)

		mallory := b.Client(t, b.NewToken(t, auth.Identity{Subject: "mallory", Tenant: "t2", Roles: []string{"admin"}}))
		theirs := syncCheck(t, mallory, v1URL, protocol.SyncAppParams{DryRun: new(true)})
		require.Equal(t, http.StatusOK, theirs.StatusCode(), "another tenant's check runs beside it: %s", theirs.Body)

		close(release)
		done := <-first
		require.NotNil(t, done)
		require.Equal(t, http.StatusOK, done.StatusCode(), string(done.Body))
		require.EqualValues(t, 1, calls.Load())
		after := syncCheck(t, cb, v1URL, protocol.SyncAppParams{DryRun: new(true)})
		require.Equal(t, http.StatusOK, after.StatusCode(), "the ended check freed the slot: %s", after.Body)
	})

	t.Run("AManifestPastTheBoundIsRefused", func(t *testing.T) {
		t.Parallel()
		s := stack.Start(t, stack.Options{})
		c := s.Client(t, s.Token)
		names := make([]string, gateway.MaxCheckFunctions+1)
		for i := range names {
			names[i] = fmt.Sprintf("f%d", i)
		}
		var calls atomic.Int64
		app := s.ServeApp(t, manifestApp(names, func(http.ResponseWriter, *http.Request) { calls.Add(1) }))
		for _, params := range []protocol.SyncAppParams{{Check: new(true)}, {DryRun: new(true)}} {
			resp := syncCheck(t, c, app, params)
			require.Equal(t, http.StatusBadRequest, resp.StatusCode(), string(resp.Body))
			require.Contains(t, string(resp.Body), fmt.Sprintf("%d functions", gateway.MaxCheckFunctions+1))
			require.Contains(t, string(resp.Body), fmt.Sprintf("at most %d", gateway.MaxCheckFunctions))
		}
		fr, err := c.GetFunctionWithResponse(t.Context(), "f0")
		require.NoError(t, err)
		require.Equal(t, http.StatusNotFound, fr.StatusCode(), "nothing was registered")
		require.Zero(t, calls.Load())

		resp := syncCheck(t, c, s.ServeApp(t, manifestApp(names[:gateway.MaxCheckFunctions], nil)), protocol.SyncAppParams{DryRun: new(true)})
		require.Equal(t, http.StatusOK, resp.StatusCode(), "at the bound: %s", resp.Body)
	})

	t.Run("ADryRunKeepsNoCheckOfANameNotRegistered", func(t *testing.T) {
		t.Parallel()
		s := stack.Start(t, stack.Options{})
		c := s.Client(t, s.Token)
		app := s.ServeApp(t, manifestApp([]string{"ghost", "spectre"}, nil))
		resp := syncCheck(t, c, app, protocol.SyncAppParams{DryRun: new(true)})
		require.Equal(t, http.StatusOK, resp.StatusCode(), string(resp.Body))
		require.Len(t, resp.JSON200.Check.Functions, 2, "the answer shows the check of each")
		resp = syncCheck(t, c, app, protocol.SyncAppParams{})
		require.Equal(t, http.StatusOK, resp.StatusCode(), string(resp.Body))
		require.Nil(t, getFunction(t, c, "ghost").LastCheck, "the dry run kept no check of a name that was not registered")

		resp = syncCheck(t, c, app, protocol.SyncAppParams{Check: new(true)})
		require.Equal(t, http.StatusOK, resp.StatusCode(), string(resp.Body))
		require.NotNil(t, getFunction(t, c, "spectre").LastCheck, "a registered function's check is kept")
	})

	t.Run("AWholeCheckSendsABoundedSumOfJournalBytes", func(t *testing.T) {
		t.Parallel()
		const bound = 2000
		s := stack.Start(t, stack.Options{Gateway: func(c *gateway.Config) { c.MaxCheckBytes = bound }})
		c := s.Client(t, s.Token)
		app := s.NewApp()
		functions.Register(app, "big", func(ctx context.Context, in struct{ N int }) (string, error) {
			if _, err := step.Run(ctx, "fill", func(context.Context) (string, error) { return strings.Repeat("x", in.N), nil }); err != nil {
				return "", err
			}
			return "", step.Sleep(ctx, "wait", time.Hour)
		})
		var replays atomic.Int64
		appURL := s.ServeApp(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodPost {
				replays.Add(1)
			}
			app.ServeHTTP(w, r)
		}))
		s.Sync(t, appURL)
		// Three runs of about 820 bytes each (two fit in the bound, not three), and one
		// whose journal alone passes it.
		for _, n := range []int{800, 800, 800, 5000} {
			resp := startRun(t, c, "big", fmt.Sprintf(`{"N": %d}`, n), &protocol.StartRunParams{})
			require.Equal(t, http.StatusAccepted, resp.StatusCode(), string(resp.Body))
			stack.AwaitStatus(t, c, resp.JSON202.ID, protocol.RunStatusSuspended)
		}
		replays.Store(0)

		resp := syncCheck(t, c, appURL, protocol.SyncAppParams{DryRun: new(true)})
		require.Equal(t, http.StatusOK, resp.StatusCode(), string(resp.Body))
		fc := functionCheckOf(t, *resp.JSON200.Check, "big")
		require.False(t, resp.JSON200.Check.Ok)
		require.Equal(t, 4, fc.Live)
		require.Equal(t, 2, fc.Clean, string(resp.Body))
		require.Len(t, fc.Broken, 2, string(resp.Body))
		for _, b := range fc.Broken {
			require.NotNil(t, b.Error)
			require.Equal(t, "limit_exceeded", b.Error.Type)
			require.Contains(t, b.Error.Message, fmt.Sprintf("%d bytes", bound))
			require.Contains(t, b.Error.Message, "not replayed")
		}
		require.EqualValues(t, 2, replays.Load(), "no replay-only invocation was sent past the bound")
	})
}
