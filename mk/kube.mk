# Kubernetes testbed targets (included from the top-level Makefile).
#
# Everything heavy is cached outside the repository (~/.cache/snapshotjob/kube/<version>)
# and every target is idempotent, so running one twice is cheap. See
# docs/development/kubernetes-testbed.md for what each mode gives and how long it takes.

KUBE_HACK := hack/kube

.PHONY: kube-binaries control-plane-up control-plane-down control-plane-status \
	cluster-up cluster-down cluster-check node-image images registry-up registry-down

kube-binaries: ## build Kubernetes, etcd, CoreDNS, pause, kind, helm, flanneld and the registry from the Go module proxy
	bash $(KUBE_HACK)/build.sh

control-plane-up: kube-binaries ## etcd + kube-apiserver + controller-manager + scheduler on 127.0.0.1
	$(PY) -m testbed.controlplane up

control-plane-down: ## stop the control plane started by control-plane-up
	$(PY) -m testbed.controlplane down

control-plane-status: ## Show whether the control plane runs
	$(PY) -m testbed.controlplane status

node-image: kube-binaries ## build the kind node image locally (debootstrap rootfs + binaries built here)
	bash $(KUBE_HACK)/node-image.sh

cluster-up: kube-binaries ## a kind cluster: control plane + KIND_WORKERS workers (default 2, 0 = one node; KIND_NODE_IMAGE=stock image to skip the local build)
	bash $(KUBE_HACK)/cluster.sh up

cluster-check: ## check the kind cluster's Pod network: Pod to Pod across nodes, Service, DNS
	bash $(KUBE_HACK)/cluster.sh check

cluster-down: ## delete the kind cluster
	bash $(KUBE_HACK)/cluster.sh down

registry-up: kube-binaries ## the test bed's OCI registry (TLS, basic auth) on 127.0.0.1:5000; trusted by the kind cluster's nodes if one runs
	bash $(KUBE_HACK)/registry.sh up
	if bash $(KUBE_HACK)/cluster.sh status; then bash $(KUBE_HACK)/registry.sh connect; fi

registry-down: ## remove the registry's container (its storage and credentials stay cached)
	bash $(KUBE_HACK)/registry.sh down

images: ## debootstrap base image for the project's own images, plus the cluster-test image
	bash $(KUBE_HACK)/images.sh base testbox
