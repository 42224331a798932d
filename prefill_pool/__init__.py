"""The prefill pool: Ray Serve replicas that compute prompt KV and hold it for decode."""
