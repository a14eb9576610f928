-- Argo CD action "abort" of an InferenceDeployment, as `kubectl slipway abort`: roll the canary back
-- now, or revert a promotion or a bake in progress, by the annotation slipway.dev/abort=true. Refused
-- unless a canary is in flight or the phase is Promoting or Baking; nothing to do while the annotation
-- is set.
local annotation = "slipway.dev/abort"
local status = obj.status or {}
local phase = status.phase
local requested = (obj.metadata.annotations or {})[annotation]
if requested ~= nil and requested ~= "" then
  return obj
end
local revision = (status.canary or {}).revision
local in_flight = (phase == "Progressing" or phase == "Analyzing" or phase == "Paused")
  and revision ~= nil and revision ~= ""
if not (in_flight or phase == "Promoting" or phase == "Baking") then
  error("InferenceDeployment " .. tostring(obj.metadata.namespace) .. "/" .. obj.metadata.name
    .. " has no canary in flight, promotion or bake to abort (phase " .. tostring(phase or "not set yet") .. ")", 0)
end
if obj.metadata.annotations == nil then
  obj.metadata.annotations = {}
end
obj.metadata.annotations[annotation] = "true"
return obj
