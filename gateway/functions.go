package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/stepgate/stepgate/access"
	"github.com/stepgate/stepgate/gateway/api/server"
	"github.com/stepgate/stepgate/internal/helpers/egress"
	"github.com/stepgate/stepgate/internal/helpers/redact"
	"github.com/stepgate/stepgate/invoker"
	"github.com/stepgate/stepgate/journal"
	"github.com/stepgate/stepgate/journal/appcheck"
	"github.com/stepgate/stepgate/journal/storable"
	"github.com/stepgate/stepgate/protocol"
	"github.com/stepgate/stepgate/protocol/names"
	"github.com/stepgate/stepgate/protocol/signature"
)

func notFound(detail string) server.NotFoundApplicationProblemPlusJSONResponse {
	return server.NotFoundApplicationProblemPlusJSONResponse(problem(http.StatusNotFound, detail))
}

func conflict(detail string) server.ConflictApplicationProblemPlusJSONResponse {
	return server.ConflictApplicationProblemPlusJSONResponse(problem(http.StatusConflict, detail))
}

func functionNotFound(name string) server.NotFoundApplicationProblemPlusJSONResponse {
	return notFound(fmt.Sprintf("function %q is not registered", name))
}

// functionToAPI returns a function revision for the API. Unless reveal (the caller may
// manage functions), what may be a secret in its URL is masked: its user information,
// path, query values and fragment (redact.URL).
func functionToAPI(fn *journal.Function, reveal bool) (protocol.Function, error) {
	out := protocol.Function{Name: fn.Name, Revision: fn.Revision, URL: fn.URL, CreatedAt: fn.CreatedAt}
	if !reveal {
		out.URL = redact.URL(fn.URL)
	}
	if err := json.Unmarshal(fn.Config, &out.Config); err != nil {
		return protocol.Function{}, fmt.Errorf("decode config of function %s: %w", fn.Name, err)
	}
	return out, nil
}

// registration is a function's new revision, validated, before it is stored.
type registration struct {
	name, url string
	raw       json.RawMessage // its config as given ({} for none)
	config    invoker.FunctionConfig
}

// prepare validates a new revision of a function of tenant: its name, its URL (one the
// tenant may dial) and its config (within the gateway's caps).
func (s *Server) prepare(ctx context.Context, tenant, name, rawURL string, config *protocol.FunctionConfig) (*registration, error) {
	if err := names.CheckFunction("function name", name); err != nil {
		return nil, badRequest("%v", err)
	}
	if err := s.checkURL(ctx, tenant, rawURL); err != nil {
		return nil, err
	}
	raw := json.RawMessage(`{}`)
	var err error
	if config != nil {
		if raw, err = json.Marshal(config); err != nil {
			return nil, fmt.Errorf("encode config: %w", err)
		}
	}
	if err := storable.CheckJSON(raw); err != nil {
		return nil, badRequest("function %s: config %v", name, err)
	}
	fc, err := invoker.ParseConfig(raw)
	if err == nil && config != nil {
		err = s.inv.Limits().CheckConfig(*config, fc)
	}
	if err != nil {
		return nil, badRequest("function %s: %v", name, err)
	}
	return &registration{name: name, url: rawURL, raw: raw, config: fc}, nil
}

// store stores r as its function's new revision in tenant when its URL or config
// differ from the current revision's, as a sync does (invoker.Functions.Sync), and
// otherwise returns the current revision.
func (s *Server) store(ctx context.Context, tenant string, r *registration) (fn *journal.Function, changed bool, err error) {
	return s.inv.Functions().Sync(ctx, journal.ForTenant(s.api, tenant), r.name, r.url, r.raw, r.config)
}

// RegisterFunction validates a function's registration, refuses a URL where the app's
// manifest serves other functions (checkServed), and stores it as a new revision, unless
// its URL and config are the current revision's (store): then it answers the current
// revision, so that runs started after it stay on it.
func (s *Server) RegisterFunction(ctx context.Context, req server.RegisterFunctionRequestObject) (server.RegisterFunctionResponseObject, error) {
	tenant := identity(ctx).Tenant
	r, err := s.prepare(ctx, tenant, req.Name, req.Body.URL, req.Body.Config)
	if err != nil {
		return nil, err
	}
	if err := s.checkServed(ctx, tenant, req.Name, req.Body.URL); err != nil {
		return nil, err
	}
	fn, _, err := s.store(ctx, tenant, r)
	if err != nil {
		return nil, err
	}
	out, err := functionToAPI(fn, true)
	if err != nil {
		return nil, err
	}
	return server.RegisterFunction200JSONResponse(out), nil
}

// GetFunction returns a function's current revision, with its last check against its
// live runs (POST /v1/apps?check=true) when it had one.
func (s *Server) GetFunction(ctx context.Context, req server.GetFunctionRequestObject) (server.GetFunctionResponseObject, error) {
	var fn *journal.Function
	var last *appcheck.FunctionCheck
	err := s.read(ctx, func(db *journal.TenantDB) error {
		var err error
		if fn, err = journal.GetFunction(ctx, db, db.Tenant(), req.Name); err != nil {
			return err
		}
		last, err = appcheck.GetFunctionCheck(ctx, db, db.Tenant(), req.Name)
		if errors.Is(err, journal.ErrNotFound) {
			last, err = nil, nil
		}
		return err
	})
	if errors.Is(err, journal.ErrNotFound) {
		return server.GetFunction404ApplicationProblemPlusJSONResponse{NotFoundApplicationProblemPlusJSONResponse: functionNotFound(req.Name)}, nil
	}
	if err != nil {
		return nil, err
	}
	reveal := identity(ctx).Has(access.PermissionFunctionsWrite)
	out, err := functionToAPI(fn, reveal)
	if err != nil {
		return nil, err
	}
	if last != nil {
		if out.LastCheck, err = lastCheckToAPI(last, reveal); err != nil {
			return nil, err
		}
	}
	return server.GetFunction200JSONResponse(out), nil
}

// ListFunctions lists the tenant's functions.
func (s *Server) ListFunctions(ctx context.Context, _ server.ListFunctionsRequestObject) (server.ListFunctionsResponseObject, error) {
	var fns []journal.Function
	err := s.read(ctx, func(db *journal.TenantDB) (err error) {
		fns, err = journal.ListFunctions(ctx, db, db.Tenant())
		return err
	})
	if err != nil {
		return nil, err
	}
	list, err := functionsToAPI(fns, identity(ctx).Has(access.PermissionFunctionsWrite))
	if err != nil {
		return nil, err
	}
	return server.ListFunctions200JSONResponse(list), nil
}

func functionsToAPI(fns []journal.Function, reveal bool) (protocol.FunctionList, error) {
	out := protocol.FunctionList{Functions: make([]protocol.Function, 0, len(fns))}
	for i := range fns {
		f, err := functionToAPI(&fns[i], reveal)
		if err != nil {
			return protocol.FunctionList{}, err
		}
		out.Functions = append(out.Functions, f)
	}
	return out, nil
}

// DeleteFunction unregisters a function.
func (s *Server) DeleteFunction(ctx context.Context, req server.DeleteFunctionRequestObject) (server.DeleteFunctionResponseObject, error) {
	err := s.inv.Functions().Delete(ctx, s.tenantDB(ctx), req.Name)
	if errors.Is(err, journal.ErrNotFound) {
		return server.DeleteFunction404ApplicationProblemPlusJSONResponse{NotFoundApplicationProblemPlusJSONResponse: functionNotFound(req.Name)}, nil
	}
	if err != nil {
		return nil, err
	}
	return server.DeleteFunction204Response{}, nil
}

// SyncApp reads an app's manifest with a signed GET and registers each of its functions,
// once all of them are valid: a new revision of each whose URL or config changed
// (invoker.Functions.Sync); the others keep theirs. With check (or dry_run), it first
// checks the new code against the functions' live runs (checkApp) and registers nothing
// when a run would break, unless force, nor with dry_run; then it keeps each registered
// function's check. A check takes a manifest of at most MaxCheckFunctions functions
// (else a 400) and its tenant's check slot (startCheck; else a 409 naming the check
// that holds it) until it has registered what it registers.
func (s *Server) SyncApp(ctx context.Context, req server.SyncAppRequestObject) (server.SyncAppResponseObject, error) {
	opts, err := s.syncOptions(ctx, req.Params)
	if err != nil {
		return nil, err
	}
	if err := s.checkURL(ctx, identity(ctx).Tenant, req.Body.URL); err != nil {
		return nil, err
	}
	base, err := url.Parse(req.Body.URL)
	if err != nil {
		return nil, badRequest("url is not valid: %v", err)
	}
	manifest, err := s.fetchManifest(ctx, identity(ctx).Tenant, base.String())
	if err != nil {
		return server.SyncApp502ApplicationProblemPlusJSONResponse{BadGatewayApplicationProblemPlusJSONResponse: server.BadGatewayApplicationProblemPlusJSONResponse(
			problem(http.StatusBadGateway, err.Error()))}, nil
	}
	if err := checkManifestVersion(manifest); err != nil {
		return nil, err
	}
	if opts.check {
		if err := checkManifestSize(manifest); err != nil {
			return nil, err
		}
	}
	tenant := identity(ctx).Tenant
	regs := make([]*registration, 0, len(manifest.Functions))
	for _, mf := range manifest.Functions {
		ref, err := url.Parse(mf.Path)
		if err != nil {
			return nil, badRequest("manifest: function %s has a bad path %q", mf.Name, mf.Path)
		}
		r, err := s.prepare(ctx, tenant, mf.Name, base.ResolveReference(ref).String(), mf.Config)
		if err != nil {
			return nil, err
		}
		regs = append(regs, r)
	}
	out := protocol.AppSyncResult{Functions: []protocol.SyncedFunction{}}
	if opts.check {
		// A check reads and sends journals: a heavy read, before the tenant's one check.
		if err := s.heavyRead(ctx); err != nil {
			return nil, err
		}
		slot, running, err := s.startCheck(ctx, base.String())
		if err != nil {
			return nil, err
		}
		if running != nil {
			return server.SyncApp409ApplicationProblemPlusJSONResponse(*running), nil
		}
		defer s.endCheck(ctx, slot)
		c, err := s.checkApp(ctx, manifest, regs, opts)
		if err != nil {
			return nil, err
		}
		out.Check = c
		if !c.Registered {
			if err := s.keepChecks(context.WithoutCancel(ctx), c); err != nil {
				return nil, err
			}
			if opts.dryRun {
				return server.SyncApp200JSONResponse(out), nil
			}
			return server.SyncApp409ApplicationProblemPlusJSONResponse(protocol.AppCheckRefused{
				Title: http.StatusText(http.StatusConflict), Status: http.StatusConflict, Detail: refusal(c), Check: c,
			}), nil
		}
	}
	for _, r := range regs {
		fn, changed, err := s.store(ctx, tenant, r)
		if err != nil {
			return nil, err
		}
		f, err := functionToAPI(fn, true)
		if err != nil {
			return nil, err
		}
		out.Functions = append(out.Functions, protocol.SyncedFunction{
			Name: f.Name, Revision: f.Revision, URL: f.URL, Config: f.Config, CreatedAt: f.CreatedAt, Changed: changed,
		})
	}
	if out.Check != nil {
		if err := s.keepChecks(context.WithoutCancel(ctx), out.Check); err != nil {
			return nil, err
		}
	}
	return server.SyncApp200JSONResponse(out), nil
}

// checkServed refuses, with a 400 that says why, the registration of name at fnURL when
// the manifest of the app at fnURL's directory (fnURL resolved against "./", where both
// SDKs answer it) lists other functions at fnURL and not name: the SDK there would
// refuse each invocation of name (401), so every run would fail. The manifest is read as
// a sync reads it (signed for tenant, with the tenant's egress client, within
// manifestTimeout and maxManifestBytes); one the gateway cannot read (no app there, an
// app without an SDK, an app that refuses the tenant's signature) refuses nothing, so
// the error tells a tenant only what a sync of that URL would.
func (s *Server) checkServed(ctx context.Context, tenant, name, fnURL string) error {
	u, err := url.Parse(fnURL)
	if err != nil {
		return nil // prepare refused it already
	}
	u.RawQuery, u.ForceQuery, u.Fragment, u.RawFragment = "", false, "", ""
	appURL := u.ResolveReference(&url.URL{Path: "./"})
	if appURL.String() == u.String() {
		return nil // a URL that ends in "/": where an SDK answers its manifest, no function
	}
	ctx, cancel := context.WithTimeout(ctx, manifestTimeout)
	defer cancel()
	m, _, _, err := s.readManifest(ctx, tenant, appURL.String())
	if err != nil {
		return nil
	}
	var served []string
	for _, mf := range m.Functions {
		ref, err := url.Parse(mf.Path)
		if err != nil {
			continue
		}
		at := appURL.ResolveReference(ref)
		at.RawQuery, at.ForceQuery, at.Fragment, at.RawFragment = "", false, "", ""
		if at.String() != u.String() {
			continue
		}
		if mf.Name == name {
			return nil
		}
		served = append(served, strconv.Quote(mf.Name))
	}
	if len(served) == 0 {
		return nil
	}
	return badRequest("function %s: the manifest of the app at %s serves %s at this URL, not %q, so its SDK would refuse every run of %q (401): "+
		"register the function under the name it is served as, or sync the app (stepgate apps sync %s)",
		name, appURL, strings.Join(served, ", "), name, name, appURL)
}

// manifestTimeout bounds a read of an app's manifest, and maxManifestBytes the bytes of
// it read.
const (
	manifestTimeout  = 10 * time.Second
	maxManifestBytes = 4 << 20
)

// fetchManifest reads the manifest of the app at appURL, signed for tenant, with the
// tenant's egress client, within manifestTimeout. When the app is outside the public internet
// (egress.Policy.Hide), a failure says the HTTP status and size only, or that the app
// could not be reached, and the gateway's log has the rest.
func (s *Server) fetchManifest(ctx context.Context, tenant, appURL string) (*protocol.Manifest, error) {
	ctx, cancel := context.WithTimeout(ctx, manifestTimeout)
	defer cancel()
	ctx, route := s.egress.Trace(ctx, appURL)
	m, status, size, err := s.readManifest(ctx, tenant, appURL)
	if err == nil || !s.egress.Hide(route) || egress.IsRefused(err) {
		return m, err
	}
	s.log.WarnContext(ctx, "manifest request to an app outside the public internet failed; the tenant is told the HTTP status and size only",
		slog.String("tenant", tenant), slog.String("error", err.Error()))
	const why = "the app is not on the public internet, so this does not show more; the gateway's log does"
	if status == 0 {
		return nil, fmt.Errorf("could not fetch the app's manifest: the app could not be reached or did not answer (%s)", why)
	}
	return nil, fmt.Errorf("the app answered HTTP %d with %d bytes to the manifest request, which is not a manifest this gateway can read (%s)", status, size, why)
}

// readManifest reads the manifest of the app at appURL, signed for tenant, and returns
// with it the answer's HTTP status (0: none) and the bytes of its body read.
func (s *Server) readManifest(ctx context.Context, tenant, appURL string) (*protocol.Manifest, int, int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, appURL, nil)
	if err != nil {
		return nil, 0, 0, fmt.Errorf("manifest request: %w", err)
	}
	sig, err := s.keys.Sign(ctx, tenant, signature.Request{Method: http.MethodGet, Path: signature.PathOf(req.URL)}, time.Now())
	if err != nil {
		return nil, 0, 0, err
	}
	req.Header.Set(signature.Header, sig)
	req.Header.Set(protocol.VersionHeader, protocol.Version)
	resp, err := s.clients.For(tenant).Do(req)
	if err != nil {
		// The tenant learns how the fetch failed, not what the app's host resolved to.
		return nil, 0, 0, fmt.Errorf("could not fetch the app's manifest: %w", egress.HideAddresses(err))
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxManifestBytes))
	status, size := resp.StatusCode, len(body)
	if err != nil {
		return nil, status, size, fmt.Errorf("reading the app's manifest: %w", err)
	}
	if loc := resp.Header.Get("Location"); loc != "" && resp.StatusCode >= 300 && resp.StatusCode < 400 {
		return nil, status, size, fmt.Errorf("the app answered HTTP %d to the manifest request, a redirect to %s, which the gateway does not follow: sync the URL it redirects to",
			resp.StatusCode, truncate([]byte(loc)))
	}
	if resp.StatusCode != http.StatusOK {
		return nil, status, size, fmt.Errorf("the app answered HTTP %d to the manifest request: %s", resp.StatusCode, truncate(body))
	}
	var m protocol.Manifest
	if err := json.Unmarshal(body, &m); err != nil {
		return nil, status, size, fmt.Errorf("the app's manifest is not valid JSON: %v", err)
	}
	return &m, status, size, nil
}

// maxSDKLen bounds a manifest's sdk, in bytes.
const maxSDKLen = 128

// checkManifestVersion refuses, with a 400 whose detail names both versions, a manifest
// whose protocol version this gateway does not serve, or that is not a version
// (protocol.CheckSDKVersion): its protocol_version, else its protocol's major as
// "<protocol>.0.0"; a manifest that says neither speaks 1.0.0. A protocol and a
// protocol_version of different majors are refused too, and an sdk that is not 1 to
// maxSDKLen printable ASCII characters.
func checkManifestVersion(m *protocol.Manifest) error {
	who := "the app's SDK"
	if m.Sdk != nil {
		sdk := *m.Sdk
		if len(sdk) == 0 || len(sdk) > maxSDKLen || strings.IndexFunc(sdk, func(r rune) bool { return r < 0x20 || r > 0x7e }) >= 0 {
			return badRequest("the app's manifest has an sdk of %d bytes that is not 1 to %d printable ASCII characters", len(sdk), maxSDKLen)
		}
		who += " (" + sdk + ")"
	}
	var v string
	switch {
	case m.ProtocolVersion != nil:
		v = *m.ProtocolVersion
		if got, err := protocol.ParseVersion(v); err == nil && m.Protocol != nil && *m.Protocol != got.Major {
			return badRequest("the app's manifest says protocol %d but protocol_version %s, of another major version", *m.Protocol, got)
		}
	case m.Protocol != nil:
		v = strconv.Itoa(*m.Protocol) + ".0.0"
	default:
		return nil
	}
	if err := protocol.CheckSDKVersion(who, v); err != nil {
		return badRequest("%v", err)
	}
	return nil
}

// checkURL refuses, with a 400 that says why, a function or app URL that is not an
// absolute http(s) URL or whose host this gateway may not dial for tenant
// (egress.Policy.ForTenant: the networks opened to every tenant and to this one). The
// dialer checks every address again at connect time, since DNS answers change.
func (s *Server) checkURL(ctx context.Context, tenant, rawURL string) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := s.egress.ForTenant(tenant).CheckURL(ctx, rawURL); err != nil {
		return badRequest("%v", err)
	}
	return nil
}

func truncate(b []byte) string {
	if len(b) > 300 {
		return string(b[:300]) + "…"
	}
	return string(b)
}
