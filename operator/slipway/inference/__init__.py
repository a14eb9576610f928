"""InferenceDeployment: its model (model), the children it makes (build, operatorfields), the pass
that reconciles it (handler) with its restore from MLflow (adopt), the rollout state machine
(rollout), traffic routers (traffic), analysis sources (providers) and canary evaluation (analysis),
and what MLflow's registry and rollback records say (registry, rollbacks)."""
