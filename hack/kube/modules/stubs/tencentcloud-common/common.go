// Package common stands in for the Tencent Cloud SDK's package of the same name, whose module
// is not on the Go module proxy. flanneld links it only for its tencent-vpc backend, which the
// testbed never selects (it runs host-gw); these are the helpers that backend calls.
package common

// StringPtr returns a pointer to s.
func StringPtr(s string) *string { return &s }

// StringPtrs returns pointers to each of ss.
func StringPtrs(ss []string) []*string {
	out := make([]*string, len(ss))
	for i := range ss {
		out[i] = &ss[i]
	}
	return out
}

// BoolPtr returns a pointer to b.
func BoolPtr(b bool) *bool { return &b }
