"""A discrete-event simulator of a pdserve deployment (pure: no Ray, no HTTP, no engines).

See README.md for the reading path.
"""
