package invoker

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"

	"github.com/stepgate/stepgate/journal"
)

// Bounds of a callback.
const (
	// CallbackTokenBytes is the random bytes of a callback's token.
	CallbackTokenBytes = 32
	// DefaultRejection is the error type of a rejection that names none.
	DefaultRejection = "rejected"
)

// callbackURL returns the URL that resolves the callback of token, on this gateway's
// public URL.
func (inv *Invoker) callbackURL(token string) string {
	return inv.checkpoint + "/v1/callbacks/" + token
}

// CallbackRef names a callback to resolve: by its Token, in any tenant, or by its run
// and name (RunID, Name: the latest callback of that name) in the caller's tenant.
type CallbackRef struct {
	Token       string
	RunID, Name string
}

// Resolve resolves (res.Error nil) or rejects a callback. Named by its token,
// it is resolved as the token's holder, in any tenant: the token is the credential, db
// and res.By are ignored. Named by run and name, it is resolved in db's tenant as res.By
// (required), whom the run's revision must let resume the run (its invoke_roles and
// resume_roles, as for an event or a message: a *journal.ResumeForbiddenError). It
// returns journal.ErrNotFound for an unknown token, run or callback, a
// *journal.ClosedCallbackError when it was resolved or rejected already, expired, or
// its run finished. When the run waits for it, the resolution resumes the run: it is
// journaled, with the run's River job, in one transaction, and the run is invoked from
// this process once it commits.
func (c *Callbacks) Resolve(ctx context.Context, db *journal.TenantDB, ref CallbackRef, res journal.Resolution) (*journal.Callback, error) {
	inv := c.inv
	if ref.Token != "" {
		res.By = nil
		return inv.resolveCallback(ctx, inv.pool, journal.CallbackRef{TokenHash: journal.HashToken(ref.Token)}, res)
	}
	if res.By == nil || db == nil {
		return nil, errors.New("invoker: resolving a callback by its run and name needs the caller's tenant and identity")
	}
	return inv.resolveCallback(ctx, db, journal.CallbackRef{Tenant: db.Tenant(), RunID: ref.RunID, Name: ref.Name}, res)
}

func (inv *Invoker) resolveCallback(ctx context.Context, db interface {
	Begin(context.Context) (pgx.Tx, error)
}, ref journal.CallbackRef, res journal.Resolution) (*journal.Callback, error) {
	var cb *journal.Callback
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		var err error
		if cb, err = journal.ResolveCallback(ctx, tx, ref, res); err != nil || !cb.Woken {
			return err
		}
		return inv.enqueue(ctx, tx, cb.RunID)
	})
	if err != nil {
		return nil, err
	}
	if cb.Woken {
		inv.wake(cb.RunID, nil, 0)
	}
	return cb, nil
}

// Open returns the callbacks of a run of db's tenant that a POST to their URL
// would resolve now, with their URLs in clear (journal.OpenCallbacks): for a caller, id,
// allowed to resolve them by name, who hands one on. journal.ErrNotFound: no such run;
// a *journal.ResumeForbiddenError: the run's revision does not let id resolve them.
func (c *Callbacks) Open(ctx context.Context, db *journal.TenantDB, runID string, id journal.Identity) ([]journal.OpenCallback, bool, error) {
	inv := c.inv
	key, err := inv.callbackKeyOf(ctx)
	if err != nil {
		return nil, false, err
	}
	return journal.OpenCallbacks(ctx, db, key, db.Tenant(), runID, id)
}

// callbackKeyOf returns the deployment's callback key (journal.CallbackKey), read from
// the database the first time. It never changes.
func (inv *Invoker) callbackKeyOf(ctx context.Context) (journal.CallbackKey, error) {
	inv.callbackKeyMu.Lock()
	defer inv.callbackKeyMu.Unlock()
	if inv.callbackKey == nil {
		k, err := journal.LoadCallbackKey(ctx, inv.pool)
		if err != nil {
			return nil, err
		}
		inv.callbackKey = k
	}
	return inv.callbackKey, nil
}
