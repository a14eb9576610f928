-- Argo CD action "retry" of an InferenceDeployment, as `kubectl slipway retry`: roll out again the
-- revision that was rolled back, by the annotation slipway.dev/retry=true. Refused unless the phase is
-- RolledBack and that rollback was not retried yet; nothing to do while the annotation is set.
local annotation = "slipway.dev/retry"
local status = obj.status or {}
local phase = status.phase
local requested = (obj.metadata.annotations or {})[annotation]
if requested ~= nil and requested ~= "" then
  return obj
end
local where = "InferenceDeployment " .. tostring(obj.metadata.namespace) .. "/" .. obj.metadata.name
local rollback = status.lastRollback or {}
local rolled = tostring(rollback.modelName or "?") .. " v" .. tostring(rollback.modelVersion or "-")
if next(rollback) == nil then
  error(where .. ": nothing was rolled back, so there is nothing to retry", 0)
end
if rollback.retried then
  error(where .. ": the rollback of " .. rolled .. " was already retried; publish a new version or change the spec", 0)
end
if phase ~= "RolledBack" then
  error(where .. " is " .. tostring(phase) .. ": its last rollback (" .. rolled
    .. ") is not what the spec asks for now, so there is nothing to retry", 0)
end
if obj.metadata.annotations == nil then
  obj.metadata.annotations = {}
end
obj.metadata.annotations[annotation] = "true"
return obj
