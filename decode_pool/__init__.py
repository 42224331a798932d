"""The decode pool: Ray Serve replicas that pull prompt KV over NIXL and stream tokens."""
