-- Argo CD action "resume" of a TrainingRun: spec.suspend=false; the operator resumes its Job from the
-- last checkpoint. Nothing to do when it is not suspended.
if (obj.spec or {}).suspend ~= true then
  return obj
end
obj.spec.suspend = false
return obj
