package pgserver

import (
	"fmt"
	"os"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// sysProcAttr makes a server's process run as cred (nil: as the caller) and die with
// the caller.
func sysProcAttr(cred *syscall.Credential) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{
		Credential: cred,
		// The kernel sends SIGINT (fast shutdown) when the thread that started the
		// server exits, which in Go is when the process exits. Go sets it after
		// setuid, which would clear it (see forkAndExecInChild1 in
		// syscall/exec_linux.go); TestParentDeathStopsServer checks that it holds.
		Pdeathsig: syscall.SIGINT,
		// A terminal's Ctrl-C reaches the caller only, who stops the server last.
		Setpgid: true,
	}
}

// exited reports whether the child process pid has exited, leaving it to cmd.Wait.
func exited(pid int) bool {
	var info unix.Siginfo
	// WNOWAIT leaves the child to cmd.Wait.
	err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil)
	return err == nil && info.Signo != 0
}

// runsIn reports whether process pid runs in dir, its working directory.
func runsIn(pid int, dir string) bool { return cwd(pid) == dir }

// cwd returns the working directory of process pid, or "" if it is unknown.
func cwd(pid int) string {
	dir, _ := os.Readlink("/proc/" + strconv.Itoa(pid) + "/cwd")
	return dir
}

// processesIn returns the processes whose working directory is dir.
func processesIn(dir string) ([]int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("pgserver: list processes: %w", err)
	}
	var pids []int
	for _, e := range entries {
		if pid, err := strconv.Atoi(e.Name()); err == nil && cwd(pid) == dir {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}
