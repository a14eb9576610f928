-- Argo CD resource actions of a TrainingRun: suspend and resume set spec.suspend (the only field of a
-- started run's spec that may change). Suspend stops the pods and keeps the checkpoint; it is disabled
-- when the run is suspended already or has finished (Succeeded, Failed). Resume is enabled while
-- spec.suspend is true.
local suspended = (obj.spec or {}).suspend == true
local phase = (obj.status or {}).phase
local actions = {}
actions["suspend"] = {disabled = suspended or phase == "Succeeded" or phase == "Failed"}
actions["resume"] = {disabled = not suspended}
return actions
