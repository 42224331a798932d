"""Tenants: who sends a request (directory.py), their limits (limits.py) and their fair share of
each saturated tier (fair_queue.py, gate.py). docs/tenants.md is the user's guide."""
