// Command etcd is the etcd server, built from go.etcd.io/etcd/server/v3 through the module proxy.
//
// The etcd server module carries replace directives, so it cannot be go-installed; this
// wrapper's only job is to be a main module that requires it and calls its entry point.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
