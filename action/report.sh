#!/usr/bin/env bash
# `prime-ci report` over several runs' artifacts (e.g. downloaded matrix shards): markdown to the step summary,
# JSON and markdown files as outputs. Each line of INPUT_DIRS is a run's directory (holding result.json) or a
# directory whose subdirectories are runs' directories.
set -euo pipefail
: "${PRIME_CI_BIN:?PRIME_CI_BIN is not set (the install step did not run)}"
: "${GITHUB_OUTPUT:?GITHUB_OUTPUT is not set}"
summary=${GITHUB_STEP_SUMMARY:-/dev/null}
dest=${INPUT_OUT:-${RUNNER_TEMP:-/tmp}/prime-ci-report}

dirs=()
while IFS= read -r line; do
  line=${line#"${line%%[![:space:]]*}"}
  line=${line%"${line##*[![:space:]]}"}
  [[ -n $line ]] || continue
  if [[ -f $line/result.json || ! -d $line ]]; then
    dirs+=("$line")
  else
    for sub in "$line"/*/; do
      [[ ! -f $sub/result.json ]] || dirs+=("${sub%/}")
    done
  fi
done <<<"${INPUT_DIRS:-}"
if ((${#dirs[@]} == 0)); then
  echo "::error title=prime-ci report::no run directories (with a result.json) under: ${INPUT_DIRS//$'\n'/ }"
  exit 2
fi

mkdir -p "$dest"
"$PRIME_CI_BIN" report "${dirs[@]}" --out-md "$dest/report.md" --out-json "$dest/report.json"
head -c 900000 "$dest/report.md" >>"$summary"
failed=$("${PRIME_CI_PYTHON:-python3}" -c 'import json, sys; print(json.load(open(sys.argv[1]))["totals"]["failed"])' \
  "$dest/report.json")
printf 'markdown=%s\njson=%s\nruns=%s\nfailed=%s\n' "$dest/report.md" "$dest/report.json" "${#dirs[@]}" "$failed" \
  >>"$GITHUB_OUTPUT"
