"""Ray Serve application builder and deployment configs (local.yaml is the CPU default)."""
