"""The OpenAI-compatible router (Ray Serve ingress). Reading path: deployment.py → app.py →
completions.py → prepare.py → orchestrate.py → observe.py; see README.md."""
