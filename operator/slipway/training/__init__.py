"""TrainingRun: its model (model), the children it makes (build: the Job or JobSet, the checkpoint
claim), what its status says (state, kueue, mlflowrun), the pass that reconciles it (handler) with
its re-apply adoption (adopt), queue place and quota (queue, queueposition, queuequota), cost
(cost) and GPU sizing (sizing)."""
