"""Image checks without a Docker daemon: build context, Dockerfiles, hadolint."""
