package gateway

import (
	"context"
	"net/http"

	"github.com/stepgate/stepgate/gateway/api/server"
)

// The operations below are declared in openapi.yaml and being built; until then they
// answer 501 rather than pretend.

func notImplemented() error {
	return &problemError{http.StatusNotImplemented, "not implemented yet"}
}

// CancelRun is not implemented yet.
func (s *Server) CancelRun(context.Context, server.CancelRunRequestObject) (server.CancelRunResponseObject, error) {
	return nil, notImplemented()
}

// RerunRun is not implemented yet.
func (s *Server) RerunRun(context.Context, server.RerunRunRequestObject) (server.RerunRunResponseObject, error) {
	return nil, notImplemented()
}

// StreamRuns is not implemented yet.
func (s *Server) StreamRuns(context.Context, server.StreamRunsRequestObject) (server.StreamRunsResponseObject, error) {
	return nil, notImplemented()
}

// FunctionStats is not implemented yet.
func (s *Server) FunctionStats(context.Context, server.FunctionStatsRequestObject) (server.FunctionStatsResponseObject, error) {
	return nil, notImplemented()
}
