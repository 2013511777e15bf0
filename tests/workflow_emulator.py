"""A small GitHub Actions runner for the example workflows, so that a workflow is tested as it is wired.

It runs a workflow's jobs in ``needs`` order on this machine: ``if:`` conditions and ``${{ }}`` expressions are
evaluated as the runner evaluates them (the part of the expression language the workflows and actions here use:
contexts, literals, ``! == != && || ( )``, ``success() failure() always() cancelled() contains() startsWith()``;
a condition without a status function is ANDed with ``success()``; ``==`` on strings ignores case), ``run:`` steps
run in ``bash --noprofile --norc -eo pipefail``, this checkout's composite actions run step by step (their outputs
are set even when a step failed, as the runner does), and the few ``actions/*`` steps are stood in for: checkout
(a clone of the test's origin), setup-python (this interpreter), upload-artifact and download-artifact (a directory
per artifact). Each job gets its own ``github.token``, and ``tokens.json`` in the fake GitHub's directory maps it to
the job's ``permissions:``, so the fake API can answer as GitHub does for what the job was granted.

``GitHub`` itself is the fake ``gh`` on PATH (``fake_github.py``). Nothing here reaches the network.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
STATUS_FUNCTIONS = re.compile(r"\b(success|failure|always|cancelled)\s*\(")
Override = Callable[["Step", dict[str, str]], dict[str, str] | None]


# --- expressions ---------------------------------------------------------------------------------------------------


class ExpressionError(Exception):
    pass


_TOKEN = re.compile(r"\s*(?:(?P<num>-?\d+(?:\.\d+)?)|(?P<str>'(?:[^']|'')*')|(?P<op>==|!=|<=|>=|&&|\|\||[!<>().,\[\]*])"
                    r"|(?P<name>[A-Za-z_][A-Za-z0-9_-]*))")


def _tokens(text: str) -> list[tuple[str, str]]:
    out, pos = [], 0
    while pos < len(text):
        if text[pos:].strip() == "":
            break
        m = _TOKEN.match(text, pos)
        if not m or m.end() == pos:
            raise ExpressionError(f"cannot read {text[pos:]!r} in {text!r}")
        kind = m.lastgroup or ""
        out.append((kind, m.group(kind)))
        pos = m.end()
    return out


def _truthy(value: Any) -> bool:
    if isinstance(value, float) and value != value:
        return False
    return value not in (None, False, 0, "") and value != 0.0


def _number(value: Any) -> float:
    if value is None:
        return 0.0
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value.strip()) if value.strip() else 0.0
        except ValueError:
            return float("nan")
    return float("nan")


def _equal(a: Any, b: Any) -> bool:
    if isinstance(a, str) and isinstance(b, str):
        return a.lower() == b.lower()
    if type(a) is type(b) or (isinstance(a, dict | list) and isinstance(b, dict | list)):
        return bool(a == b)
    return _number(a) == _number(b)


def to_string(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return str(int(value)) if value == int(value) else str(value)
    if isinstance(value, dict | list):
        return json.dumps(value)
    return str(value)


class _Parser:
    def __init__(self, text: str, context: dict[str, Any], functions: dict[str, Callable[..., Any]]) -> None:
        self.tokens, self.pos, self.context, self.functions, self.text = _tokens(text), 0, context, functions, text

    def peek(self) -> tuple[str, str] | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def take(self, value: str | None = None) -> tuple[str, str]:
        token = self.peek()
        if token is None or (value is not None and token[1] != value):
            raise ExpressionError(f"expected {value or 'more'} in {self.text!r}")
        self.pos += 1
        return token

    def parse(self) -> Any:
        value = self.or_()
        if self.peek() is not None:
            raise ExpressionError(f"unexpected {self.peek()} in {self.text!r}")
        return value

    def or_(self) -> Any:
        value = self.and_()
        while self.peek() == ("op", "||"):
            self.take()
            right = self.and_()
            value = value if _truthy(value) else right
        return value

    def and_(self) -> Any:
        value = self.equality()
        while self.peek() == ("op", "&&"):
            self.take()
            right = self.equality()
            value = right if _truthy(value) else value
        return value

    def equality(self) -> Any:
        value = self.comparison()
        while self.peek() in (("op", "=="), ("op", "!=")):
            op = self.take()[1]
            right = self.comparison()
            value = _equal(value, right) if op == "==" else not _equal(value, right)
        return value

    def comparison(self) -> Any:
        value = self.unary()
        while self.peek() in (("op", "<"), ("op", ">"), ("op", "<="), ("op", ">=")):
            op = self.take()[1]
            a, b = _number(value), _number(self.unary())
            value = {"<": a < b, ">": a > b, "<=": a <= b, ">=": a >= b}[op]
        return value

    def unary(self) -> Any:
        if self.peek() == ("op", "!"):
            self.take()
            return not _truthy(self.unary())
        return self.postfix(self.primary())

    def primary(self) -> Any:
        kind, text = self.take()
        if kind == "num":
            return float(text)
        if kind == "str":
            return text[1:-1].replace("''", "'")
        if text == "(":
            value = self.or_()
            self.take(")")
            return value
        if kind != "name":
            raise ExpressionError(f"unexpected {text!r} in {self.text!r}")
        if text in ("true", "false", "null"):
            return {"true": True, "false": False, "null": None}[text]
        if self.peek() == ("op", "("):
            self.take()
            args = []
            while self.peek() != ("op", ")"):
                args.append(self.or_())
                if self.peek() == ("op", ","):
                    self.take()
            self.take(")")
            if text not in self.functions:
                raise ExpressionError(f"unknown function {text}() in {self.text!r}")
            return self.functions[text](*args)
        if text not in self.context:
            raise ExpressionError(f"unknown context {text!r} in {self.text!r}")
        return self.context[text]

    def postfix(self, value: Any) -> Any:
        while self.peek() in (("op", "."), ("op", "[")):
            if self.take()[1] == ".":
                name = self.take()[1]
                value = value.get(name) if isinstance(value, dict) else None
            else:
                key = self.or_()
                self.take("]")
                value = value.get(to_string(key)) if isinstance(value, dict) else None
        return value


def evaluate(text: str, context: dict[str, Any], functions: dict[str, Callable[..., Any]]) -> Any:
    return _Parser(text, context, functions).parse()


_EMBEDDED = re.compile(r"\$\{\{(.*?)\}\}", re.DOTALL)


def interpolate(value: Any, context: dict[str, Any], functions: dict[str, Callable[..., Any]]) -> str:
    text = to_string(value)
    whole = re.fullmatch(r"\s*\$\{\{(.*?)\}\}\s*", text, re.DOTALL)
    if whole:
        return to_string(evaluate(whole.group(1), context, functions))
    return _EMBEDDED.sub(lambda m: to_string(evaluate(m.group(1), context, functions)), text)


def condition(text: Any, context: dict[str, Any], functions: dict[str, Callable[..., Any]]) -> bool:
    source = "success()" if text is None else to_string(text).strip()
    whole = re.fullmatch(r"\$\{\{(.*)\}\}", source, re.DOTALL)
    source = whole.group(1) if whole else source
    if not STATUS_FUNCTIONS.search(source):
        source = f"success() && ({source})"
    return _truthy(evaluate(source, context, functions))


# --- the runner ----------------------------------------------------------------------------------------------------


@dataclass
class Step:
    job: str
    name: str
    id: str | None
    outcome: str = "skipped"
    conclusion: str = "skipped"
    outputs: dict[str, str] = field(default_factory=dict)
    log: str = ""
    summary: str = ""
    children: list[Step] = field(default_factory=list)


@dataclass
class Job:
    name: str
    result: str = "skipped"
    outputs: dict[str, str] = field(default_factory=dict)
    steps: list[Step] = field(default_factory=list)
    token: str = ""

    def log(self) -> str:
        def walk(steps: list[Step]) -> str:
            return "".join(s.log + walk(s.children) for s in steps)

        return walk(self.steps)

    def summary(self) -> str:
        def walk(steps: list[Step]) -> str:
            return "".join(s.summary + walk(s.children) for s in steps)

        return walk(self.steps)

    def commands(self, name: str) -> list[str]:
        """The workflow command lines ``::name ...`` the job printed (as the runner reads them: at a line start)."""
        return [line.strip() for line in self.log().splitlines() if line.lstrip().startswith(f"::{name} ")
                or line.lstrip().startswith(f"::{name}::")]


@dataclass
class WorkflowRun:
    jobs: dict[str, Job]


class Emulator:
    """Runs ``workflow`` (a parsed workflow file) for ``event`` in ``tmp``. ``gh_dir`` is the fake GitHub's state
    directory (tokens are registered there), ``env`` the machine's environment (PATH with the fake ``gh``),
    ``origin`` the repository checkouts clone, ``overrides`` stand-ins for steps by ``job/step-id``."""

    def __init__(self, tmp: Path, *, event_name: str, event: dict[str, Any], repository: str, env: dict[str, str],
                 gh_dir: Path, origin: Path, secrets_: dict[str, str] | None = None,
                 overrides: dict[str, Override] | None = None, workflow_name: str = "", run_id: int = 4242,
                 run_attempt: int = 1) -> None:  # fmt: skip
        self.tmp, self.event_name, self.event, self.repository = tmp, event_name, event, repository
        self.env, self.gh_dir, self.origin = env, gh_dir, origin
        self.secrets, self.overrides = secrets_ or {}, overrides or {}
        self.workflow_name, self.run_id, self.run_attempt = workflow_name, run_id, run_attempt
        self.artifacts = tmp / "artifact-store"
        self.artifacts.mkdir(parents=True, exist_ok=True)
        self.event_path = tmp / "event.json"
        self.event_path.write_text(json.dumps(event))

    # -- workflow and jobs --

    def run(self, workflow: dict[str, Any]) -> WorkflowRun:
        name = self.workflow_name or str(workflow.get("name", "workflow"))
        jobs: dict[str, Job] = {}
        pending = dict(workflow["jobs"])
        while pending:
            ready = [j for j, spec in pending.items() if all(n in jobs for n in _needs(spec))]
            if not ready:
                raise ExpressionError(f"jobs wait on each other: {sorted(pending)}")
            for job_id in ready:
                jobs[job_id] = self._job(job_id, pending.pop(job_id), jobs, name)
        return WorkflowRun(jobs)

    def _job(self, job_id: str, spec: dict[str, Any], done: dict[str, Job], workflow_name: str) -> Job:
        job = Job(job_id)
        needs = {n: {"result": done[n].result, "outputs": done[n].outputs} for n in _needs(spec)}
        token = f"ghs_{job_id}_{secrets.token_hex(8)}"
        job.token = token
        tokens_file = self.gh_dir / "tokens.json"
        tokens = json.loads(tokens_file.read_text()) if tokens_file.exists() else {}
        tokens[token] = {"kind": "github", "job": job_id, "permissions": spec.get("permissions", {})}
        tokens_file.write_text(json.dumps(tokens))
        home = self.tmp / "jobs" / job_id
        workspace, temp = home / "workspace", home / "temp"
        workspace.mkdir(parents=True, exist_ok=True)
        temp.mkdir(parents=True, exist_ok=True)
        github = {
            "event": self.event, "event_name": self.event_name, "repository": self.repository,
            "token": token, "run_id": str(self.run_id), "run_attempt": str(self.run_attempt),
            "server_url": "https://github.com", "workflow": workflow_name, "workspace": str(workspace),
            "job": job_id, "actor": self.event.get("sender", {}).get("login", "octo"),
            "triggering_actor": self.event.get("sender", {}).get("login", "octo"),
        }  # fmt: skip
        state = {"failed": False, "needs_ok": all(n["result"] == "success" for n in needs.values())}
        context: dict[str, Any] = {"github": github, "needs": needs, "secrets": self.secrets,
                                   "runner": {"temp": str(temp), "os": "Linux"}, "env": {}, "steps": {},
                                   "inputs": {}, "vars": {}, "matrix": {}, "job": {"status": "success"}}  # fmt: skip
        job_functions = _functions(lambda: state["needs_ok"])
        if not condition(spec.get("if"), context, job_functions):
            return job
        base_env = {
            **self.env, "CI": "true", "GITHUB_ACTIONS": "true", "GITHUB_REPOSITORY": self.repository,
            "GITHUB_EVENT_NAME": self.event_name, "GITHUB_EVENT_PATH": str(self.event_path),
            "GITHUB_RUN_ID": str(self.run_id), "GITHUB_RUN_ATTEMPT": str(self.run_attempt),
            "GITHUB_SERVER_URL": "https://github.com", "GITHUB_WORKFLOW": workflow_name, "GITHUB_JOB": job_id,
            "GITHUB_WORKSPACE": str(workspace), "RUNNER_TEMP": str(temp), "RUNNER_OS": "Linux",
            "GITHUB_ACTOR": github["actor"], "GITHUB_TRIGGERING_ACTOR": github["triggering_actor"],
        }  # fmt: skip
        job.steps = self._steps(job_id, spec.get("steps", []), context, base_env, state, workspace, None)
        job.result = "failure" if state["failed"] else "success"
        context["steps"] = {s.id: _step_context(s) for s in job.steps if s.id}
        job.outputs = {k: interpolate(v, context, job_functions) for k, v in (spec.get("outputs") or {}).items()}
        return job

    # -- steps --

    def _steps(self, job_id: str, specs: list[dict[str, Any]], context: dict[str, Any], base_env: dict[str, str],
               state: dict[str, Any], workspace: Path, action_path: Path | None) -> list[Step]:  # fmt: skip
        steps: list[Step] = []
        functions = _functions(lambda: not state["failed"])
        for index, spec in enumerate(specs):
            step = Step(job_id, str(spec.get("name") or spec.get("uses") or f"step {index}"), spec.get("id"))
            steps.append(step)
            context["steps"] = {s.id: _step_context(s) for s in steps if s.id and s is not step}
            if not condition(spec.get("if"), context, functions):
                continue
            env = {**base_env, **{k: interpolate(v, context, functions) for k, v in (spec.get("env") or {}).items()}}
            if action_path is not None:
                env["GITHUB_ACTION_PATH"] = str(action_path)
            ok = self._step(step, spec, context, env, workspace, functions)
            step.outcome = "success" if ok else "failure"
            step.conclusion = "success" if ok or _truthy(spec.get("continue-on-error")) else "failure"
            if step.conclusion == "failure":
                state["failed"] = True
        return steps

    def _step(self, step: Step, spec: dict[str, Any], context: dict[str, Any], env: dict[str, str], workspace: Path,
              functions: dict[str, Callable[..., Any]]) -> bool:  # fmt: skip
        key = f"{step.job}/{step.id}"
        with_ = {k: interpolate(v, context, functions) for k, v in (spec.get("with") or {}).items()}
        if key in self.overrides:
            outputs = self.overrides[key](step, {**with_, **{f"env:{k}": v for k, v in env.items()}})
            step.outputs = outputs or {}
            return outputs is not None
        if "run" in spec:
            return self._shell(step, interpolate(spec["run"], context, functions), env, workspace)
        uses = str(spec["uses"])
        name, _, _ref = uses.partition("@")
        if name == "actions/checkout":
            return self._checkout(step, with_, workspace)
        if name == "actions/setup-python":
            step.outputs = {"python-path": sys.executable, "python-version": "3.11"}
            return True
        if name == "actions/upload-artifact":
            return self._upload(step, with_)
        if name == "actions/download-artifact":
            return self._download(step, with_)
        if name.startswith("prime-ci/prime-ci"):
            return self._composite(step, ROOT / name.removeprefix("prime-ci/prime-ci").lstrip("/"), with_, context,
                                   env, workspace)  # fmt: skip
        raise ExpressionError(f"no stand-in for {uses}")

    def _shell(self, step: Step, script: str, env: dict[str, str], workspace: Path) -> bool:
        files = {}
        for name in ("GITHUB_OUTPUT", "GITHUB_STEP_SUMMARY", "GITHUB_ENV", "GITHUB_PATH"):
            path = self.tmp / "step-files" / f"{secrets.token_hex(6)}-{name.lower()}"
            path.parent.mkdir(exist_ok=True)
            path.write_text("")
            files[name] = path
        script_file = self.tmp / "step-files" / f"{secrets.token_hex(6)}.sh"
        script_file.write_text(script)
        full_env = {**env, **{k: str(v) for k, v in files.items()}}
        proc = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", str(script_file)], cwd=workspace,
                              env=full_env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, timeout=600)  # fmt: skip
        step.log = proc.stdout
        step.outputs = read_output_file(files["GITHUB_OUTPUT"])
        step.summary = files["GITHUB_STEP_SUMMARY"].read_text()
        return proc.returncode == 0

    def _composite(self, step: Step, path: Path, with_: dict[str, str], context: dict[str, Any],
                   env: dict[str, str], workspace: Path) -> bool:  # fmt: skip
        action = load_yaml(path / "action.yml")
        declared = action.get("inputs") or {}
        unknown = set(with_) - set(declared)
        if unknown:
            raise ExpressionError(f"{path.name}: unexpected input(s) {sorted(unknown)}")
        inner_github = {**context["github"], "action_path": str(path)}
        inner: dict[str, Any] = {**context, "github": inner_github, "steps": {}, "inputs": {}}
        functions = _functions(lambda: True)
        inputs = {}
        for name, spec in declared.items():
            inputs[name] = with_[name] if name in with_ else interpolate((spec or {}).get("default", ""), inner,
                                                                          functions)  # fmt: skip
        inner["inputs"] = inputs
        state = {"failed": False}
        step.children = self._steps(step.job, action["runs"]["steps"], inner, env, state, workspace, path)
        inner["steps"] = {s.id: _step_context(s) for s in step.children if s.id}
        step.outputs = {k: interpolate((v or {}).get("value", ""), inner, functions)
                        for k, v in (action.get("outputs") or {}).items()}  # fmt: skip
        return not state["failed"]

    def _checkout(self, step: Step, with_: dict[str, str], workspace: Path) -> bool:
        dest = workspace / with_.get("path", "")
        if dest.exists() and any(dest.iterdir()):
            shutil.rmtree(dest)
        proc = subprocess.run(["git", "clone", "--quiet", str(self.origin), str(dest)], capture_output=True, text=True)
        if proc.returncode == 0 and with_.get("ref"):
            proc = subprocess.run(["git", "checkout", "--quiet", with_["ref"]], cwd=dest, capture_output=True,
                                  text=True)  # fmt: skip
        step.log = proc.stdout + proc.stderr
        return proc.returncode == 0

    def _upload(self, step: Step, with_: dict[str, str]) -> bool:
        name = with_.get("name") or "artifact"
        paths = [Path(line.strip()) for line in with_.get("path", "").splitlines() if line.strip()]
        existing = [p for p in paths if p.exists()]
        if not existing:
            step.log = f"No files were found with the provided path: {with_.get('path')}. No artifacts uploaded.\n"
            return with_.get("if-no-files-found", "warn") != "error"
        dest = self.artifacts / name
        if dest.exists():
            step.log = f"an artifact named {name} exists already\n"
            return False
        root = Path(os.path.commonpath([str(p if p.is_dir() else p.parent) for p in existing]))
        for p in existing:
            target = dest / p.relative_to(root)
            if p.is_dir():
                shutil.copytree(p, target, dirs_exist_ok=True)
            else:
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(p, target)
        step.outputs = {"artifact-id": str(len(list(self.artifacts.iterdir())))}
        return True

    def _download(self, step: Step, with_: dict[str, str]) -> bool:
        src = self.artifacts / with_.get("name", "")
        if not with_.get("name") or not src.is_dir():
            step.log = f"Unable to download artifact(s): Artifact not found for name: {with_.get('name')}\n"
            return False
        shutil.copytree(src, Path(with_["path"]), dirs_exist_ok=True)
        step.outputs = {"download-path": with_["path"]}
        return True


def _needs(spec: dict[str, Any]) -> list[str]:
    needs = spec.get("needs") or []
    return [needs] if isinstance(needs, str) else list(needs)


def _step_context(step: Step) -> dict[str, Any]:
    return {"outputs": step.outputs, "outcome": step.outcome, "conclusion": step.conclusion}


def _functions(ok: Callable[[], bool]) -> dict[str, Callable[..., Any]]:
    return {
        "success": lambda: ok(), "failure": lambda: not ok(), "always": lambda: True, "cancelled": lambda: False,
        "contains": lambda a, b: (to_string(b).lower() in to_string(a).lower()) if not isinstance(a, list)
        else any(_equal(x, b) for x in a),
        "startsWith": lambda a, b: to_string(a).lower().startswith(to_string(b).lower()),
        "endsWith": lambda a, b: to_string(a).lower().endswith(to_string(b).lower()),
        "toJSON": lambda a: json.dumps(a, indent=2), "fromJSON": lambda a: json.loads(to_string(a)),
    }  # fmt: skip


def read_output_file(path: Path) -> dict[str, str]:
    """``$GITHUB_OUTPUT`` as the runner reads it: ``key=value`` lines and ``key<<DELIMITER`` blocks."""
    out: dict[str, str] = {}
    lines = path.read_text().split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        i += 1
        if not line:
            continue
        if "<<" in line and ("=" not in line or line.index("<<") < line.index("=")):
            key, delimiter = line.split("<<", 1)
            block = []
            while i < len(lines) and lines[i] != delimiter:
                block.append(lines[i])
                i += 1
            i += 1
            out[key] = "\n".join(block)
        else:
            key, _, value = line.partition("=")
            out[key] = value
    return out


def load_yaml(path: Path) -> Any:
    from ruamel.yaml import YAML

    return YAML(typ="safe").load(path.read_text())
