"""Slipway: a Kubernetes operator that carries a model from training to production."""

from slipway._version import __version__

GROUP = "slipway.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"

__all__ = ["API_VERSION", "GROUP", "VERSION", "__version__"]
