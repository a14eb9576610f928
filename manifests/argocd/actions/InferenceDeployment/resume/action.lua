-- Argo CD action "resume" of an InferenceDeployment, as `kubectl slipway resume`: continue a paused
-- rollout, spec.rollout.paused=false. Nothing to do when it is not paused.
if ((obj.spec or {}).rollout or {}).paused ~= true then
  return obj
end
obj.spec.rollout.paused = false
return obj
