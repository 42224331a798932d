"""Context what-ifs for agent builders: what trimming a recorded agent run's context would
save in prefill, and which trimming keeps the prompt prefix (and so the prefix cache) stable.
Pure core (history, policies, whatif, report) plus the `pdserve context` commands (cli)."""
