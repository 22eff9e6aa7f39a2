package gateway_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/auth"
	"github.com/stepgate/stepgate/functions/examples"
	"github.com/stepgate/stepgate/internal/wiring/stack"
	"github.com/stepgate/stepgate/protocol"
)

// waitingForAny waits until run id is suspended on a wait_any, and returns it.
func waitingForAny(t *testing.T, c *protocol.ClientWithResponses, id string) protocol.RunDetail {
	t.Helper()
	return waitingOn(t, c, id, protocol.AwaitingKindWaitAny)
}

// approvalOutcome runs the example orders.approval to its end and returns its output.
func exampleApproval(t *testing.T, c *protocol.ClientWithResponses, id string) examples.ApprovalOutput {
	t.Helper()
	res := mustResult(t, c, id)
	require.Equal(t, protocol.RunStatusCompleted, res.Status, "%+v", res.Error)
	var out examples.ApprovalOutput
	require.NoError(t, json.Unmarshal(*res.Output, &out))
	return out
}

// TestWaitAny runs the example orders.approval, which waits for a human's approval (a
// callback) or the order's payment (an event), whichever comes first, through a real
// gateway.
func TestWaitAny(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{})
	alice := auth.Identity{Subject: "alice", Tenant: "t1", Roles: []string{"developer"}}
	c := s.Client(t, s.NewToken(t, alice))
	app := s.NewApp()
	examples.Register(app)
	synced, err := c.SyncAppWithResponse(t.Context(), nil, protocol.AppSync{URL: s.ServeApp(t, app)})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, synced.StatusCode(), string(synced.Body))
	paid := func(order string) protocol.EventReceipt {
		return mustSendEvent(t, c, protocol.EventSend{Name: "orders.paid", Data: ptr(protocol.AnyJSON(fmt.Sprintf(`{"order_id":%q,"amount":5}`, order)))})
	}
	approve := func(id, note string) *protocol.ResolveRunCallbackResponse {
		resp, err := c.ResolveRunCallbackWithResponse(t.Context(), id, "approval", protocol.AnyJSON(fmt.Sprintf(`{"note":%q}`, note)))
		require.NoError(t, err)
		return resp
	}

	t.Run("ThePaymentComesFirst", func(t *testing.T) {
		t.Parallel()
		id := startAsync(t, c, "orders.approval", `{"order_id":"a-paid"}`)
		run := waitingForAny(t, c, id)
		require.Len(t, *run.Awaiting.Of, 2)
		require.Equal(t, protocol.AwaitingKindAwaitCallback, (*run.Awaiting.Of)[0].Kind)
		require.Equal(t, "orders.paid", *(*run.Awaiting.Of)[1].Event)
		require.Equal(t, []string{id}, *paid("a-paid").Resumed)
		require.Equal(t, examples.ApprovalOutput{Outcome: "paid", By: "alice"}, exampleApproval(t, c, id))
		// The approval can no longer resume it.
		require.Equal(t, http.StatusConflict, approve(id, "late").StatusCode())

		detail := getRun(t, c, id)
		last := detail.Journal[len(detail.Journal)-1]
		for _, e := range detail.Journal {
			if e.Kind == protocol.EntryKindWaitAny {
				last = e
			}
		}
		require.Equal(t, protocol.EntryKindWaitAny, last.Kind)
		var out struct {
			Index  int    `json:"index"`
			Kind   string `json:"kind"`
			Output struct {
				Event struct {
					Data map[string]any `json:"data"`
				} `json:"event"`
			} `json:"output"`
		}
		require.NoError(t, json.Unmarshal(*last.Output, &out))
		require.Equal(t, 1, out.Index)
		require.Equal(t, "wait_event", out.Kind)
		require.Equal(t, "a-paid", out.Output.Event.Data["order_id"])

		// Its progress, published as a value, and its log, streamed.
		v, err := c.GetRunValueWithResponse(t.Context(), id, "progress", nil)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, v.StatusCode(), string(v.Body))
		require.JSONEq(t, `100`, string(v.JSON200.Value))
	})

	t.Run("AHumanApprovesFirst", func(t *testing.T) {
		t.Parallel()
		id := startAsync(t, c, "orders.approval", `{"order_id":"a-ok"}`)
		waitingForAny(t, c, id)
		resp := approve(id, "looks fine")
		require.Equal(t, http.StatusOK, resp.StatusCode(), string(resp.Body))
		require.Equal(t, examples.ApprovalOutput{Outcome: "approved", By: "alice", Note: "looks fine"}, exampleApproval(t, c, id))
		require.Nil(t, paid("a-ok").Resumed, "the payment resumes nothing any more")
	})

	t.Run("AHumanRejects", func(t *testing.T) {
		t.Parallel()
		id := startAsync(t, c, "orders.approval", `{"order_id":"a-no"}`)
		waitingForAny(t, c, id)
		resp, err := c.RejectRunCallbackWithResponse(t.Context(), id, "approval", protocol.CallbackRejection{Message: "fraud"})
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode(), string(resp.Body))
		require.Equal(t, examples.ApprovalOutput{Outcome: "rejected", By: "alice", Note: "fraud"}, exampleApproval(t, c, id))
	})

	t.Run("NeitherComesInTime", func(t *testing.T) {
		t.Parallel()
		id := startAsync(t, c, "orders.approval", `{"order_id":"a-late","timeout":"1s"}`)
		require.Equal(t, examples.ApprovalOutput{Outcome: "timed_out"}, exampleApproval(t, c, id))
		require.Nil(t, paid("a-late").Resumed)
	})

	t.Run("APaymentBeforeTheWaitIsTakenAtOnce", func(t *testing.T) {
		t.Parallel()
		// The event is stored while the invocation runs, before its wait is: it counts.
		id := startAsync(t, c, "orders.approval", `{"order_id":"a-early"}`)
		require.EventuallyWithT(t, func(ct *assert.CollectT) {
			run := tryGetRun(ct, c, id)
			assert.NotEmpty(ct, run.Journal, "the invocation has started its steps")
		}, 30*time.Second, time.Millisecond)
		receipt := paid("a-early")
		out := exampleApproval(t, c, id)
		require.Equal(t, "paid", out.Outcome, "resumed by the event (%v) or found at the wait", receipt.Resumed)
	})

	t.Run("OnlyOneAlternativeWins", func(t *testing.T) {
		t.Parallel()
		// The approval and the payment race, ten times: each run ends by exactly one,
		// and the loser is refused or resumes nothing.
		wins := map[string]int{}
		defer func() { t.Logf("winners: %v", wins) }()
		for i := range 10 {
			order := fmt.Sprintf("a-race-%d", i)
			id := startAsync(t, c, "orders.approval", fmt.Sprintf(`{"order_id":%q}`, order))
			waitingForAny(t, c, id)
			var wg sync.WaitGroup
			var approved *protocol.ResolveRunCallbackResponse
			var receipt protocol.EventReceipt
			// Each goes first in turn.
			racers := []func(){func() { approved = approve(id, "race") }, func() { receipt = paid(order) }}
			wg.Go(racers[i%2])
			wg.Go(racers[1-i%2])
			wg.Wait()
			out := exampleApproval(t, c, id)
			byEvent := receipt.Resumed != nil
			byHuman := approved.StatusCode() == http.StatusOK && out.Outcome == "approved"
			wins[out.Outcome]++
			require.True(t, byEvent != byHuman, "run %d: one winner (event %v, approval %d %s, outcome %s)", i, byEvent, approved.StatusCode(), approved.Body, out.Outcome)
			entries := 0
			for _, e := range getRun(t, c, id).Journal {
				if e.Kind == protocol.EntryKindWaitAny {
					entries++
				}
			}
			require.Equal(t, 1, entries)
		}
	})
}
