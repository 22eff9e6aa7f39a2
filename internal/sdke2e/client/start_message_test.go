package client_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/auth"
	"github.com/stepgate/stepgate/client"
	"github.com/stepgate/stepgate/functions"
	"github.com/stepgate/stepgate/functions/step"
	"github.com/stepgate/stepgate/internal/wiring/stack"
	"github.com/stepgate/stepgate/protocol"
)

// TestStartWithMessage starts runs with a message in their mailbox through the client
// (POST /v1/functions/{name}/runs/with-message), against a real gateway with two tenants.
func TestStartWithMessage(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{})
	app := s.NewApp()
	// The run takes its input, then the message of topic "approval".
	approve := functions.Register(app, "go.approve", func(ctx context.Context, in Order) (string, error) {
		m, err := step.Receive[Approval](ctx, "approval", step.Timeout(5*time.Minute)).Get()
		if err != nil {
			return "", err
		}
		if !m.Data.Approved {
			return in.Order + " refused by " + m.ID, nil
		}
		return in.Order + " approved by " + m.ID, nil
	})
	appURL := s.ServeApp(t, app)
	s.Sync(t, appURL)
	c := newClient(t, s.URL, s.Token)

	t.Run("OnceByKey", func(t *testing.T) {
		t.Parallel()
		first, err := client.StartWithMessage(t.Context(), c, approve, "go-msg-1", Order{Order: "o-1"}, "approval", Approval{Approved: true})
		require.NoError(t, err)
		require.True(t, first.Created)
		require.Equal(t, client.MessageReceipt{ID: "go-msg-1", RunID: first.ID, Topic: "approval", Consumed: first.Message.Consumed, SentAt: first.Message.SentAt}, first.Message)
		require.False(t, first.Message.SentAt.IsZero())
		// A retry answers the same run and the first message, and sends nothing again.
		again, err := client.StartWithMessage(t.Context(), c, approve, "go-msg-1", Order{Order: "o-1"}, "approval", Approval{Approved: true})
		require.NoError(t, err)
		require.Equal(t, first.ID, again.ID)
		require.False(t, again.Created)
		require.True(t, again.Message.Duplicate)
		out, err := first.Attach(t.Context(), c)
		require.NoError(t, err)
		require.Equal(t, "o-1 approved by go-msg-1", out)
		// Another message under the key of a run that finished without it: a conflict.
		_, err = client.StartWithMessage(t.Context(), c, approve, "go-msg-1", Order{Order: "o-1"}, "approval", Approval{Approved: false})
		require.ErrorIs(t, err, client.ErrConflict)
		require.ErrorContains(t, err, "start go.approve with a message: stepgate: 409")
	})

	t.Run("ARunWaitingTakesItAtOnce", func(t *testing.T) {
		t.Parallel()
		started, err := client.Start(t.Context(), c, approve, Order{Order: "o-2"}, client.IdempotencyKey("go-msg-2"))
		require.NoError(t, err)
		awaitStatus(t, c, started.ID, client.StatusSuspended)
		r, err := client.StartWithMessage(t.Context(), c, approve, "go-msg-2", Order{Order: "o-2"}, "approval", Approval{Approved: false})
		require.NoError(t, err)
		require.Equal(t, started.ID, r.ID)
		require.False(t, r.Created)
		require.True(t, r.Message.Consumed)
		out, err := r.Attach(t.Context(), c)
		require.NoError(t, err)
		require.Equal(t, "o-2 refused by go-msg-2", out)
	})

	t.Run("Refused", func(t *testing.T) {
		t.Parallel()
		// No key, or an empty Ref: refused in the client.
		_, err := client.StartWithMessage(t.Context(), c, approve, "", Order{}, "approval", nil)
		require.ErrorContains(t, err, "client: start go.approve with a message: the idempotency key is empty")
		_, err = client.StartWithMessage(t.Context(), c, client.Ref[Order, string](""), "go-msg-3", Order{}, "approval", nil)
		require.ErrorContains(t, err, "client: start with a message: the function's Ref is empty")

		// A token without events:send: a 403 naming it, and nothing stored.
		invokeOnly := newClient(t, s.URL, s.NewToken(t, auth.Identity{Subject: "ivy", Tenant: auth.DefaultTenant, Roles: []string{"runs:invoke"}}))
		_, err = client.StartWithMessage(t.Context(), invokeOnly, approve, "go-msg-3", Order{Order: "o-3"}, "approval", Approval{Approved: true})
		require.ErrorIs(t, err, client.ErrForbidden)
		require.ErrorContains(t, err, "events:send")
		runs, err := s.Client(t, s.Token).ListRunsWithResponse(t.Context(), &protocol.ListRunsParams{IdempotencyKey: new("go-msg-3")})
		require.NoError(t, err)
		require.NotNil(t, runs.JSON200, "%d %s", runs.StatusCode(), runs.Body)
		require.Empty(t, runs.JSON200.Runs, "a refused start with a message stored a run")
	})

	t.Run("SecondTenant", func(t *testing.T) {
		t.Parallel()
		first, err := client.StartWithMessage(t.Context(), c, approve, "go-msg-4", Order{Order: "o-4"}, "approval", Approval{Approved: true})
		require.NoError(t, err)
		_, err = first.Attach(t.Context(), c)
		require.NoError(t, err)

		// The second tenant has no go.approve: a 404, and the first tenant's run of the
		// key is not its.
		otherToken := s.NewToken(t, auth.Identity{Subject: "sam", Tenant: "second", Roles: []string{"admin"}})
		other := newClient(t, s.URL, otherToken)
		_, err = client.StartWithMessage(t.Context(), other, approve, "go-msg-4", Order{Order: "o-4"}, "approval", Approval{Approved: false})
		require.ErrorIs(t, err, client.ErrNotFound)
		require.ErrorContains(t, err, "go.approve")

		// Once it registers its own, the same key names a run of its own.
		resp, err := s.Client(t, otherToken).SyncAppWithResponse(t.Context(), nil, protocol.AppSync{URL: appURL})
		require.NoError(t, err)
		require.NotNil(t, resp.JSON200, "%d %s", resp.StatusCode(), resp.Body)
		mine, err := client.StartWithMessage(t.Context(), other, approve, "go-msg-4", Order{Order: "o-4"}, "approval", Approval{Approved: false})
		require.NoError(t, err)
		require.True(t, mine.Created)
		require.NotEqual(t, first.ID, mine.ID)
		out, err := mine.Attach(t.Context(), other)
		require.NoError(t, err)
		require.Equal(t, "o-4 refused by go-msg-4", out)
		// Neither sees the other's run.
		_, err = other.Get(t.Context(), first.ID)
		require.ErrorIs(t, err, client.ErrNotFound)
		_, err = c.Get(t.Context(), mine.ID)
		require.ErrorIs(t, err, client.ErrNotFound)
		require.True(t, strings.HasPrefix(mine.Message.ID, "go-msg-4"))
	})
}
