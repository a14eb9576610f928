"""Slipway on the local cluster: deploy the operator from manifests/, run the demo, drive the e2e suite."""
