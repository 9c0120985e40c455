// Empty stand-in: see hack/kube/modules/kubernetes/go.mod.
module k8s.io/sample-apiserver

go 1.24.0
