// Command coredns is CoreDNS with its default plugin set, built from the Go module proxy.
//
// Importing core/plugin registers every in-tree plugin (kubernetes, forward, cache, ...) in
// the order CoreDNS' own plugin.cfg defines; coremain.Run is the upstream entry point.
package main

import (
	_ "github.com/coredns/coredns/core/plugin"
	"github.com/coredns/coredns/coremain"
)

func main() {
	coremain.Run()
}
