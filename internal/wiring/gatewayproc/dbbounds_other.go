//go:build !linux

package gatewayproc

import "time"

// userTimeout does nothing: TCP_USER_TIMEOUT is Linux's; the keepalive probes remain.
func userTimeout(uintptr, time.Duration) error { return nil }
