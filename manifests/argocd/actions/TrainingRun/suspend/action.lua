-- Argo CD action "suspend" of a TrainingRun: spec.suspend=true; the operator suspends its Job, the
-- pods stop and the checkpoint is kept. Refused once the run has finished; nothing to do when it is
-- suspended already.
if (obj.spec or {}).suspend == true then
  return obj
end
local phase = (obj.status or {}).phase
if phase == "Succeeded" or phase == "Failed" then
  error("TrainingRun " .. tostring(obj.metadata.namespace) .. "/" .. obj.metadata.name .. " has finished ("
    .. phase .. "): there is nothing to suspend", 0)
end
if obj.spec == nil then
  obj.spec = {}
end
obj.spec.suspend = true
return obj
