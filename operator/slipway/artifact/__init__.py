"""ModelArtifact: its model (model), the quantize and validate Jobs it makes (build), what its status
says (state), its gates (gates), its work key (work) and the pass that reconciles it (handler: the
reads of observe and source over the record of observed, the pure decision of decide, one move of
decisions at a time; lineage prices what the lineage cost); what it registers with the frame
(register)."""
