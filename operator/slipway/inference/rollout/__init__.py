"""The rollout state machine of an InferenceDeployment (pure).

Input: what is observed (the revision the spec asks for, the stable and canary Deployments and
their pods' problems, the previous status, annotations, the clock and, when one was run, the
latest analysis). Output: a Plan — what each track should serve, how many canary pods, whether
to analyse now, the registry updates decided, and the new status. Everything is recomputed on
each pass, so an operator restart at any step carries on from that step.

A revision is the served pod template (model name, version and URI, image, command, args, env,
resources, port) identified by a hash: any new revision is canaried, a new model version being
one case. Each step splits spec.replicas (the HPA's) between the tracks within
``maxSurgeReplicas`` and ``maxUnavailableReplicas``; the traffic router of spec.traffic.mode
(``slipway.inference.traffic``), handed in with what is observed (``Observed.router``), plans the
split and says what share the canary carries: this package looks up no router and never asks
which one it has. ``progressDeadlineSeconds`` counts time without
progress, never a step's age. Promotion is guarded: the stable's roll is watched and reverted
if it does not complete. Decisions (rollback, promotion) are written to status first; MLflow
alias moves and tags follow as pending registry updates, retried until MLflow has them.

One module per concern, each importing only those above it:

- ``base``: what is observed and decided (Desired, Track, Observed, Plan), the annotations;
- ``budget``: each pass's move of the tracks' replica counts within the surge budget;
- ``records``: the MLflow updates and rollback records a plan carries;
- ``settled``: the first revision, a settled stable, a degraded one;
- ``bake``: the bake after a promotion;
- ``cadence``: when a canary's next analysis is due;
- ``canary``: the steps of a canary;
- ``promotion``: the guarded promotion;
- ``planner``: :func:`plan`, which case a pass is in;
- ``tracks``: the tracks as read from their Deployments and written to status.
"""
