"""Pure functions: a model of a Slipway object -> the manifests of its children. No I/O."""
