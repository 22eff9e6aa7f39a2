// Package awaitrun is the waits page's wait for another run's end: reports.notify
// mails the link of a report that a run of reports.build, which a client started,
// makes; it is not that run's parent, and waits for it by id.
package awaitrun

import (
	"context"
	"errors"
	"time"

	"github.com/stepgate/stepgate/functions"
	"github.com/stepgate/stepgate/functions/step"
)

type (
	// Build asks for a report.
	Build struct {
		Month string `json:"month"`
	}
	// Report is what reports.build returns.
	Report struct {
		URL string `json:"url"`
	}
	// Notify names the run of reports.build to wait for.
	Notify struct {
		ReportRun string `json:"report_run"`
	}
)

// Register adds reports.build and reports.notify to app.
func Register(app *functions.App) {
	functions.Register(app, "reports.build", build)
	functions.Register(app, "reports.notify", notify)
}

// build takes a minute (a durable sleep stands for the work) and returns the report.
func build(ctx context.Context, in Build) (Report, error) {
	if err := step.Sleep(ctx, "render", time.Minute); err != nil {
		return Report{}, err
	}
	return Report{URL: "https://reports.example/" + in.Month + ".pdf"}, nil
}

func notify(ctx context.Context, in Notify) (string, error) {
	// docs:begin await
	report, err := step.AwaitRun[Report](ctx, "report", in.ReportRun, step.Timeout(24*time.Hour)).Get()
	var failed *step.Error
	switch {
	case errors.Is(err, step.ErrTimedOut):
		return "no report within a day", nil
	case errors.As(err, &failed): // it failed, was cancelled, or is not there (not_found)
		return "no report: " + failed.Type, nil
	case err != nil:
		return "", err
	}
	return step.Run(ctx, "mail", func(ctx context.Context) (string, error) {
		return "mailed " + report.URL, nil // send the mail here
	})
	// docs:end await
}
