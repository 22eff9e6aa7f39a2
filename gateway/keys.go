package gateway

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/stepgate/stepgate/gateway/api/server"
	"github.com/stepgate/stepgate/journal/keyring"
	"github.com/stepgate/stepgate/protocol"
	"github.com/stepgate/stepgate/protocol/signature"
)

// DefaultKeyOverlap and MaxKeyOverlap bound how long a replaced signing key keeps
// signing after a rotation.
const (
	DefaultKeyOverlap = 24 * time.Hour
	MaxKeyOverlap     = 30 * 24 * time.Hour
)

func signingKeySet(tenant string, keys []keyring.SigningKey) protocol.SigningKeySet {
	out := protocol.SigningKeySet{Tenant: tenant, Keys: make([]protocol.SigningKey, 0, len(keys))}
	for _, k := range keys {
		out.Keys = append(out.Keys, protocol.SigningKey{
			Kid: k.ID, Kty: protocol.OKP, Crv: protocol.Ed25519, Alg: protocol.EdDSA, Use: protocol.Sig,
			X: signature.FormatKey(k.PublicKey), CreatedAt: k.CreatedAt, RetiresAt: k.RetiresAt,
		})
	}
	return out
}

// ListSigningKeys answers the public keys of the caller's tenant, making its first key
// when it has none.
func (s *Server) ListSigningKeys(ctx context.Context, _ server.ListSigningKeysRequestObject) (server.ListSigningKeysResponseObject, error) {
	tenant := identity(ctx).Tenant
	keys, err := s.keys.Keys(ctx, tenant)
	if err != nil {
		return nil, err
	}
	return server.ListSigningKeys200JSONResponse(signingKeySet(tenant, keys)), nil
}

// RotateSigningKey makes a new current key for the caller's tenant.
func (s *Server) RotateSigningKey(ctx context.Context, req server.RotateSigningKeyRequestObject) (server.RotateSigningKeyResponseObject, error) {
	overlap := DefaultKeyOverlap
	if req.Params.Overlap != nil {
		d, err := time.ParseDuration(*req.Params.Overlap)
		if err != nil || d < 0 || d > MaxKeyOverlap {
			return nil, badRequest("overlap %q is not a duration from 0s to %s, such as 24h", *req.Params.Overlap, fmtDuration(MaxKeyOverlap))
		}
		overlap = d
	}
	id := identity(ctx)
	keys, err := s.keys.Rotate(ctx, id.Tenant, overlap)
	if errors.Is(err, keyring.ErrTooManyKeys) {
		return server.RotateSigningKey409ApplicationProblemPlusJSONResponse{ConflictApplicationProblemPlusJSONResponse: conflict(fmt.Sprintf(
			"tenant %q already has %d keys that sign (the current one and those in their overlap); rotate again once the oldest retires",
			id.Tenant, keyring.MaxSigningKeys))}, nil
	}
	if err != nil {
		return nil, err
	}
	s.log.InfoContext(ctx, "signing key rotated", "tenant", id.Tenant, "kid", keys[0].ID, "overlap", overlap.String(), "by", id.Subject)
	return server.RotateSigningKey200JSONResponse(signingKeySet(id.Tenant, keys)), nil
}

// ListSigningSecrets answers the HMAC secrets of the caller's tenant.
func (s *Server) ListSigningSecrets(ctx context.Context, _ server.ListSigningSecretsRequestObject) (server.ListSigningSecretsResponseObject, error) {
	tenant := identity(ctx).Tenant
	keys, err := s.keys.Keys(ctx, tenant)
	if err != nil {
		return nil, err
	}
	out := protocol.SigningSecretList{Tenant: tenant, Secrets: make([]protocol.SigningSecret, 0, len(keys))}
	for _, k := range keys {
		out.Secrets = append(out.Secrets, protocol.SigningSecret{
			Kid: k.ID, Secret: signature.FormatKey(k.HMACSecret), CreatedAt: k.CreatedAt, RetiresAt: k.RetiresAt,
		})
	}
	return server.ListSigningSecrets200JSONResponse(out), nil
}

// fmtDuration writes d the short way: 720h and 1m, not 720h0m0s and 1m0s.
func fmtDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}
