package web_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/functions"
	"github.com/stepgate/stepgate/functions/step"
	"github.com/stepgate/stepgate/internal/wiring/stack"
	"github.com/stepgate/stepgate/protocol"
)

// xssStep is a step name shaped as markup: names come from a function's code, whose
// author the dashboard does not trust, so it must show it as text.
const xssStep = `<img src=x onerror="window.__stepgateXSS=1">`

// twoStepApp serves the function "reorder": a step named first, an hour's sleep, and a
// step named second.
func twoStepApp(t *testing.T, s *stack.Stack, first, second string) string {
	app := s.NewApp()
	functions.Register(app, "reorder", func(ctx context.Context, _ struct{}) (string, error) {
		a, err := step.Run(ctx, first, func(context.Context) (string, error) { return "one", nil })
		if err != nil {
			return "", err
		}
		if err := step.Sleep(ctx, "nap", time.Hour); err != nil {
			return "", err
		}
		b, err := step.Run(ctx, second, func(context.Context) (string, error) { return "two", nil })
		return a + b, err
	})
	return s.ServeApp(t, app)
}

// functionShowsItsLastCheck syncs new code whose steps are reordered, with a check, while
// a run sleeps between the old code's steps: the gateway refuses it (409), and the
// function's page shows that check: refused, its counts, and the broken run, linked,
// with where it diverges, its markup-shaped step name as text.
func functionShowsItsLastCheck(t *testing.T, b *browser, s *stack.Stack, c *protocol.ClientWithResponses) {
	s.Sync(t, twoStepApp(t, s, xssStep, "b"))
	id := start(t, c, "reorder", `{}`, nil)
	stack.AwaitStatus(t, c, id, protocol.RunStatusSuspended)

	resp, err := c.SyncAppWithResponse(t.Context(), &protocol.SyncAppParams{Check: new(true)}, protocol.AppSync{URL: twoStepApp(t, s, "b", xssStep)})
	require.NoError(t, err)
	require.Equal(t, http.StatusConflict, resp.StatusCode(), string(resp.Body))
	refused := resp.ApplicationProblemJSON409.Check
	require.False(t, refused.Registered)
	require.Len(t, refused.Functions, 1)
	require.Len(t, refused.Functions[0].Broken, 1)
	require.Equal(t, id, refused.Functions[0].Broken[0].RunID)
	d := refused.Functions[0].Broken[0].Divergence
	require.NotNil(t, d, "the reordered steps diverge: %s", resp.Body)
	// Nothing was registered: the check is the function's current revision's.
	require.NotNil(t, refused.Functions[0].Revision, "the check's revision: %s", resp.Body)
	require.Equal(t, 1, *refused.Functions[0].Revision)
	checkedURL := *refused.Functions[0].URL

	// A sign-in link that goes to the function's page: it works alone, and after the
	// other subtests (signed in as the same identity).
	b.do("open the function's page", 10*time.Second, chromedp.Navigate(s.URL+"/#token="+s.Token+"&next=/functions/reorder"))
	b.visible("its last check, refused", `[data-testid=last-check][data-verdict=refused]`)
	require.Contains(t, b.text("the verdict", "[data-testid=check-verdict]"), "not registered")
	require.Contains(t, b.text("the verdict", "[data-testid=check-verdict]"), "refused")
	require.Contains(t, b.text("when and by whom", "[data-testid=check-when]"), "by tester")
	for count, want := range map[string]string{"live": "1", "checked": "1", "clean": "0", "broken": "1"} {
		require.Equal(t, want, b.text("the "+count+" count", "[data-testid=check-"+count+"]"), count)
	}
	link := fmt.Sprintf(`[data-testid=check-broken] tr[data-run=%q] a[data-testid=broken-run][href="#/runs/%s"]`, id, id)
	b.visible("the broken run, linked", link)
	why := b.text("where it diverges", fmt.Sprintf(`[data-testid=check-broken] tr[data-run=%q] [data-testid=broken-why]`, id))
	require.Contains(t, why, fmt.Sprintf(`at seq %d the journal holds %s "%s", the new code asks for %s "b"`, d.Seq, d.Journal.Kind, xssStep, d.Asked.Kind))
	injected := run(b, "no markup from the step name", chromedp.Evaluate[bool](`!!document.querySelector("[data-testid=last-check] img") || window.__stepgateXSS !== undefined`))
	require.False(t, injected, "a step name was rendered as markup")
	stale := run(b, "no word of another revision", chromedp.Evaluate[bool](`!!document.querySelector("[data-testid=check-stale]")`))
	require.False(t, stale, "the check of the current revision is said to be of another")
	b.shoot("function-last-check")

	b.click("open the broken run", link)
	b.visible("its page", runStatus("suspended"))
	require.Equal(t, id, b.text("its id", "[data-testid=run-id]"))

	// A revision registered since without a check (revision 2, at another URL): the page
	// says which revision and URL the last check was made for.
	current := twoStepApp(t, s, xssStep, "c")
	s.Sync(t, current)
	b.do("open the function's page again", 10*time.Second, chromedp.Navigate(s.URL+"/#/functions/reorder"))
	b.visible("the check of another revision", `[data-testid=last-check] [data-testid=check-stale]`)
	require.Equal(t, "v2", b.text("the current revision", "[data-testid=function-revision]"))
	require.Equal(t, "revision 1", b.text("the check's revision", "[data-testid=check-stale-revision]"))
	require.Equal(t, fmt.Sprintf("Checked against revision 1 (%s), not the current revision 2 (%sreorder): it says nothing of the current code.", checkedURL, current),
		strings.TrimSpace(b.text("what it says", "[data-testid=check-stale]")))
}
