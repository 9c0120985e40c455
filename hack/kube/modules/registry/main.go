// Command registry is the CNCF distribution registry (github.com/distribution/distribution/v3),
// built through the Go module proxy for the test bed's OCI registry (hack/kube/registry.sh).
//
// Upstream's cmd/registry is this same entry point with every storage driver linked in; the
// test bed stores on the local filesystem only, so linking the Azure, GCS and S3 SDKs would
// only cost build time (minutes on two cores). Authentication: htpasswd (basic auth).
package main

import (
	"github.com/distribution/distribution/v3/registry"
	_ "github.com/distribution/distribution/v3/registry/auth/htpasswd"
	_ "github.com/distribution/distribution/v3/registry/storage/driver/filesystem"
	_ "github.com/distribution/distribution/v3/registry/storage/driver/inmemory"
)

func main() {
	// RootCmd's two commands (serve, garbage-collect) exit non-zero themselves on failure.
	_ = registry.RootCmd.Execute()
}
