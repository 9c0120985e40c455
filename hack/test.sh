#!/usr/bin/env bash
# `make test`: the static checks, then every test tier (hack/pytest.sh tests, or the
# arguments given). Meanwhile hack/e2e-prepare.sh builds the e2e images and the kind cluster
# in the background: the cluster tier runs last, so its preparation overlaps the checks and
# the unit and integration tiers instead of adding about five minutes to the run. The
# fixtures wait for it (SJ_E2E_PREPARE_PID) before they touch the cluster; a preparation that
# failed is only logged, and the fixtures then do the steps themselves and report the error.
#
# On exit the preparation is stopped if it still runs, and a cluster it created that no test
# session took over (the checks failed, or no cluster test was selected) is deleted.
set -uo pipefail
cd "$(dirname "$0")/.."
state="$(mktemp -d)"
export SJ_E2E_OWNED="${state}/owned"
setsid bash hack/e2e-prepare.sh "${SJ_E2E_OWNED}" >"${state}/prepare.log" 2>&1 </dev/null &
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
  fi
  rm -rf "${state}"
}
trap finish EXIT

make --no-print-directory check || exit $?
[[ $# -gt 0 ]] || set -- tests
bash hack/pytest.sh "$@"
