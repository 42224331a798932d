"""Everything about moving KV from prefill to decode: vLLM NixlConnector config per role and
platform, NIXL side-channel ports, and the typed wrapper of vLLM's kv_transfer_params."""
