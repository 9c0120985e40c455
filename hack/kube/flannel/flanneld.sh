#!/bin/bash
# Start flanneld, talking to the API server directly when kind told us where it is.
#
# Why: kind patches the environment variable CONTROL_PLANE_ENDPOINT (host:port of the API
# server inside the Docker network) into its default CNI's DaemonSet so the Pod network does
# not wait for kube-proxy to program the kubernetes Service. flanneld uses the in-cluster
# config, which reads KUBERNETES_SERVICE_HOST/PORT: point those at that endpoint.
set -euo pipefail
if [[ -n "${CONTROL_PLANE_ENDPOINT:-}" ]]; then
  export KUBERNETES_SERVICE_HOST="${CONTROL_PLANE_ENDPOINT%:*}"
  export KUBERNETES_SERVICE_PORT="${CONTROL_PLANE_ENDPOINT##*:}"
fi
exec /usr/local/bin/flanneld "$@"
