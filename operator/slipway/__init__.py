"""Slipway: a Kubernetes operator that carries a model from training to production."""

GROUP = "slipway.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"

__version__ = "0.1.0"
