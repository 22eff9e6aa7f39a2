package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/stepgate/stepgate/access"
	"github.com/stepgate/stepgate/internal/helpers/redact"
	"github.com/stepgate/stepgate/invoker"
	"github.com/stepgate/stepgate/journal"
	"github.com/stepgate/stepgate/journal/appcheck"
	"github.com/stepgate/stepgate/protocol"
)

// Bounds of a check of an app against its functions' live runs (POST /v1/apps?check=true).
// A tenant runs one check at a time, whichever gateway serves it (startCheck).
const (
	// DefaultCheckSample and MaxCheckSample: the live runs a check replays per function.
	DefaultCheckSample = 20
	MaxCheckSample     = 100
	// MaxCheckTime bounds a whole check; a replay it cuts short is a failed one.
	MaxCheckTime = 60 * time.Second
	// MaxCheckFunctions bounds the functions of a manifest a check takes; a check of a
	// manifest with more is a 400.
	MaxCheckFunctions = 100
	// DefaultMaxCheckBytes is Config.MaxCheckBytes's default: a check sends at most 64
	// MiB of runs' inputs and journals in all.
	DefaultMaxCheckBytes = 64 << 20
	// checkSlotTTL is how long a check holds its tenant's slot should its gateway die
	// mid-check: the check's own bound, and room to keep its result and register.
	checkSlotTTL = MaxCheckTime + 30*time.Second
)

// syncOptions are a sync's query parameters, checked.
type syncOptions struct {
	check, force, dryRun bool
	sample               int
}

// syncOptions reads and checks params: check_sample within its bounds, force and
// check_sample only with a check, and a check only for a caller who may read runs.
func (s *Server) syncOptions(ctx context.Context, params protocol.SyncAppParams) (syncOptions, error) {
	o := syncOptions{
		dryRun: params.DryRun != nil && *params.DryRun,
		force:  params.Force != nil && *params.Force,
		sample: DefaultCheckSample,
	}
	o.check = o.dryRun || (params.Check != nil && *params.Check)
	if params.CheckSample != nil {
		if n := *params.CheckSample; n < 1 || n > MaxCheckSample {
			return o, badRequest("check_sample %d is out of its bounds, 1 to %d", n, MaxCheckSample)
		}
		o.sample = *params.CheckSample
	}
	switch {
	case !o.check && (o.force || params.CheckSample != nil):
		return o, badRequest("force and check_sample go with check=true or dry_run=true")
	case o.check && !identity(ctx).Has(access.PermissionRunsRead):
		return o, &problemError{http.StatusForbidden, fmt.Sprintf(
			"a check shows the ids of live runs, so it needs the permission %s as well as %s", access.PermissionRunsRead, access.PermissionFunctionsWrite)}
	}
	return o, nil
}

// checkManifestSize refuses, with a 400 naming the bound, a check of a manifest of more
// than MaxCheckFunctions functions.
func checkManifestSize(m *protocol.Manifest) error {
	if n := len(m.Functions); n > MaxCheckFunctions {
		return badRequest("manifest: a check takes at most %d functions; this one lists %d functions (sync without a check, or split the app)", MaxCheckFunctions, n)
	}
	return nil
}

// startCheck takes the caller's tenant's check slot for a check of the app at appURL
// (appcheck.StartAppCheck), for at most checkSlotTTL; endCheck frees it. When another
// check holds it, startCheck returns no slot and the 409 that names that check.
func (s *Server) startCheck(ctx context.Context, appURL string) (*appcheck.AppCheckSlot, *protocol.AppCheckRefused, error) {
	db := s.tenantDB(ctx)
	slot, err := appcheck.StartAppCheck(ctx, db, appcheck.AppCheckSlot{
		ID: uuid.NewString(), Tenant: db.Tenant(), Subject: identity(ctx).Subject, App: redact.URL(appURL),
	}, checkSlotTTL, nil)
	var running *appcheck.RunningCheckError
	switch {
	case errors.As(err, &running):
		r := running.Running
		return nil, checkConflict(fmt.Sprintf("check %s of the app %s, started by %s at %s, is still running; a tenant runs one check at a time (a check takes at most %s)",
			r.ID, r.App, r.Subject, r.StartedAt.UTC().Format(time.RFC3339), MaxCheckTime)), nil
	case errors.Is(err, journal.ErrConflict):
		return nil, checkConflict("another check of the tenant was starting; ask again"), nil
	case err != nil:
		return nil, nil, err
	}
	return slot, nil, nil
}

func checkConflict(detail string) *protocol.AppCheckRefused {
	return &protocol.AppCheckRefused{Title: http.StatusText(http.StatusConflict), Status: http.StatusConflict, Detail: detail}
}

// endCheck frees the tenant's check slot that slot holds, even when ctx is done; a
// slot it fails to free frees itself after checkSlotTTL.
func (s *Server) endCheck(ctx context.Context, slot *appcheck.AppCheckSlot) {
	ctx = context.WithoutCancel(ctx)
	if err := appcheck.EndAppCheck(ctx, s.tenantDB(ctx), slot.Tenant, slot.ID); err != nil {
		s.log.WarnContext(ctx, "could not end a check; its tenant's next check waits for it to expire",
			slog.String("tenant", slot.Tenant), slog.String("check_id", slot.ID), slog.String("error", err.Error()))
	}
}

// checkApp checks the new code of each of regs (the app's manifest m, validated) against
// its function's live runs and decides whether the sync registers it (opts). A
// function's runs are replayed only when m says the app answers replay-only
// invocations; otherwise a function with live runs is not ok. What the replays send
// in all is bounded by s.checkBytes (invoker.CheckBudget).
func (s *Server) checkApp(ctx context.Context, m *protocol.Manifest, regs []*registration, opts syncOptions) (*protocol.AppCheck, error) {
	ctx, cancel := context.WithTimeout(ctx, MaxCheckTime)
	defer cancel()
	db := s.tenantDB(ctx)
	replays := m.ReplayOnly != nil && *m.ReplayOnly
	budget := invoker.NewCheckBudget(s.checkBytes)
	c := &protocol.AppCheck{CheckedAt: time.Now().UTC(), Ok: true, Functions: make([]protocol.FunctionCheck, 0, len(regs))}
	for _, r := range regs {
		fc := protocol.FunctionCheck{Function: r.name, URL: &r.url, Broken: []protocol.RunCheck{}}
		if !replays {
			live, err := appcheck.LiveRunsToCheck(ctx, db, db.Tenant(), r.name, 1)
			if err != nil {
				return nil, err
			}
			fc.Live = live.Live
			if live.More {
				fc.More = new(true)
			}
			if fc.Live > 0 || live.More {
				c.Ok = false
				c.Reason = new("the app's manifest does not say replay_only: true, so its SDK may run the steps of a replay-only invocation: " +
					"none was sent, and its functions' live runs are not checked")
			}
			c.Functions = append(c.Functions, fc)
			continue
		}
		lc, err := s.inv.CheckLiveRuns(ctx, db, invoker.CheckTarget{Function: r.name, URL: r.url, Timeout: r.config.Timeout}, opts.sample, budget)
		if err != nil {
			return nil, err
		}
		fc.Live = lc.Live
		if lc.More {
			fc.More = new(true)
		}
		for _, rc := range lc.Replays {
			fc.Checked++
			if rc.Clean() {
				fc.Clean++
				continue
			}
			broken := protocol.RunCheck{RunID: rc.RunID, Revision: rc.Revision, Error: errorToAPI(rc.Error)}
			if rc.Replay != nil {
				broken.Divergence = rc.Replay.Divergence
			}
			fc.Broken = append(fc.Broken, broken)
			c.Ok = false
		}
		c.Functions = append(c.Functions, fc)
	}
	c.Registered = !opts.dryRun && (c.Ok || opts.force)
	if c.Registered && !c.Ok {
		c.Forced = new(true)
	}
	return c, nil
}

// keepChecks keeps each function's part of c as its last check, for the functions
// registered (appcheck.PutFunctionCheck keeps nothing for another name), with the
// function's revision (FunctionCheck.revision), which it also sets in c: call it once
// the sync registered what it registers.
func (s *Server) keepChecks(ctx context.Context, c *protocol.AppCheck) error {
	db := s.tenantDB(ctx)
	for i := range c.Functions {
		fc := &c.Functions[i]
		fn, err := journal.GetFunction(ctx, db, db.Tenant(), fc.Function)
		switch {
		case errors.Is(err, journal.ErrNotFound):
			continue // not registered: nothing is kept
		case err != nil:
			return fmt.Errorf("keep check of %s: %w", fc.Function, err)
		}
		fc.Revision = new(fn.Revision)
		raw, err := json.Marshal(fc)
		if err != nil {
			return fmt.Errorf("encode check of %s: %w", fc.Function, err)
		}
		err = appcheck.PutFunctionCheck(ctx, db, appcheck.FunctionCheck{
			Tenant: db.Tenant(), Function: fc.Function, CheckedAt: c.CheckedAt, Subject: identity(ctx).Subject,
			Registered: c.Registered, Forced: c.Forced != nil && *c.Forced, Result: raw,
		})
		if err != nil {
			return fmt.Errorf("keep check of %s: %w", fc.Function, err)
		}
	}
	return nil
}

// refusal is the detail of a 409 for the check c: how many runs would break, of which
// functions, or why the app could not be checked.
func refusal(c *protocol.AppCheck) string {
	if c.Reason != nil {
		return "nothing was registered: " + *c.Reason + " (force=true registers anyway)"
	}
	var parts []string
	for _, f := range c.Functions {
		if len(f.Broken) > 0 {
			parts = append(parts, fmt.Sprintf("%s: %d of %d live runs checked", f.Function, len(f.Broken), f.Checked))
		}
	}
	return "nothing was registered: the new code would break live runs (" + strings.Join(parts, "; ") +
		"); each is in check.functions[].broken (force=true registers anyway)"
}

// lastCheckToAPI returns a function's last check for the API; unless reveal, the URL
// it checked is masked as a function's is (redact.URL).
func lastCheckToAPI(c *appcheck.FunctionCheck, reveal bool) (*protocol.FunctionLastCheck, error) {
	out := &protocol.FunctionLastCheck{CheckedAt: c.CheckedAt, Registered: c.Registered, Subject: &c.Subject}
	if c.Forced {
		out.Forced = new(true)
	}
	if err := json.Unmarshal(c.Result, &out.Check); err != nil {
		return nil, fmt.Errorf("decode last check of %s: %w", c.Function, err)
	}
	if out.Check.URL != nil && !reveal {
		out.Check.URL = new(redact.URL(*out.Check.URL))
	}
	return out, nil
}
