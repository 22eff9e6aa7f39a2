package awaitrun_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/examples/awaitrun"
	"github.com/stepgate/stepgate/functions"
	"github.com/stepgate/stepgate/functions/functionstest"
)

// TestNotify: reports.notify waits for the run of reports.build it names, started
// before it, and mails the report once that run ends; a run that ended already is
// returned at once; an unknown run is not found; and while a build runs, its notify
// waits.
func TestNotify(t *testing.T) {
	app := functions.New(functions.Config{InsecureSkipVerify: true})
	awaitrun.Register(app)
	h := functionstest.New(t, app)

	build := h.Start("reports.build", awaitrun.Build{Month: "2026-11"})
	require.Equal(t, functionstest.Suspended, build.Result().Status)
	notify := h.Start("reports.notify", awaitrun.Notify{ReportRun: build.ID()})
	require.Equal(t, functionstest.Suspended, notify.Result().Status, "it waits for the build")

	h.Advance(time.Minute)
	require.Equal(t, functionstest.Completed, build.Result().Status)
	res := notify.Result()
	require.Equal(t, functionstest.Completed, res.Status, "%+v", res)
	require.JSONEq(t, `"mailed https://reports.example/2026-11.pdf"`, string(res.Output))

	again := h.Start("reports.notify", awaitrun.Notify{ReportRun: build.ID()})
	require.JSONEq(t, `"mailed https://reports.example/2026-11.pdf"`, string(again.Result().Output), "an ended run is returned at once")

	unknown := h.Start("reports.notify", awaitrun.Notify{ReportRun: "0190a0c1-0000-7000-8000-000000000000"})
	require.JSONEq(t, `"no report: not_found"`, string(unknown.Result().Output))

	slow := h.Start("reports.build", awaitrun.Build{Month: "2026-12"})
	late := h.Start("reports.notify", awaitrun.Notify{ReportRun: slow.ID()})
	h.Advance(30 * time.Second)
	require.Equal(t, functionstest.Suspended, late.Result().Status)
}
