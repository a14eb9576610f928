"""Slipway's version, stamped from the git tags by release/versioning.py (make version): not edited by hand."""

__version__ = "0.1.0"
