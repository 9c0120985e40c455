// Module runccapfilter is a runc front end for sandboxes whose capability bounding set is
// smaller than the full set (see main.go).
module snapshotjob.local/hack/kube/runccapfilter

go 1.24.0
