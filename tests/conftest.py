"""Shared pytest configuration. The local cluster fixtures (cluster, kube_api, namespace) come from
the plugin localkube.pytest_plugin, loaded for tests/ and e2e/tests/ by pyproject.toml's addopts."""
