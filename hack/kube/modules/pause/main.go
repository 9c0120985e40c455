// Command pause is the pod sandbox process: it holds a pod's namespaces open and does nothing.
//
// The upstream pause image is a tiny C program pulled from a registry; this machine has no
// registry, so the pause image is built locally around this equivalent. When it runs as PID 1
// of a pod (shared PID namespace) it must reap orphaned children, and it must exit promptly
// and cleanly on SIGINT/SIGTERM so the kubelet can tear the sandbox down.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

// version is reported by `pause -v`, like the upstream binary.
var version = "snapshotjob-1"

func reapChildren() {
	for {
		var status syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
		if pid <= 0 || err != nil {
			return
		}
	}
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "-v" {
		fmt.Printf("pause.go %s\n", version)
		return
	}
	if os.Getpid() != 1 {
		fmt.Fprintln(os.Stderr, "Warning: pause should be the first process")
	}
	signals := make(chan os.Signal, 8)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for sig := range signals {
		switch sig {
		case syscall.SIGCHLD:
			reapChildren()
		default:
			fmt.Fprintf(os.Stderr, "Shutting down, got signal=%s\n", sig)
			os.Exit(0)
		}
	}
}
