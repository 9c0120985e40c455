// Command runc-capfilter runs the real runc after removing, from the OCI spec it is given,
// every capability that this process's own bounding set lacks.
//
// Why: some sandboxes (this project's CI machines among them) run Docker with a bounding
// set that lacks a capability such as CAP_SYS_RESOURCE. `docker run --privileged` (which
// kind uses for its node containers) and `docker exec --privileged` ask runc for *every*
// capability, runc cannot raise one it does not hold, and the container fails with
// "unable to apply caps: operation not permitted". Filtering the request down to what the
// host can grant makes privileged containers work with the capabilities that exist.
//
// Docker uses it as a runtime: dockerd --add-runtime capfilter=<path> --default-runtime
// capfilter (hack/kube/lib.sh does this only where the bounding set is incomplete). The
// real runc is RUNC_CAPFILTER_RUNC, else /usr/sbin/runc, else /usr/bin/runc.
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// capNames indexes Linux capability numbers (linux/capability.h) to their OCI names.
var capNames = []string{
	"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_DAC_READ_SEARCH", "CAP_FOWNER", "CAP_FSETID",
	"CAP_KILL", "CAP_SETGID", "CAP_SETUID", "CAP_SETPCAP", "CAP_LINUX_IMMUTABLE",
	"CAP_NET_BIND_SERVICE", "CAP_NET_BROADCAST", "CAP_NET_ADMIN", "CAP_NET_RAW",
	"CAP_IPC_LOCK", "CAP_IPC_OWNER", "CAP_SYS_MODULE", "CAP_SYS_RAWIO", "CAP_SYS_CHROOT",
	"CAP_SYS_PTRACE", "CAP_SYS_PACCT", "CAP_SYS_ADMIN", "CAP_SYS_BOOT", "CAP_SYS_NICE",
	"CAP_SYS_RESOURCE", "CAP_SYS_TIME", "CAP_SYS_TTY_CONFIG", "CAP_MKNOD", "CAP_LEASE",
	"CAP_AUDIT_WRITE", "CAP_AUDIT_CONTROL", "CAP_SETFCAP", "CAP_MAC_OVERRIDE",
	"CAP_MAC_ADMIN", "CAP_SYSLOG", "CAP_WAKE_ALARM", "CAP_BLOCK_SUSPEND", "CAP_AUDIT_READ",
	"CAP_PERFMON", "CAP_BPF", "CAP_CHECKPOINT_RESTORE",
}

// missingCaps returns the names of known capabilities absent from our bounding set.
func missingCaps() (map[string]bool, error) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	scanner := bufio.NewScanner(f)
	for scanner.Scan() {
		line := scanner.Text()
		if !strings.HasPrefix(line, "CapBnd:") {
			continue
		}
		mask, err := strconv.ParseUint(strings.TrimSpace(strings.TrimPrefix(line, "CapBnd:")), 16, 64)
		if err != nil {
			return nil, err
		}
		missing := map[string]bool{}
		for i, name := range capNames {
			if mask&(1<<uint(i)) == 0 {
				missing[name] = true
			}
		}
		return missing, nil
	}
	return nil, fmt.Errorf("no CapBnd line in /proc/self/status")
}

// filterCaps removes missing capabilities from an OCI "capabilities" object in place.
func filterCaps(caps map[string]any, missing map[string]bool) {
	for set, raw := range caps {
		list, ok := raw.([]any)
		if !ok {
			continue
		}
		kept := make([]any, 0, len(list))
		for _, c := range list {
			if name, ok := c.(string); ok && missing[name] {
				continue
			}
			kept = append(kept, c)
		}
		caps[set] = kept
	}
}

// rewrite filters the capabilities of a config.json (process nested) or process.json file.
func rewrite(path string, nested bool, missing map[string]bool) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var doc map[string]any
	if err := dec.Decode(&doc); err != nil {
		return err
	}
	process := doc
	if nested {
		p, ok := doc["process"].(map[string]any)
		if !ok {
			return nil
		}
		process = p
	}
	caps, ok := process["capabilities"].(map[string]any)
	if !ok {
		return nil
	}
	filterCaps(caps, missing)
	out, err := json.Marshal(doc)
	if err != nil {
		return err
	}
	info, err := os.Stat(path)
	if err != nil {
		return err
	}
	return os.WriteFile(path, out, info.Mode().Perm())
}

// flagValue finds the value of --name/-short in args (both "--x v" and "--x=v" forms).
func flagValue(args []string, long, short string) string {
	for i, a := range args {
		for _, name := range []string{long, short} {
			if name == "" {
				continue
			}
			if a == name && i+1 < len(args) {
				return args[i+1]
			}
			if strings.HasPrefix(a, name+"=") {
				return strings.TrimPrefix(a, name+"=")
			}
		}
	}
	return ""
}

func realRunc() string {
	if p := os.Getenv("RUNC_CAPFILTER_RUNC"); p != "" {
		return p
	}
	for _, p := range []string{"/usr/sbin/runc", "/usr/bin/runc", "/usr/local/sbin/runc.real"} {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return "runc"
}

func subcommand(args []string) string {
	for _, a := range args {
		switch a {
		case "create", "run", "exec":
			return a
		}
	}
	return ""
}

func main() {
	args := os.Args[1:]
	if missing, err := missingCaps(); err == nil && len(missing) > 0 {
		var rerr error
		switch subcommand(args) {
		case "create", "run":
			bundle := flagValue(args, "--bundle", "-b")
			if bundle == "" {
				bundle, _ = os.Getwd()
			}
			rerr = rewrite(filepath.Join(bundle, "config.json"), true, missing)
		case "exec":
			if proc := flagValue(args, "--process", "-p"); proc != "" {
				rerr = rewrite(proc, false, missing)
			}
		}
		if rerr != nil {
			fmt.Fprintf(os.Stderr, "runc-capfilter: cannot filter capabilities: %v\n", rerr)
		}
	}
	runc := realRunc()
	if err := syscall.Exec(runc, append([]string{runc}, args...), os.Environ()); err != nil {
		fmt.Fprintf(os.Stderr, "runc-capfilter: exec %s: %v\n", runc, err)
		os.Exit(127)
	}
}
