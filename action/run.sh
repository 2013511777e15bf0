#!/usr/bin/env bash
# The agent stage of the composite action: build the `prime-ci run` (or, with INPUT_COMMAND=bench, the
# `prime-ci bench`) command line from INPUT_* variables, run it, and publish its outcome as step outputs and
# the step summary.
#
# Every input arrives as an environment variable (action.yml never puts ${{ }} into this script's text).
# This step never fails on prime-ci's exit code: action/finish.sh does, after the artifacts are uploaded.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
py=${PRIME_CI_PYTHON:-python3}
out=${INPUT_OUT:-}
: "${GITHUB_OUTPUT:?GITHUB_OUTPUT is not set}"
summary=${GITHUB_STEP_SUMMARY:-/dev/null}

annotation() {  # workflow-command escaping: the message cannot start a command of its own
  local s=${1//%/%25}
  s=${s//$'\r'/%0D}
  printf '%s' "${s//$'\n'/%0A}"
}

outputs_without_run() {  # outputs_without_run EXIT_CODE STOP_REASON REASON
  printf 'exit-code=%s\nstop-reason=%s\nresult=\nout-dir=\nrun-id=\nsuccess=false\ntotal-tokens=\ncost-usd=\nchanged-files=[]\n' \
    "$1" "$2" >>"$GITHUB_OUTPUT"
  printf 'artifact-name=\nerror=%s\n' "${3//$'\n'/ }" >>"$GITHUB_OUTPUT"
}

# A configuration error of the action itself: reported like prime-ci's own exit 2.
usage_error() {
  echo "::error title=prime-ci::$(annotation "$1")"
  outputs_without_run 2 "" "$1"
  printf '## ❌ prime-ci: configuration error (exit 2)\n\n%s\n' "$1" >>"$summary"
  exit 0
}

helper_error=""
helper_words() {  # helper_words ARRAY SUBCOMMAND TEXT [ARG]: the helper's NUL-separated words into ARRAY
  local -n _words=$1
  local tmp
  tmp=$(mktemp)
  if ! helper_error=$("$py" "$here/helper.py" "$2" "$3" "${@:4}" 2>&1 >"$tmp"); then
    rm -f "$tmp"
    return 1
  fi
  mapfile -d '' _words <"$tmp"
  rm -f "$tmp"
}

commands() {  # commands FLAG TEXT: one FLAG per line of TEXT, leading blanks trimmed, '#' lines skipped
  local line
  while IFS= read -r line; do
    line=${line#"${line%%[![:space:]]*}"}
    [[ -z $line || $line == \#* ]] || args+=("$1" "$line")
  done <<<"$2"
}

paths() {  # paths FLAG TEXT: one FLAG per non-empty line of TEXT, blanks trimmed on both sides
  local line
  while IFS= read -r line; do
    line=${line#"${line%%[![:space:]]*}"}
    line=${line%"${line##*[![:space:]]}"}
    [[ -z $line ]] || args+=("$1" "$line")
  done <<<"$2"
}

without_dir() {  # without_dir DIR PATHLIST: PATHLIST minus every entry that is DIR (same file, any spelling)
  local entry kept=() entries dropped=false
  IFS=: read -r -a entries <<<"$2"
  for entry in "${entries[@]}"; do
    if [[ -n $entry && $entry -ef $1 ]]; then dropped=true; else kept+=("$entry"); fi
  done
  if [[ $dropped == false ]]; then printf '%s' "$2"; return; fi
  local IFS=:
  printf '%s' "${kept[*]}"
}

bool() {  # bool NAME VALUE -> 0 for true, 1 for false; anything else is a usage error
  case "${2,,}" in
    true) return 0 ;;
    false | "") return 1 ;;
    *) usage_error "input $1: expected true or false, got '$2'" ;;
  esac
}

if [[ ${GATE_ALLOWED:-} != true ]]; then
  reason=${GATE_REASON:-the trigger gate did not allow this run}
  echo "::error title=prime-ci trigger gate::$(annotation "$reason")"
  outputs_without_run 7 security_stop "$reason"
  printf '## ❌ prime-ci: refused by the trigger gate (exit 7)\n\n%s\n' "$reason" >>"$summary"
  exit 0
fi
: "${PRIME_CI_BIN:?PRIME_CI_BIN is not set (the install step did not run)}"

command=${INPUT_COMMAND:-run}
case "$command" in
  run) [[ -z ${INPUT_BENCH_ARGS:-} ]] || usage_error "input bench-args: only with command: bench" ;;
  bench) ;;
  *) usage_error "input command: expected run or bench, got '$command'" ;;
esac

bench_args() {  # the `prime-ci bench` command line: bench-args, then the inputs both commands share
  local name var
  for name in task task-file gates gates-file gates-from setup build budgets harness-branch python sandbox-ro ref \
    untrusted-file extra-args; do
    var=INPUT_${name^^}
    var=${var//-/_}
    [[ -z ${!var:-} ]] \
      || usage_error "input $name: not with command: bench (the suite sets each task's; bench flags go in bench-args)"
  done
  [[ ${INPUT_REPO:-.} == . ]] || usage_error "input repo: not with command: bench (the suite names each task's)"
  for name in propose require-changes include-dirty; do
    var=INPUT_${name^^}
    var=${var//-/_}
    if bool "$name" "${!var:-}"; then usage_error "input $name: not with command: bench"; fi
  done
  local words=() word
  helper_words words split-args "${INPUT_BENCH_ARGS:-}" bench-args || usage_error "$helper_error"
  ((${#words[@]})) || usage_error "input bench-args: give the suite file (or --demo, or --merge DIR...)"
  for word in "${words[@]}"; do
    case "$word" in
      --out | --out=* | --model | --model=* | --api-base | --api-base=* | --sandbox | --sandbox=*)
        word=${word%%=*}
        usage_error "input bench-args: $word is the action's input ${word#--}, not a bench-args flag" ;;
    esac
  done
  # A fresh directory per step unless the workflow names one (a bench run again into it continues).
  [[ -n $out ]] || out=$(mktemp -d "${RUNNER_TEMP:-/tmp}/prime-ci-bench.XXXXXX")
  args=(bench "${words[@]}" --out "$out")
  [[ -z ${INPUT_MODEL:-} ]] || args+=(--model "$INPUT_MODEL")
  [[ -z ${INPUT_API_BASE:-} ]] || args+=(--api-base "$INPUT_API_BASE")
  [[ -z ${INPUT_SANDBOX:-} ]] || args+=(--sandbox "$INPUT_SANDBOX")
}

run_args() {  # the `prime-ci run` command line from the inputs
  # A fresh directory per step, so that two runs in one job never read each other's result.json.
  [[ -n $out ]] || out=$(mktemp -d "${RUNNER_TEMP:-/tmp}/prime-ci-out.XXXXXX")
  args=(run "${INPUT_REPO:-.}" --out "$out")
  [[ -z ${INPUT_REF:-} ]] || args+=(--ref "$INPUT_REF")
  [[ -z ${INPUT_TASK:-} ]] || args+=(--task "$INPUT_TASK")
  [[ -z ${INPUT_TASK_FILE:-} ]] || args+=(--task-file "$INPUT_TASK_FILE")
  [[ -z ${INPUT_MODEL:-} ]] || args+=(--model "$INPUT_MODEL")
  [[ -z ${INPUT_API_BASE:-} ]] || args+=(--api-base "$INPUT_API_BASE")
  commands --gate "${INPUT_GATES:-}"
  commands --setup "${INPUT_SETUP:-}"
  commands --build "${INPUT_BUILD:-}"
  paths --gates-file "${INPUT_GATES_FILE:-}"
  [[ -z ${INPUT_GATES_FROM:-} ]] || args+=(--gates-from "$INPUT_GATES_FROM")
  if [[ -n ${INPUT_BUDGETS:-} ]]; then  # the operator's settings file, read like --config FILE
    [[ -z ${PRIME_CI_CONFIG:-} ]] \
      || usage_error "input budgets: not with PRIME_CI_CONFIG (put the budgets into that file)"
    budgets_file=$(mktemp "${RUNNER_TEMP:-/tmp}/prime-ci-budgets.XXXXXX")
    helper_error=$("$py" "$here/helper.py" budgets "$INPUT_BUDGETS" "$budgets_file" 2>&1) \
      || usage_error "$helper_error"
    args+=(--config "$budgets_file")
  fi
  [[ -z ${INPUT_HARNESS_BRANCH:-} ]] || args+=(--harness-branch "$INPUT_HARNESS_BRANCH")
  if bool propose "${INPUT_PROPOSE:-}"; then args+=(--propose); fi
  [[ -z ${INPUT_SANDBOX:-} ]] || args+=(--sandbox "$INPUT_SANDBOX")
  if bool require-changes "${INPUT_REQUIRE_CHANGES:-}"; then args+=(--require-changes); fi
  [[ -z ${INPUT_PYTHON:-} ]] || args+=(--python "$INPUT_PYTHON")
  paths --sandbox-ro "${INPUT_SANDBOX_RO:-}"
  if bool include-dirty "${INPUT_INCLUDE_DIRTY:-}"; then args+=(--include-dirty); fi

  # Event text (PR title/body, comments) and any caller-supplied untrusted file become one data file.
  untrusted=$(mktemp "${RUNNER_TEMP:-/tmp}/prime-ci-untrusted.XXXXXX")
  event_path=""
  if bool event-text "${INPUT_EVENT_TEXT:-true}"; then event_path=${GITHUB_EVENT_PATH:-}; fi
  helper_error=$("$py" "$here/helper.py" event-text "$event_path" "$untrusted" ${INPUT_UNTRUSTED_FILE:+"$INPUT_UNTRUSTED_FILE"} 2>&1) \
    || usage_error "$helper_error"
  [[ ! -s $untrusted ]] || args+=(--untrusted-file "$untrusted")

  if [[ -n ${INPUT_EXTRA_ARGS:-} ]]; then
    extra=()
    helper_words extra split-args "$INPUT_EXTRA_ARGS" || usage_error "$helper_error"
    for word in "${extra[@]}"; do
      case "$word" in
        --config | --config=*)
          [[ -z ${INPUT_BUDGETS:-} ]] \
            || usage_error "input extra-args: --config is not with input budgets (put the budgets into that file)" ;;
      esac
    done
    args+=("${extra[@]}")
  fi
}

if [[ $command == bench ]]; then bench_args; else run_args; fi

# The project's interpreter (input python empty: REPO's .venv, else python3 on the job's PATH) is never
# prime-ci's private virtualenv: the install step does not put it on PATH, and should the job have done so,
# its bin directory is dropped here, for the run only (a virtualenv's bin only, never a system directory).
run_path=${PATH:-}
unset_venv=()
for tool in "$PRIME_CI_BIN" "$py"; do
  [[ $tool == */* ]] || continue
  dir=$(dirname "$tool")
  [[ -f $dir/../pyvenv.cfg ]] || continue
  run_path=$(without_dir "$dir" "$run_path")
  if [[ -n ${VIRTUAL_ENV:-} && $VIRTUAL_ENV/bin -ef $dir ]]; then unset_venv=(-u VIRTUAL_ENV); fi
done

# The command line quotes inputs (a task may hold a pull request's text): shown with no workflow command in it,
# by prime-ci's own rule (README: Security) or, where prime-ci cannot be imported, with every :: and ##[ broken.
shown="prime-ci ${args[*]@Q}"
if ! "$py" -c 'import sys; from prime_ci.isolation.workflow_commands import neutral; print(neutral(sys.argv[1]))' \
  "$shown" 2>/dev/null; then
  while [[ $shown == *::* || $shown == *'##['* ]]; do
    shown=${shown//::/: :}
    shown=${shown//'##['/'## ['}
  done
  printf '%s\n' "$shown"
fi
# prime-ci's stderr is also kept in a file: the one-line reason of an error that ends it before its artifacts
# (exit 2: "prime-ci: error: ...") is read from there. tee ignores SIGINT and SIGTERM, so that a cancelled run keeps
# its stderr while it winds down and writes its artifacts.
errlog=$(mktemp "${RUNNER_TEMP:-/tmp}/prime-ci-stderr.XXXXXX")
set +e
{
  # The agent stage holds no GitHub credentials: whatever token the job has stays out of the run's tree.
  env -u GH_TOKEN -u GITHUB_TOKEN -u ACTIONS_RUNTIME_TOKEN -u ACTIONS_ID_TOKEN_REQUEST_TOKEN \
    -u ACTIONS_ID_TOKEN_REQUEST_URL "${unset_venv[@]}" PATH="$run_path" "$PRIME_CI_BIN" "${args[@]}" 2>&1 1>&3 3>&- \
    | (trap '' INT TERM && exec tee -a "$errlog" >&2)
  code=${PIPESTATUS[0]}
} 3>&1
set -e
# Every error reaches the person: the one-line reason (result.json's detail, else prime-ci's error line) is the error
# output, in the step summary here, in finish.sh's ::error and in the publish step's pull request comment.
reason=$("$py" "$here/helper.py" reason "$code" "$out" "$errlog" "$command") || reason=""
rm -f "$errlog"
printf 'error=%s\n' "$reason" >>"$GITHUB_OUTPUT"

if [[ $command == bench ]]; then
  "$py" "$here/helper.py" bench-outputs "$code" "$out" "${INPUT_ARTIFACT_NAME:-}" >>"$GITHUB_OUTPUT"
  if [[ ($code == 0 || $code == 1) && -s $out/bench.md ]]; then  # otherwise a bench.md there is older
    head -c 900000 "$out/bench.md" >>"$summary"
  else
    "$py" "$here/helper.py" failure-summary "$code" "$reason" bench >>"$summary"
  fi
  echo "prime-ci bench exited $code; report and runs in $out"
  exit 0
fi
"$py" "$here/helper.py" outputs "$code" "$out" "${INPUT_ARTIFACT_NAME:-}" >>"$GITHUB_OUTPUT"
if [[ $code != 2 && -s $out/summary.md ]]; then  # exit 2: nothing started, a summary.md there is older
  # The step summary is capped at 1 MiB per step by GitHub. summary.md shows result.json's detail (the reason).
  head -c 900000 "$out/summary.md" >>"$summary"
  if [[ $code == 9 ]]; then  # setup_failed: no model call was made; the log's end says why
    printf '\n' >>"$summary"
    "$py" "$here/helper.py" setup-failure "$out" >>"$summary" \
      || echo "::warning title=prime-ci::cannot show the failed setup command's log; see setup/ in the artifacts"
  fi
else
  "$py" "$here/helper.py" failure-summary "$code" "$reason" >>"$summary"
fi
echo "prime-ci exited $code; artifacts in $out"
