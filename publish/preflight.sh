#!/usr/bin/env bash
# Preflight of the writer stage (issue 39): before the run's job spends anything, check with the token the publish
# step will use what publishing will need, and fail with one ::error naming the setting or permission that is
# missing. Nothing is written: the pull request probe asks for one GitHub refuses as invalid (its head cannot be a
# branch name), and the push is a dry run.
#
#   1. the target: the pull request is readable, open and from this repository (or the base branch exists);
#   2. the token may open pull requests: GitHub answers the probe 422 (invalid) when it may, 403 when it may not,
#      with "GitHub Actions is not permitted to create or approve pull requests" when that is the repository setting
#      "Allow GitHub Actions to create and approve pull requests" (github.token cannot read the setting itself: its
#      endpoint needs the administration permission, which a workflow cannot grant);
#   3. the token may push the branch (git push --dry-run).
#
# Inputs arrive as environment variables (see publish/preflight/action.yml). Exit 0: publishing can work;
# 1: it cannot (the reason: the ::error line, the error output, the step summary).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
py=${PRIME_CI_PUBLISH_PYTHON:-python3}
out=${GITHUB_OUTPUT:-/dev/null}
summary=${GITHUB_STEP_SUMMARY:-/dev/null}
helper() { "$py" "$here/helper.py" "$@"; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

SETTING='the repository setting "Allow GitHub Actions to create and approve pull requests" is off (Settings → Actions → General → Workflow permissions): turn it on, or publish with a GitHub App or fine-grained token (input token of the publish and preflight steps)'

annotation() {
  local s=${1//%/%25}
  s=${s//$'\r'/%0D}
  printf '%s' "${s//$'\n'/%0A}"
}
fail() {  # one ::error naming what is missing; the same line as the error output and in the step summary
  local line="publishing would fail: ${1//$'\n'/ }"
  echo "::error title=prime-ci preflight::$(annotation "$line")"
  printf 'error=%s\n' "$line" >>"$out"
  printf '## ❌ prime-ci preflight\n\n%s\n' "$(helper md-text "$line")" >>"$summary"
  exit 1
}

repo=${GITHUB_REPOSITORY:-}
[[ $repo =~ ^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$ ]] || fail "GITHUB_REPOSITORY '$repo' is not owner/name"
[[ -n ${GH_TOKEN:-} ]] || fail "the token is empty (input token)"
remote=${REMOTE_URL:-${GITHUB_SERVER_URL:-https://github.com}/$repo.git}
if [[ ${DEFAULT_TOKEN:-} == true ]]; then
  who="github.token"
  grant_pr="give the preflight and publish jobs \`pull-requests: write\`"
  grant_contents="give the preflight and publish jobs \`contents: write\`"
else
  who="the token (input token)"
  grant_pr="give the token Pull requests: Read and write (a GitHub App or fine-grained token) or the repo scope"
  grant_contents="give the token Contents: Read and write (a GitHub App or fine-grained token) or the repo scope"
fi

git_() {
  GIT_TERMINAL_PROMPT=0 git -c core.hooksPath=/dev/null -c core.fsmonitor=false -c credential.helper= \
    -c 'credential.helper=!gh auth git-credential' "$@"
}
status="" message=""
api() {  # api ARGS...: gh api; on an error answer sets status (the HTTP code) and message, and returns 1
  status="" message=""
  gh api "$@" >"$tmp/body" 2>"$tmp/err" && return 0
  status=$(grep -o 'HTTP [0-9]*' "$tmp/err" | tail -n 1 | cut -d' ' -f2 || true)
  message=$(helper json-field message <"$tmp/body" 2>/dev/null || true)
  [[ -n $message ]] || message=$(tail -n 1 "$tmp/err")
  return 1
}
denied() {  # denied WHAT GRANT: the message for a refused request
  case "$status" in
    401) fail "$who is not valid (HTTP 401: $message)" ;;
    *) fail "$who cannot $1 in $repo (HTTP ${status:-?}: $message): $2" ;;
  esac
}

# 1. The target.
if [[ -n ${PR_NUMBER:-} ]]; then
  [[ $PR_NUMBER =~ ^[0-9]+$ ]] || fail "pr-number '$PR_NUMBER' is not a number"
  api "repos/$repo/pulls/$PR_NUMBER" || denied "read pull request #$PR_NUMBER" "$grant_pr"
  cp "$tmp/body" "$tmp/pr.json"
  state=$(helper field "$tmp/pr.json" state)
  head_repo=$(helper field "$tmp/pr.json" head.repo.full_name)
  target=$(helper field "$tmp/pr.json" head.ref)
  [[ $state == open ]] || fail "pull request #$PR_NUMBER is $state"
  [[ $head_repo == "$repo" ]] \
    || fail "pull request #$PR_NUMBER comes from $head_repo, not $repo: no branch to propose the fix to"
elif [[ -n ${BASE_BRANCH:-} ]]; then
  target=$BASE_BRANCH
  git check-ref-format --branch "$target" >/dev/null 2>&1 || fail "base-branch '$target' is not a branch name"
  tip=$(git_ ls-remote "$remote" "refs/heads/$target" 2>"$tmp/ls.err" | cut -f1) \
    || fail "$who cannot read $repo ($(tail -n 1 "$tmp/ls.err")): $grant_contents"
  [[ -n $tip ]] || fail "branch $target does not exist in $repo"
else
  fail "give pr-number or base-branch"
fi
branch=${BRANCH:-prime-ci/preflight}
{ [[ $branch == prime-ci/* ]] && git check-ref-format --branch "$branch" >/dev/null 2>&1; } \
  || fail "branch '$branch' must be a valid branch name under prime-ci/"
[[ $branch != "$target" ]] || fail "branch and target are both $target"

# 2. Pull requests: a request GitHub refuses as invalid when the token may open one (nothing is created).
if api --method POST "repos/$repo/pulls" -f "title=prime-ci preflight (never opened)" \
  -f "head=prime-ci/preflight..probe" -f "base=$target"; then
  echo "::warning title=prime-ci preflight::GitHub accepted the pull request probe; close it if one was opened"
elif [[ $status != 422 ]]; then
  [[ $message != *"not permitted to create or approve pull requests"* ]] || fail "$SETTING"
  denied "open pull requests" "$grant_pr"
fi

# 3. The push, dry run: git asks the server for push access and sends nothing.
git_ init --quiet "$tmp/push"
git_ -C "$tmp/push" -c user.name=prime-ci -c user.email=prime-ci@invalid commit --quiet --allow-empty -m preflight
if ! git_ -C "$tmp/push" push --quiet --dry-run --force "$remote" "HEAD:refs/heads/$branch" 2>"$tmp/push.err"; then
  cat "$tmp/push.err" >&2
  fail "$who cannot push $branch to $repo ($(tail -n 1 "$tmp/push.err")): $grant_contents"
fi

printf 'error=\n' >>"$out"
echo "prime-ci preflight: $who can push $branch and open a pull request into $target of $repo"
printf '## ✅ prime-ci preflight\n\n%s can push the fix branch and open its pull request.\n' "$who" >>"$summary"
