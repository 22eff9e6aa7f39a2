package web_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/auth"
	"github.com/stepgate/stepgate/functions"
	"github.com/stepgate/stepgate/functions/step"
	"github.com/stepgate/stepgate/internal/wiring/stack"
	"github.com/stepgate/stepgate/protocol"
)

// chromium returns the browser to drive: $STEPGATE_CHROMIUM, else Debian's chromium.
func chromium() string {
	if p := os.Getenv("STEPGATE_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"/usr/bin/chromium", "chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// artifacts returns the folder screenshots go to: $STEPGATE_ARTIFACTS, else
// test-artifacts at the repository's root.
func artifacts(t *testing.T) string {
	dir := os.Getenv("STEPGATE_ARTIFACTS")
	if dir == "" {
		_, file, _, _ := runtime.Caller(0)
		dir = filepath.Join(filepath.Dir(file), "..", "test-artifacts")
	}
	dir, err := filepath.Abs(dir)
	require.NoError(t, err)
	require.NoError(t, os.MkdirAll(dir, 0o755))
	return dir
}

// browser is one headless Chromium tab on the dashboard.
type browser struct {
	t   *testing.T
	ctx context.Context
	dir string

	mu         sync.Mutex
	exceptions []string // uncaught in the page
}

func newBrowser(t *testing.T, exe string) *browser {
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(exe),
		chromedp.Headless,
		chromedp.NoSandbox, // the tests may run as root
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("hide-scrollbars", true),
		chromedp.Flag("mute-audio", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1440, 900),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	b := &browser{t: t, ctx: ctx, dir: artifacts(t)}
	// The first call starts the browser, and must have no deadline: it would end the browser.
	if err := chromedp.Do(ctx); err != nil {
		cancel()
		cancelAlloc()
		t.Fatalf("start %s: %v", exe, err)
	}
	var wg sync.WaitGroup
	console := chromedp.Console(ctx)
	wg.Go(func() {
		for m, err := range console {
			if err != nil {
				return
			}
			switch {
			case m.IsException():
				b.mu.Lock()
				b.exceptions = append(b.exceptions, m.Text)
				b.mu.Unlock()
				b.log("browser exception: %s (%s:%d)", m.Text, m.URL, m.Line)
			case m.Type == chromedp.ConsoleError || m.Type == chromedp.ConsoleWarning:
				b.log("browser %s: %s %s", m.Type, m.Text, m.URL)
			}
		}
	})
	t.Cleanup(func() {
		cancel()
		cancelAlloc()
		wg.Wait()
	})
	// 2x pixels make crisp screenshots.
	b.do("set the viewport", 10*time.Second, chromedp.EmulateViewport(1440, 900, chromedp.EmulateScale(2)))
	return b
}

func (b *browser) log(format string, args ...any) {
	b.mu.Lock()
	t := b.t
	b.mu.Unlock()
	t.Logf(format, args...)
}

// use points the browser's failures and logs at the (sub)test t.
func (b *browser) use(t *testing.T) {
	b.mu.Lock()
	b.t = t
	b.mu.Unlock()
}

// do runs steps within timeout, and fails the test with a screenshot of the page when
// they fail: every wait is on a DOM condition with a deadline, never a sleep.
func (b *browser) do(what string, timeout time.Duration, steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, timeout)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		b.fail(what, err)
	}
}

func (b *browser) fail(what string, err error) {
	b.t.Helper()
	shot := b.screenshot("failed-" + strings.NewReplacer(" ", "-", "/", "-", "'", "").Replace(what))
	b.t.Fatalf("%s: %v (the page: %s)", what, err, shot)
}

// run runs one action that returns a value, within 10s.
func run[T any](b *browser, what string, a chromedp.Action[T]) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		b.fail(what, err)
	}
	return v
}

// screenshot saves the whole page as name.png among the artifacts and returns its path.
func (b *browser) screenshot(name string) string {
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		return "no screenshot: " + err.Error()
	}
	p := filepath.Join(b.dir, name+".png")
	if err := os.WriteFile(p, png, 0o644); err != nil {
		return "no screenshot: " + err.Error()
	}
	return p
}

// colorScheme emulates the system's light or dark preference. It also asks for reduced
// motion, which the dashboard honors: a headless tab that is not painting may hold CSS
// transitions and animations at their first frame, and screenshots must show the end.
func colorScheme(scheme string) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		_, err := cdp.Call(ctx, t, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{
			Features: []*emulation.MediaFeature{
				{Name: "prefers-color-scheme", Value: scheme},
				{Name: "prefers-reduced-motion", Value: "reduce"},
			},
		})
		return err
	})
}

// shoot saves screenshots of the page in the light and the dark theme.
func (b *browser) shoot(name string) {
	b.t.Helper()
	b.do("move the mouse away", 5*time.Second, chromedp.MouseEvent(chromedp.MouseMoved, 1, 899)) // no hover effects
	for _, scheme := range []string{"dark", "light"} {
		b.do("use the "+scheme+" theme", 5*time.Second, colorScheme(scheme))
		b.t.Logf("screenshot: %s", b.screenshot(name+"-"+scheme))
	}
}

// visible waits for sel to be visible.
func (b *browser) visible(what, sel string) {
	b.t.Helper()
	b.do(what, 20*time.Second, chromedp.WaitVisible(chromedp.CSS(sel)))
}

// click clicks sel once it is visible.
func (b *browser) click(what, sel string) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	for {
		err := chromedp.Do(ctx, chromedp.WaitVisible(chromedp.CSS(sel)), chromedp.Click(chromedp.CSS(sel)))
		// A live update may replace the node between finding it and clicking it: find
		// it again.
		if err != nil && strings.Contains(err.Error(), "Could not find node") && ctx.Err() == nil {
			continue
		}
		if err != nil {
			b.fail(what, err)
		}
		return
	}
}

// text returns sel's text once it is visible.
func (b *browser) text(what, sel string) string {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 20*time.Second)
	defer cancel()
	for {
		var text string
		err := chromedp.Do(ctx, chromedp.WaitVisible(chromedp.CSS(sel)), chromedp.Func(func(ctx context.Context, t *chromedp.Target) (err error) {
			text, err = chromedp.Text(chromedp.CSS(sel))(ctx, t)
			return err
		}))
		// A live update may replace the node between finding it and reading it: find
		// it again.
		if err != nil && (strings.Contains(err.Error(), "No node with given id") || strings.Contains(err.Error(), "Could not find node")) && ctx.Err() == nil {
			continue
		}
		if err != nil {
			b.fail(what, err)
		}
		return text
	}
}

// poll waits until the JavaScript expression is truthy.
func (b *browser) poll(what, expr string) {
	b.t.Helper()
	b.do(what, 20*time.Second, chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		_, err := chromedp.Poll[bool](expr, chromedp.WithPollingTimeout(20*time.Second))(ctx, t)
		return err
	}))
}

// set sets the value of the form control sel and fires event on it, as typing or
// choosing would.
func (b *browser) set(what, sel, value, event string) {
	b.t.Helper()
	b.do(what, 10*time.Second,
		chromedp.WaitVisible(chromedp.CSS(sel)),
		chromedp.SetValue(chromedp.CSS(sel), value),
		chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
			_, err := chromedp.Evaluate[bool](fmt.Sprintf(`document.querySelector(%q).dispatchEvent(new Event(%q, {bubbles: true}))`, sel, event))(ctx, t)
			return err
		}))
}

func (b *browser) pageExceptions() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.exceptions...)
}

// start starts a run of name without waiting and returns its id.
func start(t *testing.T, c *protocol.ClientWithResponses, name, input string, params *protocol.StartRunParams) string {
	t.Helper()
	if params == nil {
		params = &protocol.StartRunParams{}
	}
	resp, err := c.StartRunWithBodyWithResponse(t.Context(), name, params, "application/json", strings.NewReader(input))
	require.NoError(t, err)
	res := resp.JSON202
	if res == nil {
		res = resp.JSON200
	}
	require.NotNil(t, res, "start %s: HTTP %d: %s", name, resp.StatusCode(), resp.Body)
	return res.ID
}

func getRun(t *testing.T, c *protocol.ClientWithResponses, id string) protocol.RunDetail {
	t.Helper()
	resp, err := c.GetRunWithResponse(t.Context(), id, nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode(), string(resp.Body))
	return *resp.JSON200
}

func row(id string) string { return fmt.Sprintf(`tr[data-run=%q]`, id) }

func rowStatus(id, status string) string {
	return fmt.Sprintf(`tr[data-run=%q][data-status=%q]`, id, status)
}

func runStatus(status string) string {
	return fmt.Sprintf(`[data-testid=run-status] [data-status=%q]`, status)
}

// TestDashboard drives the dashboard in headless Chromium against a real gateway and
// Postgres, the way a person would: it signs in, watches runs arrive and finish live,
// reads a run's steps, cancels and reruns runs through the confirm dialog, and checks
// that another tenant sees none of it. Screenshots go to test-artifacts/.
func TestDashboard(t *testing.T) {
	t.Parallel()
	exe := chromium()
	if exe == "" {
		t.Skip("chromium is not installed (apt-get install -y chromium); set STEPGATE_CHROMIUM to use another")
	}
	s := stack.Start(t, stack.Options{})
	s.SyncExamples(t)
	c := s.Client(t, s.Token)
	b := newBrowser(t, exe)

	var checkout string
	runs := map[string]string{}

	t.Run("SignIn", func(t *testing.T) {
		b.use(t)
		b.do("open the dashboard", 20*time.Second, chromedp.Navigate(s.URL+"/"), chromedp.WaitVisible(chromedp.CSS("#token")))
		leaked := run(b, "nothing shows without a token", chromedp.Evaluate[bool](`!!document.querySelector("[data-testid=runs-table], [data-testid=who]")`))
		require.False(t, leaked, "the dashboard showed data before sign-in")
		t.Logf("screenshot: %s", b.screenshot("signin"))

		b.do("reject a bad token", 10*time.Second,
			chromedp.SetValue(chromedp.CSS("#token"), "not.a-valid.token"),
			chromedp.Click(chromedp.CSS("[data-testid=sign-in]")),
			chromedp.WaitVisible(chromedp.CSS(".form-error")))
		b.do("sign in", 10*time.Second,
			chromedp.SetValue(chromedp.CSS("#token"), s.Token),
			chromedp.Click(chromedp.CSS("[data-testid=sign-in]")),
			chromedp.WaitVisible(chromedp.CSS("[data-testid=who]")))
		require.Contains(t, b.text("who", "[data-testid=who]"), "tester")
		// The same sign-in opens River's UI, through the session cookie.
		b.visible("the River UI link, once the session is set", `[data-testid=river][data-session=ok]`)
		status := run(b, "open River UI", chromedp.Evaluate[int](`fetch("/river/").then((r) => r.status)`, chromedp.EvalAwaitPromise))
		require.Equal(t, http.StatusOK, status)
		b.visible("the empty runs list says what to do", "[data-testid=empty-runs]")
		t.Logf("screenshot: %s", b.screenshot("runs-empty"))
		// The theme toggle goes from the system's to light, dark, and back.
		for _, want := range []string{"light", "dark", ""} {
			b.click("toggle the theme", "[data-testid=theme]")
			got := run(b, "the theme", chromedp.Evaluate[string](`document.documentElement.dataset.theme || ""`))
			require.Equal(t, want, got)
		}
		// A marker that a reload would wipe: the list must update without one.
		run(b, "mark the page", chromedp.Evaluate[bool](`window.__stepgateNoReload = true`))
	})

	t.Run("RunAppearsAndCompletesLive", func(t *testing.T) {
		b.use(t)
		checkout = start(t, c, "orders.checkout", `{"order_id":"o-1001","amount":4200}`, nil)
		// Some company for the screenshot, and the runs the next scenarios act on.
		runs["hello"] = start(t, c, "hello", `{"name":"Ada"}`, nil)
		runs["chain"] = start(t, c, "chain", `{"steps":12}`, nil)
		runs["failed"] = start(t, c, "flaky", `{"fail_times":5}`, nil)
		runs["retried"] = start(t, c, "flaky", `{"fail_times":1}`, nil)
		runs["napped"] = start(t, c, "orders.checkout", `{"order_id":"o-1002","amount":1999,"sleep_ms":1200}`, &protocol.StartRunParams{IdempotencyKey: new("order-o-1002")})
		runs["sleeping"] = start(t, c, "orders.checkout", `{"order_id":"o-1003","amount":990,"sleep_ms":30000}`, nil)
		b.visible("the new run appears", row(checkout))
		b.visible("the run completes", rowStatus(checkout, "completed"))
		same := run(b, "no reload", chromedp.Evaluate[bool](`window.__stepgateNoReload === true`))
		require.True(t, same, "the page reloaded")
		for name, status := range map[string]string{
			"hello": "completed", "chain": "completed", "failed": "failed", "retried": "completed",
			"napped": "completed", "sleeping": "suspended",
		} {
			b.visible(name+" reaches "+status, rowStatus(runs[name], status))
		}
		// A clean run with a sleep: two invocations, none failed.
		require.Equal(t, "2", b.text("the napping run's invocations", row(runs["napped"])+" [data-testid=invocations]"))
		b.shoot("runs")
	})

	t.Run("RunShowsEachStepsOutput", func(t *testing.T) {
		b.use(t)
		b.click("open the run", row(checkout)+" a")
		b.visible("the timeline", "[data-testid=timeline]")
		for step, want := range map[string]string{
			"reserve": `"reserved": true`,
			"charge":  `"charge_id": "ch_o-1001"`,
			"ship":    `"tracking": "trk_o-1001"`,
		} {
			sel := fmt.Sprintf(`details[data-testid="step-%s"]`, step)
			b.click("open step "+step, sel+" > summary")
			out := b.text("read step "+step, sel+" [data-testid=step-output] .json")
			require.Contains(t, out, want, "step %s", step)
		}
		require.Contains(t, b.text("run output", "[data-testid=run-output] .json"), `"trk_o-1001"`)
		require.Contains(t, b.text("identity", "[data-testid=identity]"), "tester")

		// The screenshot: a run with a sleep, a step opened.
		b.do("open the napping run", 10*time.Second, chromedp.Navigate(s.URL+"/#/runs/"+runs["napped"]))
		b.visible("its timeline", `details[data-testid="step-cool-off"]`)
		b.click("open its charge step", `details[data-testid="step-charge"] > summary`)
		b.visible("its output", `details[data-testid="step-charge"] [data-testid=step-output]`)
		b.shoot("run")

		rows := `[...document.querySelectorAll("[data-testid=timeline] details.wf-item")]`
		b.click("expand all", "[data-testid=timeline] .panel-tools button:first-child")
		b.poll("every row open", rows+`.every((d) => d.open)`)
		b.click("collapse all", "[data-testid=timeline] .panel-tools button:last-child")
		b.poll("every row closed", rows+`.every((d) => !d.open)`)
	})

	t.Run("CancelSleepingRun", func(t *testing.T) {
		b.use(t)
		id := runs["sleeping"]
		// As if two gateways had died while invoking it before it fell asleep (which
		// reset the count in a row, not the run's lifetime recoveries).
		_, err := s.Pool.Exec(t.Context(), `UPDATE stepgate.run SET lifetime_recoveries = 2 WHERE id = $1`, id)
		require.NoError(t, err)
		b.do("open the sleeping run", 10*time.Second, chromedp.Navigate(s.URL+"/#/runs/"+id))
		b.visible("it is suspended", runStatus("suspended"))
		require.Equal(t, "2", b.text("its recoveries", "[data-testid=recoveries]"))
		require.Equal(t, "1", b.text("its invocations", "[data-testid=invocations]"))
		require.Equal(t, "0", b.text("its failed invocations", "[data-testid=failed-invocations]"))
		require.Contains(t, b.text("what it waits on", "[data-testid=waiting]"), "cool-off")
		t.Logf("screenshot: %s", b.screenshot("run-sleeping"))
		b.click("open a step", `details[data-testid="step-charge"] > summary`)
		b.click("cancel", "[data-testid=cancel-run]")
		b.visible("the confirm dialog", "dialog[open] [data-testid=confirm]")
		t.Logf("screenshot: %s", b.screenshot("run-cancel-dialog"))
		b.click("confirm", "dialog[open] [data-testid=confirm]")
		b.visible("it shows cancelled", runStatus("cancelled"))
		require.Equal(t, protocol.RunStatusCancelled, getRun(t, c, id).Status)
		require.Contains(t, b.text("who cancelled", "[data-testid=cancelled-by]"), "tester")
		b.visible("the step stays open across the refresh", `details[data-testid="step-charge"][open] [data-testid=step-output]`)
		gone := run(b, "no cancel button on a finished run", chromedp.Evaluate[bool](`!document.querySelector("[data-testid=cancel-run]")`))
		require.True(t, gone)
	})

	t.Run("RerunFailedRun", func(t *testing.T) {
		b.use(t)
		old := runs["failed"]
		b.do("open the failed run", 10*time.Second, chromedp.Navigate(s.URL+"/#/runs/"+old))
		b.visible("it failed", runStatus("failed"))
		b.visible("its error", "[data-testid=run-error-callout]")
		b.click("open the failed step", `details[data-testid="step-attempt"] > summary`)
		b.visible("its failed attempts", `details[data-testid="step-attempt"] .failures`)
		t.Logf("screenshot: %s", b.screenshot("run-failed"))
		b.click("rerun", "[data-testid=rerun-run]")
		b.click("confirm", "dialog[open] [data-testid=confirm]")
		b.poll("the new run's page", fmt.Sprintf(`location.hash.startsWith("#/runs/") && location.hash !== "#/runs/%s"`, old))
		hash := run(b, "its id", chromedp.Evaluate[string](`location.hash.slice("#/runs/".length)`))
		b.visible("it links back", fmt.Sprintf(`[data-testid=rerun-of] a[href="#/runs/%s"]`, old))
		b.visible("it runs and fails again", runStatus("failed"))
		rerun := getRun(t, c, hash)
		require.NotNil(t, rerun.RerunOf)
		require.Equal(t, old, *rerun.RerunOf)
		require.JSONEq(t, `{"fail_times":5}`, string(*rerun.Input))
	})

	t.Run("RerunFromAStep", func(t *testing.T) {
		b.use(t)
		old := getRun(t, c, checkout)
		var from protocol.JournalEntry
		for _, e := range old.Journal {
			if e.Name == "charge" {
				from = e
			}
		}
		require.Equal(t, "charge", from.Name, "the checkout run charged")
		b.do("open the checkout run", 10*time.Second, chromedp.Navigate(s.URL+"/#/runs/"+checkout))
		b.visible("it completed", runStatus("completed"))
		b.click("open its charge step", `details[data-testid="step-charge"] > summary`)
		b.click("rerun from here", fmt.Sprintf(`details[data-testid="step-charge"] [data-testid=rerun-from-%d]`, from.Seq))
		b.visible("the confirm dialog", "dialog[open] [data-testid=confirm]")
		t.Logf("screenshot: %s", b.screenshot("run-rerun-from-dialog"))
		b.click("confirm", "dialog[open] [data-testid=confirm]")
		b.poll("the new run's page", fmt.Sprintf(`location.hash.startsWith("#/runs/") && location.hash !== "#/runs/%s"`, checkout))
		hash := run(b, "its id", chromedp.Evaluate[string](`location.hash.slice("#/runs/".length)`))
		b.visible("it completes", runStatus("completed"))
		b.visible("the entries before charge are marked copied", `details[data-testid="step-reserve"] [data-testid=entry-copied]`)
		none := run(b, "charge ran again, not copied", chromedp.Evaluate[bool](`!document.querySelector('details[data-testid="step-charge"] [data-testid=entry-copied]')`))
		require.True(t, none)
		rerun := getRun(t, c, hash)
		require.Equal(t, &old.ID, rerun.RerunOf)
		for _, e := range rerun.Journal {
			require.Equal(t, e.Seq < from.Seq, e.Copied != nil && *e.Copied, "entry %d %q", e.Seq, e.Name)
		}
	})

	t.Run("FiltersSearchAndPages", func(t *testing.T) {
		b.use(t)
		shown := `[...document.querySelectorAll("tr[data-run]")].filter((r) => !r.hidden)`
		b.do("open a short page", 10*time.Second, chromedp.Navigate(s.URL+"/#/runs?limit=3"))
		b.poll("three runs", shown+`.length === 3`)
		b.click("load more", "[data-testid=load-more]")
		b.poll("six runs", shown+`.length === 6`)

		b.do("open the list", 10*time.Second, chromedp.Navigate(s.URL+"/#/runs"))
		b.visible("the runs", row(checkout))
		b.set("filter by status", "[data-testid=filter-status]", "cancelled", "change")
		b.poll("only the cancelled run", shown+`.length === 1 && `+shown+`[0].dataset.run === `+fmt.Sprintf("%q", runs["sleeping"]))
		b.set("filter by function", "[data-testid=filter-function]", "flaky", "change")
		b.visible("no cancelled flaky run", "[data-testid=empty-runs]")
		b.click("clear the filters", "[data-testid=clear-filters]")
		b.visible("all runs again", row(checkout))

		b.set("search an idempotency key", "[data-testid=search]", "o-1002", "input")
		b.poll("only its run", shown+`.length === 1 && `+shown+`[0].dataset.run === `+fmt.Sprintf("%q", runs["napped"]))
		b.set("search a run id", "[data-testid=search]", checkout, "input")
		b.do("press Enter", 5*time.Second, chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
			_, err := chromedp.Evaluate[bool](`document.querySelector("[data-testid=search]").dispatchEvent(new KeyboardEvent("keydown", {key: "Enter"}))`)(ctx, t)
			return err
		}))
		b.poll("straight to the run", fmt.Sprintf(`location.hash === "#/runs/%s"`, checkout))
		b.visible("its page", "[data-testid=timeline]")

		// An exact idempotency key finds its run even when it is not among the loaded runs.
		b.do("open a one-run page", 10*time.Second, chromedp.Navigate(s.URL+"/#/runs?limit=1"))
		b.poll("one run", shown+`.length === 1`)
		b.set("search an exact key", "[data-testid=search]", "order-o-1002", "input")
		b.do("press Enter", 5*time.Second, chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
			_, err := chromedp.Evaluate[bool](`document.querySelector("[data-testid=search]").dispatchEvent(new KeyboardEvent("keydown", {key: "Enter"}))`)(ctx, t)
			return err
		}))
		b.poll("straight to its run", fmt.Sprintf(`location.hash === "#/runs/%s"`, runs["napped"]))
	})

	t.Run("InvokeFromFunctionsPage", func(t *testing.T) {
		b.use(t)
		b.do("open the functions", 10*time.Second, chromedp.Navigate(s.URL+"/#/functions"))
		b.visible("the examples", `tr[data-function="orders.checkout"]`)
		// The tenant's storage against its quotas, as GET /v1/usage says (no run starts
		// meanwhile).
		usage, err := c.GetUsageWithResponse(t.Context())
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, usage.StatusCode(), string(usage.Body))
		b.visible("the tenant's storage", "[data-testid=usage]")
		used := run(b, "runs stored", chromedp.Evaluate[string](`document.querySelector("[data-testid=usage-runs]").dataset.used + "/" + document.querySelector("[data-testid=usage-runs]").dataset.max`))
		require.Equal(t, fmt.Sprintf("%d/%d", usage.JSON200.Runs, usage.JSON200.MaxRuns), used)
		require.Contains(t, b.text("the streams' quota", "[data-testid=usage-stream-bytes]"), "/ 10 GiB")
		require.Contains(t, b.text("the events' quota", "[data-testid=usage-event-bytes]"), "/ 1 GiB")
		journal := run(b, "journal bytes", chromedp.Evaluate[string](`document.querySelector("[data-testid=usage-journal-bytes]").dataset.used + "/" + document.querySelector("[data-testid=usage-journal-bytes]").dataset.max`))
		require.Equal(t, fmt.Sprintf("%d/%d", usage.JSON200.JournalBytes, usage.JSON200.MaxJournalBytes), journal)
		b.shoot("functions")
		b.click("invoke hello", "[data-testid=invoke-hello]")
		b.set("type invalid JSON", "[data-testid=invoke-input]", `{"name": Grace}`, "input")
		require.Contains(t, b.text("the JSON error", ".json-status.bad"), "Not valid JSON")
		disabled := run(b, "start is disabled", chromedp.Evaluate[bool](`document.querySelector("[data-testid=invoke-submit]").disabled`))
		require.True(t, disabled)
		b.set("type valid JSON", "[data-testid=invoke-input]", `{"name": "Grace"}`, "input")
		b.click("start the run", "[data-testid=invoke-submit]")
		b.visible("the new run completes", runStatus("completed"))
		require.Contains(t, b.text("its output", "[data-testid=run-output] .json"), "Hello, Grace!")
	})

	t.Run("CancelMatchingRuns", func(t *testing.T) {
		b.use(t)
		var ids []string
		for i := range 3 {
			ids = append(ids, start(t, c, "orders.checkout", fmt.Sprintf(`{"order_id":"o-bulk-%d","amount":1,"sleep_ms":600000}`, i), nil))
		}
		// The list is loaded once they sleep: this tests the bulk cancel, not live updates.
		for _, id := range ids {
			stack.AwaitStatus(t, c, id, protocol.RunStatusSuspended)
		}
		b.do("list the suspended checkouts", 10*time.Second, chromedp.Navigate(s.URL+"/#/runs?function=orders.checkout&status=suspended"))
		for _, id := range ids {
			b.visible("a sleeping checkout", rowStatus(id, "suspended"))
		}
		b.click("cancel matching", "[data-testid=cancel-matching]")
		require.Contains(t, b.text("the filter", "dialog[open] [data-testid=cancel-filter]"), "orders.checkout")
		require.Contains(t, b.text("the count", "dialog[open] [data-testid=cancel-count]"), "3 runs match")
		t.Logf("screenshot: %s", b.screenshot("runs-cancel-matching-dialog"))
		b.click("confirm", "dialog[open] [data-testid=confirm]")
		b.visible("the operation completes", `dialog[open] [data-testid=operation-text][data-status=completed]`)
		require.Contains(t, b.text("its count", "dialog[open] [data-testid=operation-text]"), "3 runs cancelled")
		t.Logf("screenshot: %s", b.screenshot("runs-cancel-matching-done"))
		for _, id := range ids {
			require.Equal(t, protocol.RunStatusCancelled, getRun(t, c, id).Status)
		}
		b.click("close the progress", `dialog[open] [aria-label=Close]`)
	})

	t.Run("ALateRejectionOfAnOldTokenSignsNobodyOut", func(t *testing.T) {
		b.use(t)
		b.visible("signed in", "[data-testid=who]")
		// A request goes out with a token the gateway rejects; before its 401 comes back,
		// the signed-in token is another (as after signing out and in again).
		status := run(b, "a request with a rejected token, answered after the token changed", chromedp.Evaluate[int](`(async () => {
			const api = await import("/js/api.js");
			const good = api.getToken();
			api.setToken("not.a-valid.token");
			const answer = api.request("/v1/runs?limit=1").then(() => 200, (e) => e.status);
			api.setToken(good);
			return await answer;
		})()`, chromedp.EvalAwaitPromise))
		require.Equal(t, http.StatusUnauthorized, status)
		still := run(b, "still signed in", chromedp.Evaluate[bool](`!!document.querySelector("[data-testid=who]") && !document.querySelector("#token")`))
		require.True(t, still, "a 401 for a token no longer signed in signed the current one out")
	})

	t.Run("OtherTenantSeesNothing", func(t *testing.T) {
		b.use(t)
		other := s.NewToken(t, auth.Identity{Subject: "mallory", Tenant: "other", Roles: []string{"admin"}})
		b.click("sign out", "[data-testid=sign-out]")
		b.do("sign in as another tenant", 10*time.Second,
			chromedp.WaitVisible(chromedp.CSS("#token")),
			chromedp.SetValue(chromedp.CSS("#token"), other),
			chromedp.Click(chromedp.CSS("[data-testid=sign-in]")),
			chromedp.WaitVisible(chromedp.CSS("[data-testid=who]")))
		b.visible("an empty list", "[data-testid=empty-runs]")
		rows := run(b, "no rows", chromedp.Evaluate[int](`document.querySelectorAll("tr[data-run]").length`))
		require.Zero(t, rows)
		b.do("open the first tenant's run", 10*time.Second, chromedp.Navigate(s.URL+"/#/runs/"+checkout))
		b.visible("not found", "[data-testid=run-not-found]")
	})

	t.Run("ViewerGetsNoActions", func(t *testing.T) {
		b.use(t)
		viewer := s.NewToken(t, auth.Identity{Subject: "val", Tenant: auth.DefaultTenant, Roles: []string{"viewer"}})
		b.click("sign out", "[data-testid=sign-out]")
		b.do("sign in as a viewer", 10*time.Second,
			chromedp.WaitVisible(chromedp.CSS("#token")),
			chromedp.SetValue(chromedp.CSS("#token"), viewer),
			chromedp.Click(chromedp.CSS("[data-testid=sign-in]")),
			chromedp.WaitVisible(chromedp.CSS("[data-testid=who]")))
		b.do("open the failed run", 10*time.Second, chromedp.Navigate(s.URL+"/#/runs/"+runs["failed"]))
		b.visible("it shows", runStatus("failed"))
		b.do("the session answered", 10*time.Second, chromedp.WaitReady(chromedp.CSS(`[data-testid=river][data-session]`)))
		hidden := run(b, "no rerun, no River UI", chromedp.Evaluate[bool](
			`!document.querySelector("[data-testid=rerun-run]") && !document.querySelector("[data-testid^=rerun-from-]") && document.querySelector("[data-testid=river]").hidden`))
		require.True(t, hidden, "a viewer was offered what it may not do")
	})

	t.Run("RunShowsItsValuesAndStreams", func(t *testing.T) {
		b.use(t)
		app := s.NewApp()
		functions.Register(app, "publisher", func(ctx context.Context, _ struct{}) (string, error) {
			if err := step.SetValue(ctx, "checkout_url", "https://pay.example/o-1"); err != nil {
				return "", err
			}
			out, err := step.Stream(ctx, "tokens")
			if err != nil {
				return "", err
			}
			for _, tok := range []string{"Hel", "lo"} {
				if err := out.WriteString(tok); err != nil {
					return "", err
				}
			}
			return "ok", out.Close()
		})
		s.Sync(t, s.ServeApp(t, app))
		id := start(t, c, "publisher", `{}`, nil)
		b.do("open the run", 10*time.Second, chromedp.Navigate(s.URL+"/#/runs/"+id))
		require.Contains(t, b.text("its value", `[data-testid=run-value][data-key="checkout_url"]`), "https://pay.example/o-1")
		b.poll("its stream's text", `document.querySelector('[data-testid=run-stream][data-key="tokens"] [data-testid=run-stream-body]')?.textContent === "Hello"`)
		b.shoot("run-published")
	})

	t.Run("DevLinkSignsIn", func(t *testing.T) {
		b.use(t)
		b.click("sign out", "[data-testid=sign-out]")
		b.do("open the dev link", 10*time.Second, chromedp.Navigate(s.URL+"/#token="+s.Token))
		b.visible("signed in", "[data-testid=who]")
		hash := run(b, "the token left the address bar", chromedp.Evaluate[string](`location.hash`))
		require.NotContains(t, hash, "token")
		b.visible("the runs", row(checkout))
	})

	t.Run("WaitingForAnotherRun", func(t *testing.T) {
		b.use(t)
		app := s.NewApp()
		functions.Register(app, "report", func(ctx context.Context, _ struct{}) (string, error) {
			return "", step.Sleep(ctx, "render", time.Hour)
		})
		functions.Register(app, "notify", func(ctx context.Context, in struct {
			Report string `json:"report"`
		}) (string, error) {
			return step.AwaitRun[string](ctx, "report-done", in.Report).Get()
		})
		s.Sync(t, s.ServeApp(t, app))
		report := start(t, c, "report", `{}`, nil)
		id := start(t, c, "notify", `{"report": "`+report+`"}`, nil)
		b.do("open the waiting run", 10*time.Second, chromedp.Navigate(s.URL+"/#/runs/"+id))
		b.visible("it is suspended", runStatus("suspended"))
		waits := b.text("what it waits on", "[data-testid=waiting-run]")
		require.Contains(t, waits, "report-done")
		require.Contains(t, waits, report, "it names the run it awaits")
		b.click("follow the link to that run", "[data-testid=waiting-run] a")
		b.poll("the awaited run's page", `location.hash === "#/runs/`+report+`"`)
	})

	t.Run("ApproveACallback", func(t *testing.T) {
		b.use(t)
		app := s.NewApp()
		functions.Register(app, "refund", func(ctx context.Context, _ struct{}) (map[string]any, error) {
			cb, err := step.Callback[map[string]any](ctx, "manager-approval", step.Timeout(time.Hour))
			if err != nil {
				return nil, err
			}
			res, err := cb.Result().Get()
			if err != nil {
				return nil, err
			}
			return map[string]any{"data": res, "by": cb.ResolvedBy.Subject}, nil
		})
		s.Sync(t, s.ServeApp(t, app))
		id := start(t, c, "refund", `{}`, nil)
		b.do("open the waiting run", 10*time.Second, chromedp.Navigate(s.URL+"/#/runs/"+id))
		b.visible("it is suspended", runStatus("suspended"))
		require.Contains(t, b.text("what it waits on", "[data-testid=waiting-callback]"), "manager-approval")
		// Its whole URL, to hand on (GET /v1/runs/{id}/callbacks, runs:manage).
		b.click("show its URL", "[data-testid=show-callback-url]")
		b.visible("the URL", "dialog[open] [data-testid=callback-url]")
		url := run(b, "the URL's value", chromedp.Evaluate[string](`document.querySelector("dialog[open] [data-testid=callback-url]").value`))
		require.Regexp(t, `^`+regexp.QuoteMeta(s.URL)+`/v1/callbacks/[A-Za-z0-9_-]{43}$`, url)
		t.Logf("screenshot: %s", b.screenshot("callback-url-dialog"))
		b.click("close it", `dialog[open] [aria-label=Close]`)
		b.click("approve", "[data-testid=approve-callback]")
		b.set("the data", "dialog[open] [data-testid=callback-data]", `{"amount": 42}`, "input")
		t.Logf("screenshot: %s", b.screenshot("callback-approve-dialog"))
		b.click("confirm", "dialog[open] [data-testid=confirm]")
		b.visible("the run completes", runStatus("completed"))
		res := getRun(t, c, id)
		require.JSONEq(t, `{"data":{"amount":42},"by":"tester"}`, string(*res.Output))
		require.Contains(t, b.text("the await's entry", "[data-testid=callback-resolved]"), "resolved by tester")
	})

	t.Run("ApproveAnOrderOrItsPayment", func(t *testing.T) {
		b.use(t)
		// The example orders.approval waits for the first of a callback and an event.
		id := start(t, c, "orders.approval", `{"order_id":"o-e2e"}`, nil)
		b.do("open the waiting run", 10*time.Second, chromedp.Navigate(s.URL+"/#/runs/"+id))
		b.visible("it is suspended", runStatus("suspended"))
		waits := b.text("what it waits on", "[data-testid=waiting-any]")
		require.Contains(t, waits, "approval")
		require.Contains(t, waits, "orders.paid")
		require.Contains(t, waits, `"o-e2e"`)
		b.click("approve", "[data-testid=approve-callback]")
		b.set("the data", "dialog[open] [data-testid=callback-data]", `{"note": "from the dashboard"}`, "input")
		b.click("confirm", "dialog[open] [data-testid=confirm]")
		b.visible("the run completes", runStatus("completed"))
		require.JSONEq(t, `{"outcome":"approved","by":"tester","note":"from the dashboard"}`, string(*getRun(t, c, id).Output))
		require.Contains(t, b.text("the wait's entry", "[data-testid=any-chosen]"), "resolved by tester")
		t.Logf("screenshot: %s", b.screenshot("run-approved-first-of"))
	})

	t.Run("ScheduledRunShowsItsStartAndDeadline", func(t *testing.T) {
		b.use(t)
		id := start(t, c, "hello", `{"name":"later"}`, &protocol.StartRunParams{Delay: new("1h"), Timeout: new("2h")})
		b.do("open the scheduled run", 10*time.Second, chromedp.Navigate(s.URL+"/#/runs/"+id))
		b.visible("it is scheduled", runStatus("scheduled"))
		require.Contains(t, b.text("what it waits on", "[data-testid=waiting]"), "Scheduled to start")
		b.visible("its deadline", "[data-testid=deadline]")
		t.Logf("screenshot: %s", b.screenshot("run-scheduled"))
	})

	t.Run("FlowControlSaysWhyARunWaits", func(t *testing.T) {
		b.use(t)
		// One start a minute: the second and third wait, scheduled and held.
		app := s.NewApp()
		functions.Register(app, "digest", func(ctx context.Context, _ struct{}) (string, error) { return "sent", nil },
			functions.Throttle(functions.Rate{Limit: 1, Period: time.Minute}))
		s.Sync(t, s.ServeApp(t, app))
		var last string
		for range 3 {
			last = start(t, c, "digest", `{}`, nil)
		}
		b.do("open the last digest", 10*time.Second, chromedp.Navigate(s.URL+"/#/runs/"+last))
		b.visible("it is scheduled", runStatus("scheduled"))
		require.Contains(t, b.text("why it waits", "[data-testid=held]"), "throttled")
		b.do("open the functions", 10*time.Second, chromedp.Navigate(s.URL+"/#/functions"))
		require.Contains(t, b.text("its flow control", `tr[data-function="digest"] [data-testid=flow-badges]`), "throttle 1/1m")
		b.click("open its queue", `[data-testid="queue-digest"]`)
		require.Contains(t, b.text("why runs wait", "[data-testid=queue-reasons]"), "2 throttled")
		t.Logf("screenshot: %s", b.screenshot("function-queue"))
		run(b, "close the dialog", chromedp.Evaluate[bool](`(document.querySelector("dialog").close(), true)`))
	})

	t.Run("RunShowsItsRequests", func(t *testing.T) {
		b.use(t)
		runShowsItsRequests(t, b, s, c)
	})

	t.Run("FunctionShowsItsLastCheck", func(t *testing.T) {
		b.use(t)
		functionShowsItsLastCheck(t, b, s, c)
	})

	t.Run("ChartsShowTheRuns", func(t *testing.T) {
		b.use(t)
		chartsShowTheRuns(t, b, s, c)
	})

	t.Run("ALinkForAnotherTenantAsksFirst", func(t *testing.T) {
		b.use(t)
		mallory := s.NewToken(t, auth.Identity{Subject: "mallory", Tenant: "evil", Roles: []string{"admin"}})
		b.do("open a link to another tenant", 10*time.Second, chromedp.Navigate(s.URL+"/#token="+mallory))
		b.visible("the dashboard asks", "dialog[open] [data-testid=offered-identity]")
		require.Contains(t, b.text("the offer", "dialog[open] [data-testid=offered-identity]"), "mallory (tenant evil)")
		t.Logf("screenshot: %s", b.screenshot("switch-tenant-dialog"))
		b.click("stay", "dialog[open] [data-testid=dismiss]")
		b.visible("the runs", row(checkout))
		require.Contains(t, b.text("who", "[data-testid=who]"), "tester", "still signed in as before")
		hash := run(b, "the token left the address bar", chromedp.Evaluate[string](`location.hash`))
		require.NotContains(t, hash, "token")

		run(b, "follow the link again", chromedp.Evaluate[bool](`(location.hash = "#token=`+mallory+`", true)`))
		b.click("switch", "dialog[open] [data-testid=confirm]")
		b.do("signed in as the other", 10*time.Second, chromedp.WaitVisible(chromedp.CSS("[data-testid=who]")))
		b.visible("the other tenant's empty list", "[data-testid=empty-runs]")
		require.Contains(t, b.text("who", "[data-testid=who]"), "mallory")
	})

	b.use(t)
	errs := b.pageExceptions()
	if len(errs) > 0 {
		j, _ := json.MarshalIndent(errs, "", "  ")
		t.Fatalf("uncaught errors in the page: %s", j)
	}
}
