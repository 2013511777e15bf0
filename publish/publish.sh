#!/usr/bin/env bash
# Writer stage (RELIABILITY S3): turn one run's artifacts into at most one pull request for the change and
# at most one for a harness proposal. Deterministic: no model, no code from the run is executed. Checks
# first (target has not moved, paths, size, secrets), then pushes a prime-ci/ branch, then `gh pr`.
# With pr-number, it then keeps this workflow's one comment on that pull request (issue 39, DESIGN §14): every
# outcome, also a run that did not start (no artifacts: RUN_EXIT_CODE and RUN_ERROR from the run's job) and a
# refusal here.
#
# Inputs arrive as environment variables (see publish/action.yml). Exit 0: published or nothing to publish;
# 1: refused (the reason is the last line on stderr and an ::error annotation), or the comment could not be posted;
# 2: usage error.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
py=${PRIME_CI_PUBLISH_PYTHON:-python3}
out=${GITHUB_OUTPUT:-/dev/null}
summary=${GITHUB_STEP_SUMMARY:-/dev/null}
helper() { "$py" "$here/helper.py" "$@"; }

annotation() {
  local s=${1//%/%25}
  s=${s//$'\r'/%0D}
  printf '%s' "${s//$'\n'/%0A}"
}
refuse() {
  echo "::error title=prime-ci publish::$(annotation "$1")"
  printf 'refused=%s\n' "${1//$'\n'/ }" >>"$out"
  # the reason names paths from the patch: inert markdown, by prime-ci's one rule
  printf '## ❌ prime-ci publish refused\n\n%s\n' "$(helper md-text "$1" || echo '(the reason is in the log)')" >>"$summary"
  echo "prime-ci publish: refused: $1" >&2
  comment --refused "$1"
  exit 1
}
usage() {
  echo "::error title=prime-ci publish::$(annotation "$1")"
  echo "prime-ci publish: $1" >&2
  comment --refused "the publish step: $1"
  exit 2
}
note() { echo "prime-ci publish: $*"; }
truthy() { [[ ${1,,} == true ]]; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
repo=${GITHUB_REPOSITORY:-}
pr_number=${PR_NUMBER:-}
artifacts=${ARTIFACTS_DIR:-}
result="$artifacts/result.json"
change_url="" harness_url="" comment_failed=false

# The one comment of this workflow on the pull request: found by its marker among the comments this token's
# identity wrote, updated in place, else created. Once per step (a refusal while commenting does not comment again).
commenting=false
if truthy "${COMMENT:-true}" && [[ $pr_number =~ ^[0-9]+$ && $repo =~ ^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$ ]]; then
  commenting=true
fi
comment_author() {  # who this token writes as: github.token is github-actions[bot]; a user's token says who
  local me                 # it is; an app's installation token cannot ask (any app's bot then)
  if [[ ${DEFAULT_TOKEN:-} == true ]]; then echo 'github-actions[bot]'
  elif me=$(gh api user 2>/dev/null) && me=$(helper json-field login <<<"$me") && [[ -n $me ]]; then echo "$me"
  else echo '[bot]'
  fi
}
comment_error() {
  echo "::error title=prime-ci publish::$(annotation "cannot $1 the comment on pull request #$pr_number: $2")"
  comment_failed=true
}
comment() {  # comment [helper comment options...]: the comment as the run (or its absence) and this step left it
  $commenting || return 0
  commenting=false
  local args=(comment --workflow "${GITHUB_WORKFLOW:-}" --exit-code "${RUN_EXIT_CODE:-}" --error "${RUN_ERROR:-}"
    --change-url "$change_url" --harness-url "$harness_url" "$@")
  [[ ! -f $result ]] || args+=(--result "$result")
  if ! helper "${args[@]}" >"$tmp/comment.md" 2>"$tmp/comment.err"; then
    comment_error write "$(tail -n 1 "$tmp/comment.err")"
    return 0
  fi
  local mark author id response
  mark=$(helper marker "${GITHUB_WORKFLOW:-}")
  author=$(comment_author)
  if ! gh api --paginate "repos/$repo/issues/$pr_number/comments" >"$tmp/comments.json" 2>"$tmp/comment.err"; then
    comment_error read "$(tail -n 1 "$tmp/comment.err")"
    return 0
  fi
  id=$(helper find-comment "$mark" "$author" <"$tmp/comments.json") || { comment_error find "not JSON"; return 0; }
  if [[ -n $id ]]; then
    response=$(gh api --method PATCH "repos/$repo/issues/comments/$id" -F "body=@$tmp/comment.md" \
      2>"$tmp/comment.err") || { comment_error update "$(tail -n 1 "$tmp/comment.err")"; return 0; }
    note "updated the comment on pull request #$pr_number"
  else
    response=$(gh api --method POST "repos/$repo/issues/$pr_number/comments" -F "body=@$tmp/comment.md" \
      2>"$tmp/comment.err") || { comment_error post "$(tail -n 1 "$tmp/comment.err")"; return 0; }
    note "commented on pull request #$pr_number"
  fi
  printf 'comment-url=%s\n' "$(helper json-field html_url <<<"$response")" >>"$out"
  printf -- '- %s the comment on pull request #%s\n' "$([[ -n $id ]] && echo updated || echo posted)" "$pr_number" \
    >>"$summary"
}
finish() {  # finish [helper comment options...]: comment, the outputs, and the step's exit code
  comment "$@"
  printf 'published=%s\n' "$published" >>"$out"
  ! $comment_failed || exit 1
  exit 0
}
published=false

[[ $repo =~ ^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$ ]] || usage "GITHUB_REPOSITORY '$repo' is not owner/name"
if [[ ! -f $result ]]; then
  # No artifacts: the run did not start (a configuration error, a failed preflight) or its job ended first. The
  # comment says why, from what the run's job reported; there is nothing to publish.
  [[ -n ${RUN_EXIT_CODE:-}${RUN_ERROR:-} ]] || usage "no result.json in '$artifacts'"
  note "no result.json in '$artifacts' (the run ended ${RUN_EXIT_CODE:+with exit $RUN_EXIT_CODE }before its" \
    "artifacts): nothing to publish"
  printf '## prime-ci publish\n\n- the run left no artifacts: nothing to publish\n' >>"$summary"
  finish
fi
remote=${REMOTE_URL:-${GITHUB_SERVER_URL:-https://github.com}/$repo.git}
[[ ${MAX_FILES:-50} =~ ^[0-9]+$ ]] || usage "max-files '${MAX_FILES}' is not a number"
[[ ${MAX_PATCH_BYTES:-1000000} =~ ^[0-9]+$ ]] || usage "max-patch-bytes '${MAX_PATCH_BYTES}' is not a number"

run_id=$(helper field "$result" run_id)
base_commit=$(helper field "$result" base_commit)
[[ $run_id =~ ^[A-Za-z0-9._-]+$ ]] || usage "result.json has no usable run_id"
[[ $base_commit =~ ^[0-9a-f]{40}$ ]] || usage "result.json has no base_commit"

# git as the writer uses it: no hooks, no fsmonitor, no prompts; credentials from gh for this call only.
git_() {
  GIT_TERMINAL_PROMPT=0 git -c core.hooksPath=/dev/null -c core.fsmonitor=false -c credential.helper= \
    -c 'credential.helper=!gh auth git-credential' "$@"
}
branch_ok() {  # a branch name this step may force-push: inside its own namespace, well formed
  [[ $1 == "$2"* ]] && git check-ref-format --branch "$1" >/dev/null 2>&1
}
base_allowed() {
  local pattern
  [[ -n ${ALLOWED_BASE_BRANCHES:-} ]] || return 0
  for pattern in ${ALLOWED_BASE_BRANCHES//,/ }; do
    # shellcheck disable=SC2053  # the allowlist entries are globs
    [[ $1 == $pattern ]] && return 0
  done
  return 1
}
open_or_update_pr() {  # open_or_update_pr BASE HEAD TITLE BODY_FILE DRAFT OUTPUT_PREFIX LABEL
  local existing number url
  existing=$(gh pr list --repo "$repo" --head "$2" --state open --json number,url --limit 1)
  number=$(helper json-field 0.number <<<"$existing")
  if [[ -n $number ]]; then
    url=$(helper json-field 0.url <<<"$existing")
    gh pr edit "$number" --repo "$repo" --title "$3" --body-file "$4" >/dev/null
    note "updated the $7 pull request $url"
    printf -- '- updated the %s pull request: %s\n' "$7" "$url" >>"$summary"
  else
    local draft=()
    ! truthy "$5" || draft=(--draft)
    if ! url=$(gh pr create --repo "$repo" --base "$1" --head "$2" --title "$3" --body-file "$4" "${draft[@]}" \
      2>"$tmp/create.err"); then
      cat "$tmp/create.err" >&2
      grep -qi "not permitted to create or approve pull requests" "$tmp/create.err" \
        && refuse "pushed $2, but GitHub refused the $7 pull request: the repository setting \"Allow GitHub Actions to create and approve pull requests\" is off (Settings → Actions → General → Workflow permissions); turn it on, or publish with a GitHub App or fine-grained token (input token)"
      refuse "pushed $2, but cannot open the $7 pull request: $(tail -n 1 "$tmp/create.err")"
    fi
    url=$(tail -n 1 <<<"$url")
    note "opened the $7 pull request $url"
    printf -- '- opened the %s pull request: %s\n' "$7" "$url" >>"$summary"
  fi
  printf '%s-url=%s\n' "$6" "$url" >>"$out"
  if [[ $6 == pr ]]; then change_url=$url; else harness_url=$url; fi
}
# commit_patch WORKDIR BASE_SHA PATCH MESSAGE [CHECK-PATHS ARGS...]: one commit, BASE_SHA + PATCH, checked
# against the path policy before it exists.
commit_patch() {
  local work=$1 base=$2 patch=$3 message=$4
  shift 4
  git_ init --quiet "$work"
  git_ -C "$work" fetch --quiet --no-tags --depth=1 "$remote" "$base" || refuse "cannot fetch ${base:0:12} from $remote"
  git_ -C "$work" checkout --quiet --detach FETCH_HEAD
  git_ -C "$work" apply --index --whitespace=nowarn "$patch" \
    || refuse "$(basename "$patch") does not apply to ${base:0:12}"
  git_ -C "$work" diff --cached --raw -z --no-renames \
    | helper check-paths --forbidden "${FORBIDDEN_PATHS:-}" --allow "${ALLOW_PATHS:-}" \
      --max-files "${MAX_FILES:-50}" "$@" 2>"$work.err" \
    || refuse "$(tail -n 1 "$work.err")"
  git_ -C "$work" -c user.name="${GIT_AUTHOR_NAME:-github-actions[bot]}" \
    -c user.email="${GIT_AUTHOR_EMAIL:-41898282+github-actions[bot]@users.noreply.github.com}" \
    commit --quiet --no-verify -m "$message"
}

branch=${BRANCH:-prime-ci/$run_id}
branch_ok "$branch" "prime-ci/" || usage "branch '$branch' must be a valid branch name under prime-ci/"

printf '## prime-ci publish (run %s)\n\n' "$run_id" >>"$summary"

# Nothing to publish (an unsuccessful run, an empty patch, no harness proposal): only the comment.
patch="$artifacts/patch.diff"
skipped=""
if truthy "${REQUIRE_SUCCESS:-true}" && [[ $(helper field "$result" success) != true ]]; then
  skipped="the run did not succeed ($(helper field "$result" stop_reason))"
elif [[ ! -s $patch ]]; then
  skipped="the run changed nothing"
fi
if [[ -n $skipped ]] && ! { truthy "${HARNESS:-true}" && [[ -f $artifacts/harness-pr.md ]]; }; then
  note "$skipped: no change pull request"
  printf -- '- nothing to publish: %s\n' "$skipped" >>"$summary"
  finish --note "No fix pull request: ${skipped% (*)}."
fi

# 1. The target: the pull request the run worked on (its head must not have moved), or a base branch.
if [[ -n $pr_number ]]; then
  [[ $pr_number =~ ^[0-9]+$ ]] || usage "pr-number '$pr_number' is not a number"
  gh api "repos/$repo/pulls/$pr_number" >"$tmp/pr.json" || refuse "cannot read pull request #$pr_number"
  head_sha=$(helper field "$tmp/pr.json" head.sha)
  head_repo=$(helper field "$tmp/pr.json" head.repo.full_name)
  state=$(helper field "$tmp/pr.json" state)
  target=$(helper field "$tmp/pr.json" head.ref)
  [[ $state == open ]] || refuse "pull request #$pr_number is $state"
  [[ $head_repo == "$repo" ]] || refuse "pull request #$pr_number comes from $head_repo, not $repo: no branch to propose to"
  [[ $head_sha == "$base_commit" ]] \
    || refuse "pull request #$pr_number moved: the run started from ${base_commit:0:12}, its head is now ${head_sha:0:12}"
  note "pull request #$pr_number head is still ${base_commit:0:12}"
elif [[ -n ${BASE_BRANCH:-} ]]; then
  target=$BASE_BRANCH
  git check-ref-format --branch "$target" >/dev/null 2>&1 || usage "base-branch '$target' is not a branch name"
  tip=$(git_ ls-remote "$remote" "refs/heads/$target" | cut -f1)
  [[ -n $tip ]] || refuse "branch $target does not exist"
  if [[ $tip != "$base_commit" ]]; then
    truthy "${ALLOW_MOVED_BASE:-false}" \
      || refuse "branch $target moved: the run started from ${base_commit:0:12}, it is now at ${tip:0:12}"
    note "branch $target moved to ${tip:0:12}; the pull request is based on ${base_commit:0:12} (allow-moved-base)"
  fi
else
  usage "give pr-number or base-branch"
fi
base_allowed "$target" || refuse "target branch $target is not in allowed-base-branches"

# 2. Build the commits. Nothing leaves this machine before every check has passed.
[[ $branch != "$target" ]] || usage "branch and target are both $target"
change=false
if [[ -n $skipped ]]; then
  note "$skipped: no change pull request"
else
  size=$(wc -c <"$patch")
  ((size <= ${MAX_PATCH_BYTES:-1000000})) || refuse "patch.diff is $size bytes, more than max-patch-bytes ${MAX_PATCH_BYTES:-1000000}"
  helper secrets "$patch" 2>"$tmp/secrets.err" || refuse "$(tail -n 1 "$tmp/secrets.err")"
  pr_title=$(helper title "$result" "${TITLE:-}")
  commit_patch "$tmp/change" "$base_commit" "$patch" "$pr_title

prime-ci run $run_id on ${base_commit:0:12}." --result "$result"
  helper body "$result" >"$tmp/body.md"
  [[ -z $pr_number ]] || printf '\nProposed for #%s.\n' "$pr_number" >>"$tmp/body.md"
  change=true
fi

# The harness proposal is optional. A run with --harness-branch B --propose leaves harness-pr.md, its state in
# harness/, and result.json harness.branch = B-proposals/RUN_ID. The writer rebuilds that commit from the
# artifacts (B's tip with harness/ replaced and runs/RUN_ID/ added), so the run needs no push rights.
proposal=$(helper field "$result" harness.branch)
harness=false
if truthy "${HARNESS:-true}" && [[ -f $artifacts/harness-pr.md ]]; then
  [[ $proposal == ?*"-proposals/$run_id" ]] \
    || refuse "harness-pr.md is present but result.json harness.branch '$proposal' is not BRANCH-proposals/$run_id"
  harness_branch=${proposal%"-proposals/$run_id"}
  [[ -z ${HARNESS_BRANCH:-} || $harness_branch == "$HARNESS_BRANCH" ]] \
    || refuse "the run proposes to harness branch $harness_branch, not $HARNESS_BRANCH"
  branch_ok "$proposal" "$harness_branch-proposals/" || refuse "'$proposal' is not a valid branch name"
  base_allowed "$harness_branch" || refuse "harness branch $harness_branch is not in allowed-base-branches"
  [[ -d $artifacts/harness ]] || refuse "harness-pr.md is present but the artifacts hold no harness/ state"
  harness_base=$(git_ ls-remote "$remote" "refs/heads/$harness_branch" | cut -f1)
  [[ $harness_base =~ ^[0-9a-f]{40}$ ]] || refuse "harness branch $harness_branch does not exist"
  work="$tmp/harness"
  git_ init --quiet "$work"
  git_ -C "$work" fetch --quiet --no-tags --depth=1 "$remote" "$harness_base" \
    || refuse "cannot fetch ${harness_base:0:12} from $remote"
  git_ -C "$work" checkout --quiet --detach FETCH_HEAD
  git_ -C "$work" rm -r -q --ignore-unmatch -- harness
  rm -rf "${work:?}/harness"
  helper stage-harness "$artifacts/harness" "$work/harness"
  mkdir -p "$work/runs/$run_id"
  for name in session.jsonl result.json; do
    [[ ! -f $artifacts/$name ]] || cp "$artifacts/$name" "$work/runs/$run_id/$name"
  done
  git_ -C "$work" add -A -- harness "runs/$run_id"
  git_ -C "$work" diff --cached --raw -z --no-renames \
    | helper check-paths --forbidden "${FORBIDDEN_PATHS:-}" --max-files 100000 \
      --only "harness/**" --only "runs/$run_id/**" 2>"$work.err" \
    || refuse "harness proposal: $(tail -n 1 "$work.err")"
  git_ -C "$work" diff --cached --binary >"$tmp/harness.diff"
  helper secrets "$tmp/harness.diff" 2>"$tmp/secrets.err" || refuse "harness proposal: $(tail -n 1 "$tmp/secrets.err")"
  git_ -C "$work" -c user.name="${GIT_AUTHOR_NAME:-github-actions[bot]}" \
    -c user.email="${GIT_AUTHOR_EMAIL:-41898282+github-actions[bot]@users.noreply.github.com}" \
    commit --quiet --no-verify -m "prime-ci harness state from run $run_id (proposal)"
  helper sanitize "$artifacts/harness-pr.md" >"$tmp/harness-body.md"
  harness=true
fi

# 3. Push and open (or update) at most one pull request of each kind.
if $change; then
  git_ -C "$tmp/change" push --quiet --force "$remote" "HEAD:refs/heads/$branch" || refuse "cannot push $branch"
  open_or_update_pr "$target" "$branch" "$pr_title" "$tmp/body.md" "${DRAFT:-true}" pr change
  published=true
fi
if $harness; then
  git_ -C "$tmp/harness" push --quiet --force "$remote" "HEAD:refs/heads/$proposal" || refuse "cannot push $proposal"
  open_or_update_pr "$harness_branch" "$proposal" "prime-ci harness proposal from run $run_id" \
    "$tmp/harness-body.md" false harness-pr "harness proposal"
  published=true
fi
[[ $published == true ]] || printf -- '- nothing to publish\n' >>"$summary"
if [[ -n $skipped ]]; then finish --note "No fix pull request: ${skipped% (*)}."; else finish; fi
