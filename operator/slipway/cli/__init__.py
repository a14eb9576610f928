"""``kubectl slipway``: the kubectl plugin of Slipway (console script ``kubectl-slipway``, or the
single file ``make plugin`` builds: it imports only the standard library and the pure modules
below, and makes its API requests through ``kubectl``).

Pure, over the objects' dicts (no I/O):

- ``refs.py``: the kinds it knows and how a command line names an object (``idep/digits``, ...);
- ``tree.py``: the lifecycle tree one object belongs to;
- ``render.py``: the tree as text, with each object's details;
- ``view.py``: what a ``wait`` sees, and whether a manual action applies in the current phase;
- ``listing.py``: the lines of ``list``; ``history.py``: the rows of ``history``; ``versions.py``:
  the operator's version from its Deployment;
- ``output.py``: ``-o json|yaml``; ``completion.py``: the shell completion scripts.

And around them:

- ``args.py``: the commands, their flags and help, and the exit codes;
- ``client.py``: the API server through kubectl (kubeconfig, context, namespace), reads, lists, patches;
- ``cache.py``: the watched objects ``get --watch`` and ``wait`` follow;
- ``main.py``: parses, connects, runs ``get`` and ``wait``; ``overview.py``: ``list``, ``history``,
  ``version``; ``steer.py``: ``promote``, ``abort``, ``retry``, ``pause``, ``resume``.
"""
