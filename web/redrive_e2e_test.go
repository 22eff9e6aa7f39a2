package web_test

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/auth"
	"github.com/stepgate/stepgate/functions"
	"github.com/stepgate/stepgate/functions/step"
	"github.com/stepgate/stepgate/internal/wiring/stack"
	"github.com/stepgate/stepgate/protocol"
)

// failureRow is the Failures page's row of function's group.
func failureRow(function string) string {
	return fmt.Sprintf(`tr[data-testid=failure-group]:has(.fn-name[data-fn=%q])`, function)
}

// TestDashboardRedriveAndFailures drives the Failures page and the runs page's Redrive
// action in headless Chromium against a real gateway: failed runs grouped by function
// and error, Inspect to the runs page filtered to a group, Redrive of that filter from
// the failing step with the operation's progress, Dismiss until the group fails again,
// and Redrive from a group.
func TestDashboardRedriveAndFailures(t *testing.T) {
	t.Parallel()
	exe := chromium()
	if exe == "" {
		t.Skip("chromium is not installed (apt-get install -y chromium); set STEPGATE_CHROMIUM to use another")
	}
	s := stack.Start(t, stack.Options{})
	token := s.NewToken(t, auth.Identity{Subject: "tester", Tenant: "t1", Roles: []string{"developer"}})
	c := s.Client(t, token)
	var healed atomic.Bool
	var ones atomic.Int64
	type order struct {
		N int `json:"n"`
	}
	app := s.NewApp()
	functions.Register(app, "dl.orders", func(ctx context.Context, in order) (string, error) {
		if _, err := step.Run(ctx, "one", func(context.Context) (int, error) { ones.Add(1); return 1, nil }); err != nil {
			return "", err
		}
		return step.Run(ctx, "two", func(context.Context) (string, error) {
			if !healed.Load() {
				return "", step.NonRetryable(fmt.Errorf("order %d not found", in.N))
			}
			return "shipped", nil
		})
	})
	functions.Register(app, "dl.other", func(ctx context.Context, _ struct{}) (string, error) {
		return "", step.NonRetryable(fmt.Errorf("boom at 0xdeadbeef"))
	})
	synced, err := c.SyncAppWithResponse(t.Context(), nil, protocol.AppSync{URL: s.ServeApp(t, app)})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, synced.StatusCode(), string(synced.Body))
	var failed []string
	for n := 1; n <= 3; n++ {
		failed = append(failed, start(t, c, "dl.orders", fmt.Sprintf(`{"n":%d}`, n), nil))
	}
	other := start(t, c, "dl.other", `{}`, nil)
	for _, id := range append(failed, other) {
		stack.AwaitStatus(t, c, id, protocol.RunStatusFailed)
	}
	require.EqualValues(t, 3, ones.Load())

	b := newBrowser(t, exe)
	b.use(t)
	b.do("sign in", 20*time.Second, chromedp.Navigate(s.URL+"/#token="+token), chromedp.WaitVisible(chromedp.CSS("[data-testid=who]")))

	t.Run("GroupsByFunctionAndError", func(t *testing.T) {
		b.use(t)
		b.click("the Failures nav entry", "[data-testid=nav-failures]")
		b.visible("the orders group", failureRow("dl.orders"))
		require.Equal(t, "3", b.text("its count", failureRow("dl.orders")+" [data-testid=failure-count]"))
		require.Equal(t, "order <num> not found", b.text("its message shape", failureRow("dl.orders")+" [data-testid=failure-message]"))
		require.Equal(t, "boom at <hex>", b.text("the other group", failureRow("dl.other")+" [data-testid=failure-message]"))
		b.shoot("failures")
	})

	t.Run("InspectThenRedriveTheFilter", func(t *testing.T) {
		b.use(t)
		b.click("inspect the orders group", failureRow("dl.orders")+" [data-testid=failure-inspect]")
		b.visible("the group's filter", "[data-testid=filter-group]")
		for _, id := range failed {
			b.visible("a failed order", rowStatus(id, "failed"))
		}
		rows := run(b, "only the group's runs", chromedp.Evaluate[int](`document.querySelectorAll("tr[data-run]").length`))
		require.Equal(t, 3, rows)

		healed.Store(true)
		b.click("redrive", "[data-testid=redrive-matching]")
		require.Contains(t, b.text("the count", "dialog[open] [data-testid=redrive-count]"), "3 runs match")
		require.Equal(t, "failure", run(b, "from the failing step", chromedp.Evaluate[string](`document.querySelector("dialog[open] [data-testid=redrive-from]").value`)))
		t.Logf("screenshot: %s", b.screenshot("runs-redrive-dialog"))
		b.click("confirm", "dialog[open] [data-testid=confirm]")
		b.visible("the operation completes", `dialog[open] [data-testid=operation-text][data-status=completed]`)
		require.Contains(t, b.text("its count", "dialog[open] [data-testid=operation-text]"), "3 runs rerun")
		t.Logf("screenshot: %s", b.screenshot("runs-redrive-done"))
		b.click("close the progress", `dialog[open] [aria-label=Close]`)
		for _, id := range failed {
			old := getRun(t, c, id)
			require.NotNil(t, old.RerunBy, "run %s names its redrive", id)
			require.Len(t, *old.RerunBy, 1)
			stack.AwaitStatus(t, c, (*old.RerunBy)[0], protocol.RunStatusCompleted)
		}
		require.EqualValues(t, 3, ones.Load(), "the redriven runs replayed step one")
	})

	var ninth string // the orders' run that fails after their redrive
	t.Run("DismissUntilItFailsAgain", func(t *testing.T) {
		b.use(t)
		b.do("open the failures", 10*time.Second, chromedp.Navigate(s.URL+"/#/failures"))
		b.click("dismiss the orders group", failureRow("dl.orders")+" [data-testid=failure-dismiss]")
		b.click("confirm", "dialog[open] [data-testid=confirm]")
		b.poll("the group is hidden", fmt.Sprintf(`!document.querySelector(%q) && !!document.querySelector(%q)`, failureRow("dl.orders"), failureRow("dl.other")))

		healed.Store(false)
		ninth = start(t, c, "dl.orders", `{"n":9}`, nil)
		stack.AwaitStatus(t, c, ninth, protocol.RunStatusFailed)
		b.click("reload", ".page-actions .btn")
		b.visible("the group is back", failureRow("dl.orders"))
		require.Equal(t, "4", b.text("with the new failure", failureRow("dl.orders")+" [data-testid=failure-count]"))
	})

	t.Run("RedriveAGroup", func(t *testing.T) {
		b.use(t)
		b.click("redrive the other group", failureRow("dl.other")+" [data-testid=failure-redrive]")
		b.click("confirm", "dialog[open] [data-testid=confirm]")
		b.visible("the operation completes", `dialog[open] [data-testid=operation-text][data-status=completed]`)
		require.Contains(t, b.text("its count", "dialog[open] [data-testid=operation-text]"), "1 run rerun")
		b.click("close the progress", `dialog[open] [aria-label=Close]`)
		old := getRun(t, c, other)
		require.NotNil(t, old.RerunBy)
		stack.AwaitStatus(t, c, (*old.RerunBy)[0], protocol.RunStatusFailed)
		b.click("reload", ".page-actions .btn")
		b.poll("the group counts its new failure", fmt.Sprintf(`document.querySelector(%q)?.textContent === "2"`, failureRow("dl.other")+" [data-testid=failure-count]"))
	})

	t.Run("RedrivenRunsAndHideRedriven", func(t *testing.T) {
		b.use(t)
		orders, others := failureRow("dl.orders"), failureRow("dl.other")
		// The orders group: its first 3 runs were redriven and their reruns completed, the
		// 4th was not; the other group's run was redriven and its rerun failed.
		b.poll("the redriven counts", fmt.Sprintf(`document.querySelector(%q)?.dataset.redriven === "3" && document.querySelector(%q)?.dataset.redriven === "1"`,
			orders+" [data-testid=failure-redriven]", others+" [data-testid=failure-redriven]"))
		require.Equal(t, "3 completed", b.text("the orders' redrives that completed", orders+" [data-testid=failure-redriven] .sub"))
		require.Equal(t, "0 completed", b.text("the other's", others+" [data-testid=failure-redriven] .sub"))
		require.Zero(t, run(b, "no group is closed", chromedp.Evaluate[int](`document.querySelectorAll("[data-testid=failure-closed]").length`)))

		// The 4th run rerun too, successfully: every run of the group was, and Hide
		// redriven closes it.
		healed.Store(true)
		rerun, err := c.RerunRunWithResponse(t.Context(), ninth, protocol.RerunRunJSONRequestBody{})
		require.NoError(t, err)
		require.Equal(t, http.StatusAccepted, rerun.StatusCode(), string(rerun.Body))
		stack.AwaitStatus(t, c, rerun.JSON202.ID, protocol.RunStatusCompleted)
		b.click("reload", ".page-actions .btn")
		b.visible("the orders group says so", orders+" [data-testid=failure-closed]")
		require.Equal(t, "4 completed", b.text("all four", orders+" [data-testid=failure-redriven] .sub"))
		b.click("hide redriven", "[data-testid=failures-hide-redriven]")
		b.poll("the orders group is closed", fmt.Sprintf(`!document.querySelector(%q) && !!document.querySelector(%q)`, orders, others))
		require.Contains(t, run(b, "the URL keeps the choice", chromedp.Evaluate[string](`location.hash`)), "hide=1")
		b.shoot("failures-hide-redriven")
		b.click("show them again", "[data-testid=failures-hide-redriven]")
		b.visible("the orders group is back", orders)
	})

	t.Run("AViewerSeesNoActions", func(t *testing.T) {
		b.use(t)
		viewer := s.NewToken(t, auth.Identity{Subject: "vic", Tenant: "t1", Roles: []string{"viewer"}})
		b.click("sign out", "[data-testid=sign-out]")
		b.do("sign in as a viewer", 20*time.Second, chromedp.Navigate(s.URL+"/#token="+viewer), chromedp.WaitVisible(chromedp.CSS("[data-testid=who]")))
		b.do("open the failures", 10*time.Second, chromedp.Navigate(s.URL+"/#/failures"))
		b.visible("the groups", failureRow("dl.other"))
		n := run(b, "no redrive nor dismiss", chromedp.Evaluate[int](`document.querySelectorAll("[data-testid=failure-redrive], [data-testid=failure-dismiss]").length`))
		require.Zero(t, n)
	})
	require.Empty(t, b.pageExceptions())
}
