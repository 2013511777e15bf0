#!/usr/bin/env bash
# Install prime-ci from the action's own checkout (never from the repository under review) into a private
# virtualenv, with the versions pinned in the action's requirements.lock. Outputs bin= and python=.
set -euo pipefail
: "${GITHUB_OUTPUT:?GITHUB_OUTPUT is not set}"
root=${PRIME_CI_ACTION_ROOT:?PRIME_CI_ACTION_ROOT is not set}
python=${PRIME_CI_BASE_PYTHON:-}
[[ -n $python ]] || python=python3
venv=${PRIME_CI_VENV:-${RUNNER_TEMP:-/tmp}/prime-ci-venv}

"$python" -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check -c "$root/requirements.lock" "$root"
"$venv/bin/prime-ci" --version
printf 'bin=%s\npython=%s\n' "$venv/bin/prime-ci" "$venv/bin/python" >>"$GITHUB_OUTPUT"
