"""``kubectl slipway``: the kubectl plugin of Slipway (console script ``kubectl-slipway``).

- ``view.py``: pure functions over the objects' dicts: kinds, the lifecycle tree and its text,
  what a ``wait`` sees, whether a manual action applies in the current phase.
- ``main.py``: arguments, the Kubernetes client (kubeconfig, context, namespace) and the commands.
"""
