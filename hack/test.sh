#!/usr/bin/env bash
# `make test`: the static checks, then every test tier (hack/pytest.sh tests in two sessions,
# see below), or the arguments given in one session. Meanwhile hack/e2e-prepare.sh builds
# the e2e images and the kind cluster in the background: the cluster tier runs last, so its
# preparation overlaps the checks and the unit and integration tiers instead of adding about
# five minutes to the run. The fixtures wait for it (SJ_E2E_PREPARE_PID) before they touch the
# cluster; a preparation that failed is only logged, and the fixtures then do the steps
# themselves and report the error.
#
# On exit the preparation is stopped if it still runs; a cluster it created that no test
# session took over (the checks failed, or no cluster test was selected) is deleted, and one
# that was already there, which it paused, is resumed.
set -uo pipefail
cd "$(dirname "$0")/.."
state="$(mktemp -d)"
export SJ_E2E_OWNED="${state}/owned"
paused="${state}/paused"
setsid bash hack/e2e-prepare.sh "${SJ_E2E_OWNED}" "${paused}" >"${state}/prepare.log" 2>&1 </dev/null &
export SJ_E2E_PREPARE_PID=$!
export SJ_E2E_PREPARE_LOG="${state}/prepare.log"

finish() {
  if kill -0 "${SJ_E2E_PREPARE_PID}" 2>/dev/null; then
    kill -- -"${SJ_E2E_PREPARE_PID}" 2>/dev/null
  fi
  wait "${SJ_E2E_PREPARE_PID}" 2>/dev/null
  local rc=$?
  if [[ "${rc}" -ne 0 ]]; then
    echo "==> The cluster tier's preparation ended rc=${rc} (the fixtures did its steps); its log:"
    tail -n 20 "${SJ_E2E_PREPARE_LOG}"
  else
    grep '^==> Cluster tier' "${SJ_E2E_PREPARE_LOG}" || true
  fi
  if [[ -s "${SJ_E2E_OWNED}" ]]; then
    echo "==> Deleting the kind cluster the preparation created and no test session used"
    bash hack/kube/cluster.sh down >/dev/null 2>&1 || true
  elif [[ -s "${paused}" ]]; then
    # A cluster that was already there, paused by the preparation: thawed as it was found
    # (nothing to do when the cluster tier resumed it).
    bash hack/kube/cluster.sh resume >/dev/null 2>&1 ||
      echo "==> Could not resume the kind cluster; run: bash hack/kube/cluster.sh resume"
  fi
  rm -rf "${state}"
}
trap finish EXIT

make --no-print-directory check || exit $?
if [[ $# -gt 0 ]]; then
  bash hack/pytest.sh "$@"
  exit $?
fi
# Every tier, in two sessions: the cluster tier (the tests marked `cluster`, last in a
# session's order anyway) in a session of its own. The first session's servers (Hazelcast
# members, PostgreSQL, Kafka, the control plane, Prometheus, s3proxy) stop when it ends; in
# one session they idled through the whole cluster tier (about a fifth of the CPU there on
# 2026-11-28, most of it the churn of the namespaces fixed in c1dbb18).
bash hack/pytest.sh -m "not cluster" tests
rc=$?
echo "==> The cluster tier, in a session of its own"
bash hack/pytest.sh -m cluster tests
cluster_rc=$?
[[ ${rc} -ne 0 ]] || rc=${cluster_rc}
exit "${rc}"
