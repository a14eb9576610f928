-- Argo CD action "promote" of an InferenceDeployment, as `kubectl slipway promote`: skip the canary's
-- remaining steps and promote now, by the annotation slipway.dev/promote=true. Refused unless a canary
-- is in flight (Progressing, Analyzing or Paused); nothing to do while the annotation is set.
local annotation = "slipway.dev/promote"
local status = obj.status or {}
local phase = status.phase
local requested = (obj.metadata.annotations or {})[annotation]
if requested ~= nil and requested ~= "" then
  return obj
end
local revision = (status.canary or {}).revision
local in_flight = (phase == "Progressing" or phase == "Analyzing" or phase == "Paused")
  and revision ~= nil and revision ~= ""
if not in_flight then
  error("InferenceDeployment " .. tostring(obj.metadata.namespace) .. "/" .. obj.metadata.name
    .. " has no canary in flight to promote (phase " .. tostring(phase or "not set yet") .. ")", 0)
end
if obj.metadata.annotations == nil then
  obj.metadata.annotations = {}
end
obj.metadata.annotations[annotation] = "true"
return obj
