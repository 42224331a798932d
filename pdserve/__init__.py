"""pdserve: disaggregated prefill/decode LLM serving on Ray Serve, vLLM and NIXL."""

__version__ = "0.1.0"
