"""What each part of a prompt costs in prefill, and which message broke the prefix cache."""
