"""The OpenAI-compatible router (Ray Serve ingress). Reading path: deployment.py → app.py →
prepare.py → orchestrate.py → observe.py; see README.md."""
