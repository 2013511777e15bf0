"""A fake GitHub for the action's and the workflows' tests: a ``gh`` on PATH that answers the REST calls and ``gh pr``
commands prime-ci's scripts make from a state file, records every request, and answers as GitHub does where it
matters here: github.token's permissions are its job's (``tokens.json``: each token and what it was granted), it cannot
read the repository's Actions settings (that needs the administration permission), and with "Allow GitHub Actions
to create and approve pull requests" off a pull request it asks for is refused with GitHub's words."""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

GH = r'''#!PYTHON
"""A stand-in for the GitHub CLI (tests/fake_github.py)."""
import json, os, re, sys
from pathlib import Path

state_dir = Path(os.environ["FAKE_GH_DIR"])
args = sys.argv[1:]
token = os.environ.get("GH_TOKEN", "")
tokens_file = state_dir / "tokens.json"
tokens = json.loads(tokens_file.read_text()) if tokens_file.exists() else {}
identity = tokens.get(token, {"kind": "user", "permissions": None})
state_file = state_dir / "state.json"
state = json.loads(state_file.read_text())
NOT_PERMITTED = "GitHub Actions is not permitted to create or approve pull requests."


def record(**fields):
    with open(state_dir / "requests.jsonl", "a") as log:
        log.write(json.dumps({"argv": args, "token": token, **fields}) + "\n")


def save():
    state_file.write_text(json.dumps(state, indent=1))


def fail(status, message):
    print(json.dumps({"message": message, "status": str(status)}))
    print(f"gh: {message} (HTTP {status})", file=sys.stderr)
    sys.exit(1)


def allowed(scope, level):
    perms = identity.get("permissions")
    if perms is None:
        return True  # a user's token: what the user may do
    if perms in ("write-all", "read-all"):
        return level == "read" or perms == "write-all"
    granted = perms.get(scope, "none")
    return granted == "write" or (level == "read" and granted == "read")


def need(scope, level):
    if not allowed(scope, level):
        fail(403, "Resource not accessible by integration")


def me():
    if identity.get("kind") == "github":
        return {"login": "github-actions[bot]", "type": "Bot", "id": 41898282}
    return {"login": identity.get("login", "octo-user"), "type": "User", "id": 7}


def api(argv):
    method, fields, paginate, jq, path = "GET", {}, False, None, None
    i = 0
    while i < len(argv):
        a = argv[i]
        if a in ("--method", "-X"):
            method = argv[i + 1].upper(); i += 2; continue
        if a in ("-f", "--raw-field", "-F", "--field"):
            key, _, value = argv[i + 1].partition("=")
            if a in ("-F", "--field") and value.startswith("@"):
                value = Path(value[1:]).read_text()
            fields[key] = value; i += 2; continue
        if a == "--paginate":
            paginate = True; i += 1; continue
        if a in ("--jq", "-q"):
            jq = argv[i + 1]; i += 2; continue
        if a in ("-H", "--header"):
            i += 2; continue
        path = a.lstrip("/"); i += 1
    if fields and method == "GET":
        method = "POST"
    record(method=method, path=path, fields=fields)
    repo = state["repo"]
    m = re.fullmatch(rf"repos/{re.escape(repo)}/(.*)", path or "")
    rest = m.group(1) if m else None
    if path == "user":
        if identity.get("kind") == "github":
            fail(403, "Resource not accessible by integration")
        return me()
    if rest is None:
        fail(404, "Not Found")
    if m2 := re.fullmatch(r"collaborators/([^/]+)/permission", rest):
        permission = state.get("collaborators", {}).get(m2.group(1))
        if permission is None:
            fail(404, "Not Found")
        return {"permission": permission}
    if rest == "actions/permissions/workflow":
        if identity.get("kind") == "github" or not state.get("settings_readable", False):
            fail(403, "Resource not accessible by integration")
        return state["workflow_permissions"]
    if m2 := re.fullmatch(r"pulls/(\d+)", rest):
        pull = state.get("pulls", {}).get(m2.group(1))
        if pull is None:
            fail(404, "Not Found")
        return pull
    if rest == "pulls" and method == "POST":
        need("pull-requests", "write")
        if identity.get("kind") == "github" and not state["workflow_permissions"]["can_approve_pull_request_reviews"]:
            fail(403, NOT_PERMITTED)
        head = fields.get("head", "")
        if ".." in head or head not in state.get("branches", []):
            print(json.dumps({"message": "Validation Failed", "errors": [
                {"resource": "PullRequest", "field": "head", "code": "invalid"}], "status": "422"}))
            print("gh: Validation Failed (HTTP 422)", file=sys.stderr)
            sys.exit(1)
        fail(500, "the fake opens pull requests through gh pr create only")
    if m2 := re.fullmatch(r"issues/(\d+)/comments", rest):
        if method == "GET":
            comments = [c for c in state["comments"] if c["issue"] == int(m2.group(1))]
            pages = [comments[j:j + 2] for j in range(0, len(comments), 2)] or [[]]
            if not paginate:
                pages = pages[:1]
            for page in pages:  # gh --paginate prints each page's array, one after the other
                print(json.dumps(page))
            return None
        need("pull-requests", "write")
        state["next_id"] += 1
        comment = {"id": state["next_id"], "issue": int(m2.group(1)), "user": me(), "body": fields["body"],
                   "html_url": f"https://github.com/{repo}/pull/{m2.group(1)}#issuecomment-{state['next_id']}"}
        state["comments"].append(comment)
        save()
        return comment
    if m2 := re.fullmatch(r"issues/comments/(\d+)", rest):
        comment = next((c for c in state["comments"] if c["id"] == int(m2.group(1))), None)
        if comment is None:
            fail(404, "Not Found")
        if method == "PATCH":
            need("pull-requests", "write")  # as GitHub: a writer may edit anyone's comment (the scripts pick theirs)
            comment["body"] = fields["body"]
            comment["edits"] = comment.get("edits", 0) + 1
            save()
        return comment
    fail(404, "Not Found")


def jq_path(value, expr):
    for part in expr.strip().lstrip(".").split("."):
        if part:
            value = value.get(part) if isinstance(value, dict) else None
    return value


if args[:1] == ["api"]:
    jq = args[args.index("--jq") + 1] if "--jq" in args else None
    answer = api(args[1:])
    if answer is not None:
        if jq is not None:
            value = jq_path(answer, jq)
            print(value if isinstance(value, str) else json.dumps(value))
        else:
            print(json.dumps(answer))
elif args[:2] == ["pr", "list"]:
    head = args[args.index("--head") + 1]
    record(method="GET", path="pr list", fields={"head": head})
    found = [p for p in state.get("opened", []) if p["head"] == head and p["state"] == "open"]
    print(json.dumps([{"number": p["number"], "url": p["url"]} for p in found[:1]]))
elif args[:2] == ["pr", "create"]:
    fields = {k: args[args.index(f"--{k}") + 1] for k in ("base", "head", "title") if f"--{k}" in args}
    fields["body"] = Path(args[args.index("--body-file") + 1]).read_text()
    fields["draft"] = "--draft" in args
    record(method="POST", path="pr create", fields=fields)
    if not allowed("pull-requests", "write"):
        print("pull request create failed: GraphQL: Resource not accessible by integration (createPullRequest)",
              file=sys.stderr)
        sys.exit(1)
    if identity.get("kind") == "github" and not state["workflow_permissions"]["can_approve_pull_request_reviews"]:
        print("pull request create failed: GraphQL: " + NOT_PERMITTED.rstrip(".") + " (createPullRequest)",
              file=sys.stderr)
        sys.exit(1)
    state["next_pull"] += 1
    url = f"https://github.com/{state['repo']}/pull/{state['next_pull']}"
    state.setdefault("opened", []).append({"number": state["next_pull"], "url": url, "state": "open", **fields})
    save()
    print(url)
elif args[:2] == ["pr", "edit"]:
    fields = {"number": args[2]}
    if "--body-file" in args:
        fields["body"] = Path(args[args.index("--body-file") + 1]).read_text()
    record(method="PATCH", path="pr edit", fields=fields)
elif args[:2] == ["auth", "git-credential"]:
    sys.exit(0)
else:
    record(method="?", path=" ".join(args))
    print("fake gh: unexpected call " + " ".join(args), file=sys.stderr)
    sys.exit(1)
'''


@dataclass
class FakeGitHub:
    """The fake's state directory and the environment that puts its ``gh`` first on PATH."""

    dir: Path
    env: dict[str, str]

    @classmethod
    def create(cls, tmp: Path, env: dict[str, str], *, repo: str = "o/r", pulls: dict[str, Any] | None = None,
               allow_pull_requests: bool = True, collaborators: dict[str, str] | None = None,
               branches: list[str] | None = None) -> FakeGitHub:  # fmt: skip
        state_dir, bin_dir = tmp / "github", tmp / "github-bin"
        state_dir.mkdir(parents=True, exist_ok=True)
        bin_dir.mkdir(parents=True, exist_ok=True)
        gh = bin_dir / "gh"
        gh.write_text(GH.replace("#!PYTHON", f"#!{sys.executable}", 1))
        gh.chmod(0o755)
        state = {
            "repo": repo, "pulls": pulls or {}, "comments": [], "next_id": 1000, "next_pull": 7,
            "collaborators": collaborators if collaborators is not None else {"octo": "write"},
            "workflow_permissions": {"default_workflow_permissions": "read",
                                     "can_approve_pull_request_reviews": allow_pull_requests},
            "branches": branches or [],
        }  # fmt: skip
        (state_dir / "state.json").write_text(json.dumps(state, indent=1))
        full = {**env, "PATH": f"{bin_dir}{os.pathsep}{env.get('PATH', '')}", "FAKE_GH_DIR": str(state_dir)}
        return cls(state_dir, full)

    @property
    def state(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads((self.dir / "state.json").read_text())
        return data

    def update(self, **changes: Any) -> None:
        state = self.state
        state.update(changes)
        (self.dir / "state.json").write_text(json.dumps(state, indent=1))

    def add_job_token(self, token: str, permissions: dict[str, str]) -> None:
        """A job's github.token, granted the job's ``permissions:``."""
        path = self.dir / "tokens.json"
        tokens = json.loads(path.read_text()) if path.exists() else {}
        tokens[token] = {"kind": "github", "permissions": permissions}
        path.write_text(json.dumps(tokens))

    def add_token(self, token: str, login: str, permissions: dict[str, str] | None = None) -> None:
        """A user's token (a personal access token): GitHub answers as that user."""
        path = self.dir / "tokens.json"
        tokens = json.loads(path.read_text()) if path.exists() else {}
        tokens[token] = {"kind": "user", "login": login, "permissions": permissions}
        path.write_text(json.dumps(tokens))

    def requests(self) -> list[dict[str, Any]]:
        log = self.dir / "requests.jsonl"
        return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []

    def comments(self, issue: int) -> list[dict[str, Any]]:
        return [c for c in self.state["comments"] if c["issue"] == issue]
