// Module pause is the pod sandbox ("infra") process used by the locally built pause image.
module snapshotjob.local/hack/kube/pause

go 1.24.0
