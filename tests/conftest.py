"""Shared pytest configuration: the local cluster fixtures (cluster, kube_api, namespace)."""

pytest_plugins = ["localkube.pytest_plugin"]
