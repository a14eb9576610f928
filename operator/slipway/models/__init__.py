"""What the pydantic models of Slipway's kinds share (slipway.models.base); each kind's own model is
in its package (slipway.training.model, slipway.artifact.model, slipway.inference.model), and the
CRDs in crds/ are generated from them."""
