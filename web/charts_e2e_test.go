package web_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/functions"
	"github.com/stepgate/stepgate/functions/step"
	"github.com/stepgate/stepgate/internal/wiring/stack"
	"github.com/stepgate/stepgate/protocol"
)

// chartSum is a JavaScript expression: the sum of the data-value of the marks sel
// matches.
func chartSum(sel string) string {
	return fmt.Sprintf(`[...document.querySelectorAll(%q)].reduce((a, e) => a + Number(e.dataset.value), 0)`, sel)
}

// chartsShowTheRuns runs a function of its own three times to completion and once to
// failure, and checks its page's charts: the runs chart's text alternative says so, its
// bars and points add up to it, in the light and the dark theme's colors; a run more
// while the page is open shows up live; the day's window says the same; and the
// functions page charts all functions.
func chartsShowTheRuns(t *testing.T, b *browser, s *stack.Stack, c *protocol.ClientWithResponses) {
	app := s.NewApp()
	functions.Register(app, "charts.work", func(ctx context.Context, in struct{ Fail bool }) (int, error) {
		if in.Fail {
			return 0, step.NonRetryable(errors.New("asked to fail"))
		}
		return 1, nil
	})
	s.Sync(t, s.ServeApp(t, app))
	for _, in := range []string{`{}`, `{}`, `{}`, `{"Fail":true}`} {
		want := protocol.RunStatusCompleted
		if in != `{}` {
			want = protocol.RunStatusFailed
		}
		stack.AwaitStatus(t, c, start(t, c, "charts.work", in, nil), want)
	}

	runs := `[data-testid=charts][data-window="1h"] [data-testid=chart-runs] svg`
	b.do("open the function's page", 10*time.Second, chromedp.Navigate(s.URL+"/#token="+s.Token+"&next=/functions/charts.work"))
	b.visible("its charts", runs)
	label := run(b, "the runs chart's text", chromedp.Evaluate[string](`document.querySelector('`+runs+`').getAttribute("aria-label")`))
	require.Contains(t, label, "Runs per minute over the last hour: 4 started, 3 completed, 1 failed;")
	require.Equal(t, label, run(b, "its title", chromedp.Evaluate[string](`document.querySelector('`+runs+` > title').textContent`)))
	for sel, want := range map[string]int{
		runs + " circle.s-started": 4, runs + " rect.s-completed": 3, runs + " rect.s-failed": 1,
	} {
		require.Equal(t, want, run(b, sel, chromedp.Evaluate[int](chartSum(sel))), sel)
	}
	points := run(b, "the duration's points", chromedp.Evaluate[int](`document.querySelectorAll("[data-testid=chart-duration] circle.s-p50").length`))
	require.Positive(t, points, "the runs that finished have a duration")
	queue := run(b, "the queue now", chromedp.Evaluate[string](`document.querySelector("[data-testid=chart-queue] svg").getAttribute("aria-label")`))
	require.Contains(t, queue, ": 0 waiting now")

	// Each theme draws with its own colors: --green is #16a34a in the light one, #3ecf7a
	// in the dark one.
	for theme, want := range map[string]string{"light": "rgb(22, 163, 74)", "dark": "rgb(62, 207, 122)"} {
		fill := run(b, "a bar in the "+theme+" theme", chromedp.Evaluate[string](fmt.Sprintf(
			`(document.documentElement.dataset.theme = %q, getComputedStyle(document.querySelector('%s rect.s-completed')).fill)`, theme, runs)))
		require.Equal(t, want, fill, theme)
	}
	run(b, "back to the system's theme", chromedp.Evaluate[bool](`(delete document.documentElement.dataset.theme, true)`))
	b.shoot("function-charts")

	// A run more while the page is open: the live stream brings it.
	stack.AwaitStatus(t, c, start(t, c, "charts.work", `{}`, nil), protocol.RunStatusCompleted)
	b.poll("the new run, live", `(document.querySelector('`+runs+`')?.getAttribute("aria-label") || "").includes(": 5 started, 4 completed, 1 failed;")`)

	b.click("the last day", `[data-testid=charts-panel] button[data-window="1d"]`)
	day := `[data-testid=charts][data-window="1d"] [data-testid=chart-runs] svg`
	b.visible("the day's charts", day)
	label = run(b, "the day's runs", chromedp.Evaluate[string](`document.querySelector('`+day+`').getAttribute("aria-label")`))
	require.Contains(t, label, "Runs per 15 minutes over the last day: 5 started, 4 completed, 1 failed;")
	require.Equal(t, 5, run(b, "the day's started points", chromedp.Evaluate[int](chartSum(day+" circle.s-started"))))
	b.click("the last hour again", `[data-testid=charts-panel] button[data-window="1h"]`)
	b.visible("the hour's charts", runs)

	// The functions page charts every function of the tenant: other tests' runs too, so
	// at least these, and its marks add up to its words.
	b.do("open the functions page", 10*time.Second, chromedp.Navigate(s.URL+"/#/functions"))
	all := `[data-testid=charts-panel] ` + runs
	b.visible("the charts of all functions", all)
	// One read of one chart: a live update may draw another between two reads.
	got := run(b, "their runs chart", chromedp.Evaluate[struct {
		Label              string
		Started, Completed int
	}](fmt.Sprintf(`(() => {
		const svg = document.querySelector('%s');
		const sum = (sel) => [...svg.querySelectorAll(sel)].reduce((a, e) => a + Number(e.dataset.value), 0);
		return { Label: svg.getAttribute("aria-label"), Started: sum("circle.s-started"), Completed: sum("rect.s-completed") };
	})()`, all)))
	var started, completed, failed int
	_, err := fmt.Sscanf(got.Label, "Runs per minute over the last hour: %d started, %d completed, %d failed", &started, &completed, &failed)
	require.NoError(t, err, got.Label)
	require.GreaterOrEqual(t, started, 5)
	require.GreaterOrEqual(t, completed, 4)
	require.GreaterOrEqual(t, failed, 1)
	require.Equal(t, started, got.Started, "their started points")
	require.Equal(t, completed, got.Completed, "their completed bars")
	b.shoot("functions-charts")
}
