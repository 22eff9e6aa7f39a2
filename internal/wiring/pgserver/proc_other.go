//go:build !linux

package pgserver

import "syscall"

// sysProcAttr makes a server's process run as cred (nil: as the caller). Other systems
// than Linux have no parent-death signal: a server outlives a caller that is killed
// (SIGKILL), and Start on its directory then reports it running.
func sysProcAttr(cred *syscall.Credential) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{
		Credential: cred,
		// A terminal's Ctrl-C reaches the caller only, who stops the server last.
		Setpgid: true,
	}
}

// exited reports false: without Linux's waitid(WNOWAIT), a server that exits during
// its start is seen only when waiting for it to accept connections times out.
func exited(int) bool { return false }

// runsIn reports true: without /proc, a live process named by postmaster.pid is taken
// for a server on dir (Start refuses to start), lest two servers share its data.
func runsIn(int, string) bool { return true }

// processesIn returns none: without /proc, the orphans of a killed server are not
// waited for (postgres refuses to start while they hold its shared memory).
func processesIn(string) ([]int, error) { return nil, nil }
