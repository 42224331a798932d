"""The OpenAI-compatible router (Ray Serve ingress). Reading path: deployment.py → app.py →
service.py → dispatch.py; openai_models.py, prompts.py, responses.py, errors.py, metrics.py are
the pieces they use."""
