#!/usr/bin/env bash
# Trigger gate (RELIABILITY S1): only actors with write, maintain or admin permission on the repository,
# checked through the API now, start a run; bots only when allowlisted. Decides before any model call.
# Writes allowed=true|false and reason=... as step outputs; never fails the step itself.
set -euo pipefail
: "${GITHUB_OUTPUT:?GITHUB_OUTPUT is not set}"

decide() {  # decide true|false REASON
  local reason=${2//$'\r'/ }
  printf 'allowed=%s\nreason=%s\n' "$1" "${reason//$'\n'/ }" >>"$GITHUB_OUTPUT"
  echo "trigger gate: $([[ $1 == true ]] && echo allowed || echo refused): $2"
  exit 0
}

case "${INPUT_TRIGGER_GATE:-true}" in
  false) decide true "trigger gate disabled by the workflow (trigger-gate: false)" ;;
  true) ;;
  *) decide false "input trigger-gate: expected true or false, got '${INPUT_TRIGGER_GATE}'" ;;
esac

repo=${GITHUB_REPOSITORY:?GITHUB_REPOSITORY is not set}
actor=${GITHUB_TRIGGERING_ACTOR:-${GITHUB_ACTOR:-}}
[[ -n $actor ]] || decide false "no triggering actor in the environment"

if [[ $actor == *"[bot]" ]]; then
  list=${INPUT_ALLOWED_BOTS:-}
  list=${list//,/ }
  read -r -a bots <<<"${list//$'\n'/ }"
  for bot in "${bots[@]}"; do
    if [[ $bot == "*" ]]; then
      [[ ${INPUT_ALLOW_ANY_BOT:-false} == true ]] \
        || decide false "allowed-bots is '*' but allow-any-bot is not true: refusing bot $actor"
      decide true "bot $actor allowed by the wildcard (allow-any-bot: true)"
    fi
    [[ $bot != "$actor" && $bot != "${actor%\[bot\]}" ]] || decide true "bot $actor is in allowed-bots"
  done
  decide false "bot $actor is not in allowed-bots"
fi

if ! permission=$(gh api "repos/$repo/collaborators/$actor/permission" --jq .permission 2>&1); then
  decide false "cannot read the permission of $actor on $repo: ${permission:0:200}"
fi
case "$permission" in
  admin | maintain | write) decide true "$actor has $permission permission on $repo" ;;
  *) decide false "$actor has '${permission:0:40}' permission on $repo; write, maintain or admin is required" ;;
esac
