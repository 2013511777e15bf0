#!/usr/bin/env bash
# Last step of the composite: fail with prime-ci's exit code (after the artifacts were uploaded), unless
# the caller asked for continue-on-error semantics. The ::error carries the run's one-line reason (RUN_ERROR, the
# run step's error output), so that every error reaches the person reading the checks.
set -euo pipefail
code=${EXIT_CODE:-}
reason=${STOP_REASON:-}
why=${RUN_ERROR:-}
annotation() {  # workflow-command escaping: the message cannot start a command of its own
  local s=${1//%/%25}
  s=${s//$'\r'/%0D}
  printf '%s' "${s//$'\n'/%0A}"
}
if [[ ! $code =~ ^[0-9]+$ ]]; then
  echo "::error title=prime-ci::the run step did not report an exit code"
  exit 70
fi
if [[ $code == 0 ]]; then
  echo "prime-ci: ${reason:-completed} (exit 0)"
  exit 0
fi
message="prime-ci exited $code${reason:+ ($reason)}${why:+: $why}"
case "$code" in
  9) message+="; a setup command failed before any model call; its log is in the step summary and in setup/ of the uploaded artifacts" ;;
  *) message+="; see the step summary and the uploaded artifacts" ;;
esac
if [[ ${INPUT_COMMAND:-run} == bench && $code == 1 ]]; then
  message="prime-ci bench exited 1: a --min-solve-rate/--max-regression threshold failed; see the report in the step summary"
fi
if [[ ${INPUT_CONTINUE_ON_ERROR:-false} == true ]]; then
  echo "::warning title=prime-ci::$(annotation "$message (continue-on-error: true)")"
  exit 0
fi
echo "::error title=prime-ci::$(annotation "$message")"
exit "$code"
