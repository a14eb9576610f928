-- Argo CD resource actions of an InferenceDeployment, the ones `kubectl slipway` runs: promote, abort
-- and retry set the annotation slipway.dev/<action>=true (the operator acts, then removes it); pause
-- and resume set spec.rollout.paused. An action is disabled where the plugin would refuse it or do
-- nothing: its annotation is already set, or the phase gives it nothing to act on.
local status = obj.status or {}
local phase = status.phase
local annotations = obj.metadata.annotations or {}
local function set(value)
  return value ~= nil and value ~= ""
end
local canary = status.canary or {}
local in_flight = (phase == "Progressing" or phase == "Analyzing" or phase == "Paused") and set(canary.revision)
local rollback = status.lastRollback or {}
local retriable = next(rollback) ~= nil and not rollback.retried and phase == "RolledBack"
local paused = ((obj.spec or {}).rollout or {}).paused == true
local actions = {}
actions["promote"] = {disabled = set(annotations["slipway.dev/promote"]) or not in_flight}
actions["abort"] = {disabled = set(annotations["slipway.dev/abort"])
  or not (in_flight or phase == "Promoting" or phase == "Baking")}
actions["retry"] = {disabled = set(annotations["slipway.dev/retry"]) or not retriable}
actions["pause"] = {disabled = paused}
actions["resume"] = {disabled = not paused}
return actions
