"""The node agent: localkube's kubelet.

It registers a Node with fake GPU capacity, keeps its Lease and Ready condition
fresh, and runs the pods the real scheduler binds to it as local processes
(first container only), each on its own loopback address and in its own mount
namespace. Run it as ``python -m localkube.nodeagent``.
"""
