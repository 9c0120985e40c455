#!/bin/bash
# Write this node's CNI config from flanneld's lease, and keep it current.
#
# Why: flannel's own CNI plugin (github.com/flannel-io/cni-plugin) is not on the Go module
# proxy, so nothing turns /run/flannel/subnet.env into a per-node network at Pod-creation
# time. This loop does it ahead of time instead: it renders the node's subnet into a
# bridge + host-local conflist (plugins the kind node image ships), which is what the flannel
# plugin would delegate to. kubelet reports the node Ready once the file exists.
#
# Runs as the second container of the flannel DaemonSet (hack/kube/flannel/manifest.yaml).
set -euo pipefail

SUBNET_ENV="${SUBNET_ENV:-/run/flannel/subnet.env}"
CNI_CONF="${CNI_CONF:-/etc/cni/net.d/10-flannel.conflist}"

log() { printf '%s %s\n' "$(date -u +%FT%TZ)" "$*" >&2; }

# network_of 10.244.1.1/24 -> 10.244.1.0/24 (host-local wants the network address).
network_of() {
  local ip="${1%/*}" len="${1#*/}" a b c d n mask
  IFS=. read -r a b c d <<<"${ip}"
  n=$(( (a << 24) | (b << 16) | (c << 8) | d ))
  mask=$(( len == 0 ? 0 : (0xffffffff << (32 - len)) & 0xffffffff ))
  n=$(( n & mask ))
  echo "$(( (n >> 24) & 255 )).$(( (n >> 16) & 255 )).$(( (n >> 8) & 255 )).$(( n & 255 ))/${len}"
}

render() {
  local FLANNEL_NETWORK="" FLANNEL_SUBNET="" FLANNEL_MTU=1500 FLANNEL_IPMASQ=false
  # shellcheck source=/dev/null
  source "${SUBNET_ENV}"
  [[ -n "${FLANNEL_SUBNET}" ]] || return 1
  # flanneld masquerades itself when run with --ip-masq; the bridge then must not.
  local bridge_masq=true
  [[ "${FLANNEL_IPMASQ}" == true ]] && bridge_masq=false
  cat <<JSON
{
  "cniVersion": "0.4.0",
  "name": "flannel-hostgw",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "cni0",
      "mtu": ${FLANNEL_MTU},
      "isGateway": true,
      "isDefaultGateway": true,
      "ipMasq": ${bridge_masq},
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": "$(network_of "${FLANNEL_SUBNET}")", "gateway": "${FLANNEL_SUBNET%/*}"}]]
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
JSON
}

last=""
while true; do
  if [[ -s "${SUBNET_ENV}" ]]; then
    conf="$(render || true)"
    if [[ -n "${conf}" && "${conf}" != "${last}" ]]; then
      printf '%s\n' "${conf}" >"${CNI_CONF}.tmp"
      mv -f "${CNI_CONF}.tmp" "${CNI_CONF}"
      last="${conf}"
      log "Wrote CNI config path=${CNI_CONF} subnet=$(grep FLANNEL_SUBNET "${SUBNET_ENV}" | cut -d= -f2)"
    fi
  fi
  sleep 5
done
