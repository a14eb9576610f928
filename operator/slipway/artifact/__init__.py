"""ModelArtifact: its model (model), the quantize and validate Jobs it makes (build), what its status
says (state), its gates (gates) and the pass that reconciles it (handler)."""
