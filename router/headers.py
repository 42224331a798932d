"""The HTTP header names pdserve reads and writes: their one home (pure constants).

Who reads them: the router's HTTP layer (router/completions.py), the benchmark client (bench/) and
`pdserve profile` (pdserve/profiling/), which parse the router's responses.
"""

from __future__ import annotations

REQUEST_ID_HEADER = "x-request-id"
"""Correlates a request across router, engines and logs (the client's, or a new one)."""
POLICY_HEADER = "x-pdserve-policy"
"""Request: routing policy for this request (only with router.allow_policy_override)."""
KV_VERIFY_HEADER = "x-pdserve-kv-verify"
"""Request: `on` or `off`, check this request's KV handoff or not, whatever kv_transfer.verify
says (only with router.allow_policy_override: benchmarks compare both in one run)."""
DECISION_HEADER = "x-pdserve-decision"
"""Response: the policy's decision (compact JSON: policy, prefill, decode, priority, ...)."""
TIMING_HEADER = "x-pdserve-timing"
"""Response: the request's stage durations in seconds (compact JSON, see router/timeline.py)."""
SERVED_BY_HEADER = "x-pdserve-served-by"
"""Response: the replicas that really served the request (compact JSON: prefill, decode)."""
CONVERSATION_HEADER = "x-pdserve-conversation"
"""Request: the conversation this request continues (any string; cache-break detection
compares it with that conversation's previous request; see router/context/breaks.py)."""
PROMPT_COST_HEADER = "x-pdserve-prompt-cost"
"""Response: the prompt's tokens by part, cached and computed, and the cache break if any
(compact JSON, see router/context/cost.py)."""
FAIR_SHARE_HEADER = "x-pdserve-fair-share"
"""Request: `on` or `off`, queue this request in the tiers' fair queues or not, whatever
router.tenants.fair_share says (only with router.allow_policy_override: `pdserve bench-tenants`
compares both in one run)."""
ITL_GUARD_HEADER = "x-pdserve-itl-guard"
"""Request: `on` or `off`, weigh a prefill on the decode replica against its streams' ITL
budget or not, whatever router.routing.itl_slo_s says (`on` needs an itl_slo_s to apply; only
with router.allow_policy_override: `pdserve profile` measures local prefills beside streams
with it off, and comparisons can run both in one run)."""
PACE_HEADER = "x-pdserve-pace"
"""Request: `on` or `off`, compare a local prefill with a remote one on the measured pace
(router.routing.pace_weight) or on the cost model's predictions as they are (`on` needs a
pace_weight to apply; only with router.allow_policy_override: `pdserve bench --compare
pace:on,pace:off` runs both in one run). The pace learns from every prefill either way."""
TENANT_HEADER = "x-pdserve-tenant"
"""Response: the tenant the request's key belongs to (a name from the key file, never a key)."""
