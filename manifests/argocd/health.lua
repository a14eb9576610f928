-- Argo CD health of Slipway's kinds (TrainingRun, ModelArtifact, InferenceDeployment), read from
-- their kstatus conditions and phase. Installed by argocd-cm.yaml beside this file. Statuses:
-- Healthy, Progressing, Degraded, Suspended (a suspended run or a paused rollout).
local hs = {status = "Progressing", message = "waiting for Slipway to report status"}
if obj.status == nil then
  return hs
end
local generation = obj.metadata.generation
if generation ~= nil and obj.status.observedGeneration ~= generation then
  hs.message = "waiting for Slipway to observe generation " .. tostring(generation)
  return hs
end
local conditions = {}
if obj.status.conditions ~= nil then
  for _, condition in ipairs(obj.status.conditions) do
    conditions[condition.type] = condition
  end
end
local function is_true(kind)
  return conditions[kind] ~= nil and conditions[kind].status == "True"
end
local function message_of(kind)
  local condition = conditions[kind]
  if condition == nil or condition.message == nil or condition.message == "" then
    return obj.status.phase or kind
  end
  return condition.message
end
local phase = obj.status.phase
if is_true("Stalled") then
  hs.status = "Degraded"
  hs.message = message_of("Stalled")
elseif phase == "Failed" or phase == "Rejected" or phase == "RolledBack" then
  hs.status = "Degraded"
  hs.message = message_of("Ready")
elseif is_true("Degraded") then
  hs.status = "Degraded"
  hs.message = message_of("Degraded")
elseif is_true("Reconciling") then
  hs.status = "Progressing"
  hs.message = message_of("Reconciling")
elseif is_true("Ready") then
  hs.status = "Healthy"
  hs.message = message_of("Ready")
elseif phase == "Suspended" or phase == "Paused" then
  hs.status = "Suspended"
  hs.message = message_of("Ready")
else
  hs.message = message_of("Ready")
end
return hs
