-- Argo CD action "pause" of an InferenceDeployment, as `kubectl slipway pause`: hold the rollout at
-- its current step, spec.rollout.paused=true (the phase becomes Paused; a paused rollout never times
-- out). Nothing to do when it is already paused.
if ((obj.spec or {}).rollout or {}).paused == true then
  return obj
end
if obj.spec == nil then
  obj.spec = {}
end
if obj.spec.rollout == nil then
  obj.spec.rollout = {}
end
obj.spec.rollout.paused = true
return obj
