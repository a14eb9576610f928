"""``kubectl slipway``: the kubectl plugin of Slipway (console script ``kubectl-slipway``).

Pure, over the objects' dicts (no I/O):

- ``refs.py``: the kinds it knows and how a command line names an object (``idep/digits``, ...);
- ``tree.py``: the lifecycle tree one object belongs to;
- ``render.py``: the tree as text, with each object's details;
- ``view.py``: what a ``wait`` sees, and whether a manual action applies in the current phase.

And around them:

- ``args.py``: the commands, their flags and help, and the exit codes;
- ``client.py``: the API server (kubeconfig, context, namespace), reads, lists and a watched cache;
- ``main.py``: runs the commands.
"""
