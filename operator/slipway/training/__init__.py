"""TrainingRun: its model (model), the children it makes (build: the Job or JobSet; claim: the
checkpoint claim; gate: the MLflow run gate), what its status says (state, kueue, mlflowrun), the pass
that reconciles it (handler: observe, then the pure decisions of decide over the records of records,
then apply; runread reads its MLflow run) with its re-apply adoption (adopt), queue place and quota
(queue, queueposition, queuequota), cost (cost, and the attempt ledger: attempts) and GPU sizing
(sizing); what it registers with the frame (register) and the pods and Workloads that wake it
(watches)."""
