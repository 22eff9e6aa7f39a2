package chaos_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// testFunctionFaults runs functions that fail the gateway in each way a function can:
// HTTP 500, an answer that is not JSON, no answer within the timeout, a connection closed
// right after the request or halfway through the answer, and a crash between a step's
// side effect and its checkpoint. Each run must end as the retry policy says (3
// attempts), with an error that says what happened: a closed connection is "the
// function closed the connection ...", not a bare "EOF" (as the issue saw). The crash is
// retried: the step runs again (at least once until journaled) and the run completes.
func testFunctionFaults(t *testing.T) {
	s := newScenario(t, fleetConfig{})
	n := size(2, 10)
	fns := []string{fnHTTP500, fnGarbage, fnHang, fnCloseEarly, fnCloseMid, fnCrash}
	var ids []string
	for _, fn := range fns {
		started, err := s.f.startMany(s.ctx, n, 4, fn, func(int) any { return map[string]string{"fault": fn} })
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, started...)
	}
	runs := s.settle(ids, stuckAfter, expectFault)

	byFunction := map[string]map[string]int{}
	for _, r := range runs {
		if byFunction[r.Function] == nil {
			byFunction[r.Function] = map[string]int{}
		}
		byFunction[r.Function][fmt.Sprintf("%s %s: %s", r.Status, r.ErrType, shorten(r.ErrMessage))]++
	}
	for _, fn := range fns {
		s.note("%s: %s", fn, fmtCounts(byFunction[fn]))
	}

	// The crash: "charge" ran in the first invocation, which died before its checkpoint,
	// and once more in the second, which journaled it; "ship" ran once.
	for _, r := range runs {
		if r.Function != fnCrash {
			continue
		}
		var charge, ship []int
		for _, x := range s.a.rec.executions() {
			if x.runID != r.ID {
				continue
			}
			switch x.step {
			case "charge":
				charge = append(charge, x.invocation)
			case "ship":
				ship = append(ship, x.invocation)
			}
		}
		slices.Sort(charge)
		if !slices.Equal(charge, []int{1, 2}) || !slices.Equal(ship, []int{2}) {
			t.Errorf("run %s of %s: charge ran in invocations %v and ship in %v; want [1 2] and [2]", r.ID, fnCrash, charge, ship)
		}
	}
}

// expectFault says how a run of each fault function must end.
func expectFault(r *runRow) string {
	failedWith := func(typ, contains string, attempts int) string {
		switch {
		case r.Status != "failed":
			return "ended " + r.Status + ", not failed"
		case typ != "" && r.ErrType != typ:
			return fmt.Sprintf("failed with error type %q, not %q", r.ErrType, typ)
		case !strings.Contains(r.ErrMessage, contains):
			return fmt.Sprintf("failed with %q, which does not say %q", r.ErrMessage, contains)
		case r.Attempts != attempts:
			return fmt.Sprintf("failed after %d invocations, not %d", r.Attempts, attempts)
		}
		return ""
	}
	switch r.Function {
	case fnHTTP500:
		return failedWith("http_status", "HTTP 500", 3)
	case fnGarbage:
		return failedWith("malformed_answer", "not a JSON", 3)
	case fnHang:
		return failedWith("timeout", "timeout", 3)
	case fnCloseEarly, fnCloseMid:
		if strings.Contains(r.ErrMessage, "EOF") {
			return fmt.Sprintf("failed with %q: a bare EOF does not say that the function closed the connection", r.ErrMessage)
		}
		return failedWith("", "closed the connection", 3)
	case fnCrash:
		if r.Status != "completed" || r.Attempts != 2 {
			return fmt.Sprintf("ended %s after %d invocations; want completed after 2 (%s: %s)", r.Status, r.Attempts, r.ErrType, r.ErrMessage)
		}
		return ""
	}
	return "unexpected function " + r.Function
}

func shorten(s string) string {
	if len(s) > 120 {
		return s[:120] + "…"
	}
	return s
}
