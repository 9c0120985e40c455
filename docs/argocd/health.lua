-- Argo CD health check of a snapshotjob.io SnapshotJob (docs/guides/gitops.md).
--
-- Argo CD runs this with the live object as `obj` and reads `status` (Healthy, Progressing,
-- Degraded, Suspended, Unknown) and `message` of the table it returns. It reads only what the
-- operator writes (snapshotjob_contract/conditions.py, operator/.../reconcile/conditions.py):
-- status.observedGeneration, status.phase and the conditions Ready, Progressing, Degraded,
-- SnapshotHealthy and StoreReady. The message is "<reason>: <message>" of the condition that
-- explains the health. Written for Lua 5.1 (Argo CD's gopher-lua) and later.
--
-- The single source: hack/render_argocd_cm.py embeds this file in argocd-cm.yaml, and
-- tests/unit/operator/test_argocd_health.py fails when the two differ.

local hs = {}

local function condition(status, kind)
  if type(status.conditions) ~= "table" then
    return nil
  end
  for _, found in ipairs(status.conditions) do
    if type(found) == "table" and found.type == kind then
      return found
    end
  end
  return nil
end

local function holds(found)
  return found ~= nil and found.status == "True"
end

-- "<reason>: <message>", or whichever of the two the condition has.
local function explain(found, fallback)
  if found == nil then
    return fallback
  end
  local reason = found.reason or ""
  local message = found.message or ""
  if reason == "" then
    return message ~= "" and message or fallback
  end
  if message == "" then
    return reason
  end
  return reason .. ": " .. message
end

-- A generation as an integer: gopher-lua's numbers are floats, Lua 5.3+ has integers.
local function integer(value)
  if type(value) == "number" then
    return string.format("%d", value)
  end
  return tostring(value)
end

local metadata = obj.metadata or {}
if metadata.deletionTimestamp ~= nil then
  hs.status = "Progressing"
  hs.message = "Being deleted: the operator stops the driver and destroys the job's snapshots"
  return hs
end

local status = obj.status
if type(status) ~= "table" or status.phase == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for the operator to report the job's status"
  return hs
end

-- A status older than the spec says nothing about the spec: the operator has not acted on it.
local generation = metadata.generation
local observed = status.observedGeneration
if type(generation) == "number" and (type(observed) ~= "number" or observed < generation) then
  hs.status = "Progressing"
  local seen = "none"
  if type(observed) == "number" then
    seen = integer(observed)
  end
  hs.message = "The operator has not yet seen generation " .. integer(generation) ..
    " (status.observedGeneration " .. seen .. ")"
  return hs
end

local phase = status.phase
local ready = condition(status, "Ready")
local progressing = condition(status, "Progressing")
local degraded = condition(status, "Degraded")
local snapshots = condition(status, "SnapshotHealthy")
local store = condition(status, "StoreReady")

-- The operator's own verdict first: failed, restarting after failures, suspended on failure,
-- a spec it cannot apply, Pods that cannot start, an export that failed.
if holds(degraded) then
  hs.status = "Degraded"
  hs.message = explain(degraded, "Degraded")
  return hs
end

if phase == "FAILED" then
  -- A cancelled job (exportSnapshot.cancelJob) is FAILED only because Jet says so: the
  -- operator reports nothing to repair (Degraded False), and a spec change starts it again.
  if ready ~= nil and ready.reason == "Cancelled" then
    hs.status = "Suspended"
  else
    hs.status = "Degraded"
  end
  hs.message = explain(ready, "Job is FAILED")
  return hs
end

if phase == "COMPLETED" then
  hs.status = "Healthy"
  hs.message = explain(ready, "Completed: pipeline finished")
  return hs
end

if phase == "RUNNING" and holds(ready) then
  hs.status = "Healthy"
  hs.message = explain(ready, "Running")
  if snapshots ~= nil and snapshots.status == "False" then
    -- Still running: the restore point is old or the last snapshot failed.
    hs.message = hs.message .. "; " .. explain(snapshots, "SnapshotHealthy False")
  end
  return hs
end

if phase == "SUSPENDED" and holds(ready) then
  hs.status = "Suspended"
  hs.message = explain(ready, "Suspended")
  return hs
end

local moving = {
  NOT_RUNNING = true,
  STARTING = true,
  RUNNING = true,
  SUSPENDED = true,
  SUSPENDED_EXPORTING_SNAPSHOT = true,
  COMPLETING = true,
  RESTARTING = true,
}
if moving[phase] then
  hs.status = "Progressing"
  local between = phase == "NOT_RUNNING" or phase == "RESTARTING" or phase == "SUSPENDED"
  if between and store ~= nil and store.status ~= "True" then
    -- No execution starts until the store allows it.
    hs.message = explain(store, "Waiting for the snapshot store")
  elseif holds(progressing) then
    hs.message = explain(progressing, "Job is " .. phase)
  else
    hs.message = explain(ready, "Job is " .. phase)
  end
  return hs
end

hs.status = "Unknown"
hs.message = "Unknown phase " .. tostring(phase)
return hs
