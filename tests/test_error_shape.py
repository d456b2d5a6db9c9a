"""One error type in the domain (issue 25): an error about something the user wrote (a field of a
stack file or environments.yaml, a command-line argument or option, a path) is a UserError with
problems (aksgpu.errors.Problem: path, value, rule, fix). A message-only UserError is kept only where
no one value is at fault (a missing prerequisite, an operation that failed, a file on disk in the
way); each such call is listed below with the reason. The source is read with ast, so a call over
several lines, an f-string or a subclass of UserError (EnvironmentNotRendered) is found as well."""

from __future__ import annotations

import ast
import functools
import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import aksgpu
from aksgpu.cli.app import app

PACKAGE = Path(aksgpu.__file__).parent
runner = CliRunner()

# (file under aksgpu/, enclosing function, the message's first 40 characters as _message_start
# writes them, {} for a formatted value): why the error is a message and not a Problem.
ALLOWED: dict[tuple[str, str, str], str] = {
    ("ci/comment.py", "post_or_update", "not in an Azure Pipelines pull-request r"):
        "a missing prerequisite: the pipeline's variables, set by Azure Pipelines, not by the user",
    ("ci/comment.py", "send", "Azure DevOps answered {} to {} {}.{}"):
        "an operation failed: Azure DevOps refused the request",
    ("ci/comment.py", "send", "cannot reach Azure DevOps ({}). Fix: che"):
        "an operation failed: the network",
    ("ci/oidc.py", "run_oidc", "str(error)"):
        "an az command failed: AzStepFailed says which step, its output and how to rerun",
    ("ci/pipelines.py", "_git", "git is not installed. Fix: install git ("):
        "a missing prerequisite: git",
    ("ci/pipelines.py", "_git", "`git {}` failed: {}. Fix: run inside the"):
        "an operation failed: a git command",
    ("ci/scaffold.py", "new_project", "aksgpu is not installed as a package, so"):
        "a missing prerequisite: aksgpu installed as a package",
    ("ci/scaffold.py", "new_project", "{} exists: the repository {} already has"):
        "files already in the repository are in the way, not a value the user wrote",
    ("ci/scaffold.py", "new_project", "cannot write the workflows under {}: {}."):
        "an operation failed: the operating system refused to write a file",
    ("cli/ci/commands.py", "oidc", "AZ_MISSING"):
        "a missing prerequisite: the Azure CLI",
    ("cli/workflow/commands.py", "destroy", "stack {}'s state still protects {} resou"):
        "the stack's state in the backend, not a value the user wrote, is in the way",
    ("cli/workflow/commands.py", "kubeconfig", "stack {} has no kubeconfig output: the c"):
        "the stack is not deployed yet: a missing prerequisite",
    ("cli/workflow/commands.py", "bootstrap", "AZ_MISSING"):
        "a missing prerequisite: the Azure CLI",
    ("cli/workflow/fleet.py", "refuse_a_fleet_with_members", "stack {} is a fleet's shared stack, and "):
        "members still deployed are in the way: an order of operations, not one value",
    ("cli/workflow/runner.py", "open_stack", "PULUMI_CLI_MISSING"):
        "a missing prerequisite: the Pulumi CLI",
    ("cli/workflow/runner.py", "open_stack", "`pulumi version` failed (exit code {}): "):
        "an operation failed: the Pulumi CLI on PATH does not work",
    ("cli/workflow/runner.py", "require_ready", "readiness_message(command, target.stack,"):
        "missing prerequisites (Azure login, a passphrase, ...), listed together",
    ("cli/workflow/runner.py", "require_rendered", "{} is out of date with stacks/environmen"):
        "a stack file out of date with environments.yaml as a whole, not one value",
    ("environments/file.py", "load_environments", "{} is a folder, not the environments fil"):
        "a folder on disk where the environments file belongs, not a value the user wrote",
    ("environments/initialize.py", "_add_environment", "{} already exists and was not rendered f"):
        "a file on disk that aksgpu did not render is in the way (the fix names --force)",
    ("environments/initialize.py", "_append_environment", "init adds environments at the end of the"):
        "the layout of environments.yaml, not one value, keeps init from appending",
    ("environments/initialize.py", "_check_round_trip", "could not add the environment to {} with"):
        "an operation failed: the appended file would not read back as written",
    ("environments/render.py", "write_rendered", "rendered.refusal()"):
        "the render replaces Azure resources, possibly for several fields; the fix is --allow-replace",
    ("environments/render.py", "write_rendered", "{} was edited by hand: {}. render will n"):
        "a stack file edited by hand is in the way (the fix names --force)",
    ("environments/render.py", "render_state", "{} was rendered as member {} of fleet {}"):
        "a stack file left from a fleet member environments.yaml no longer lists: the two files disagree",
    ("environments/render.py", "render_state", "{} was rendered from environment {}, whi"):
        "a stack file left from an environment environments.yaml no longer defines: the two files disagree",
    ("environments/validation.py", "validate_targets", "nothing to validate: no environments and"):
        "nothing there: no environments and no stack files",
    ("plan/manifests.py", "write_manifests", "cannot write the manifests to {}: {}. Fi"):
        "an operation failed: the operating system refused to write the folder",
    ("preflight/tables.py", "price_table", "{}. Fix: run `aksgpu prices refresh` aga"):
        "the project's price table, a file `aksgpu prices refresh` wrote, is broken: its error names the line",
    ("project/files.py", "locked_for_writing", "cannot open {} to lock it: {}. Fix: chec"):
        "an operation failed: the operating system refused a lock",
    ("project/files.py", "refuse_symlink_loop", "{} is a symbolic link to {}, which leads"):
        "a broken symbolic link on disk, not a value the user wrote",
    ("project/files.py", "write_text_atomically", "cannot write {}: {}. The file is as it w"):
        "an operation failed: the operating system refused to write a file",
    ("project/files.py", "read_text_if_exists", "cannot read {}: {}. Fix: check its permi"):
        "an operation failed: the operating system refused to read a file",
    ("project/files.py", "read_text_if_exists", "{} is not UTF-8 text (byte {}). Fix: sav"):
        "a file's bytes, not a field: the message names the byte",
    ("project/generated.py", "write_generated", "{} {}; aksgpu will not overwrite it. Fix"):
        "a file on disk that aksgpu did not write is in the way (the fix names --force)",
    ("project/stackfile.py", "find_project_dir", "no Pulumi.yaml in {} or any folder above"):
        "a missing prerequisite: a project (Pulumi.yaml) around the current folder",
    ("project/stackfile.py", "load_yaml", "cannot read {}: {}. Fix: check the path "):
        "an operation failed: the operating system refused to read a file",
    ("project/stackfile.py", "load_yaml", "{} is larger than {} MiB, the most aksgp"):
        "a file's size, not a field",
    ("project/stackfile.py", "load_yaml", "{} is not valid YAML: {}."):
        "a YAML syntax error: found by line and column, before there is a field to name",
    ("workflow/backend.py", "run_bootstrap", "str(error)"):
        "an az command failed: AzStepFailed says which step, its output and how to rerun",
    ("workflow/kubeconfig.py", "kubeconfig_for_login", "str(error)"):
        "the stack's kubeconfig output (written by Azure, not the user) cannot be converted",
    ("cli/app.py", "_invoke", "internal error ({}: {}). This is a bug i"):
        "a bug in aksgpu, not bad input: the message says how to report it",
    ("cli/environments/commands.py", "_render", "{} does not exist. Fix: create it with `"):
        "a missing prerequisite: environments.yaml",
    ("cli/environments/commands.py", "_render", "{} defines no environments, so there is "):
        "nothing to act on: the file holds no environment (no one value is at fault)",
    ("cli/environments/commands.py", "schema", "{} exists and is not a JSON Schema, so w"):
        "a file on disk in the way: aksgpu never replaces what it did not write",
    ("cli/preflight/commands.py", "refresh", "{} exists and is not an aksgpu price tab"):
        "a file on disk in the way: aksgpu never replaces what it did not write",
    ("cli/preflight/commands.py", "refresh", "the API has no Linux VM prices for {}; i"):
        "an operation's answer: the Retail Prices API returned nothing for the region",
    ("cli/preflight/commands.py", "refresh", "f'{error} Or name the file with --output"):
        "an operation failed: writing the price table (the OS error says why)",
    ("cli/preflight/commands.py", "refresh", "{}. Offline? Nothing was written; cost e"):
        "an operation failed: the network",
    ("cli/workflow/runner.py", "command_errors", "interrupted. Pulumi was told to stop; if"):
        "an interruption (Ctrl-C), not bad input: the message says how to recover",
    ("promotion/cluster.py", "get", "the API server at {} answered {} for {}."):
        "an operation failed: the API server refused the read",
    ("promotion/cluster.py", "get", "cannot read {} from {}: {}. Fix: start `"):
        "an operation failed: the network (kubectl proxy)",
    ("promotion/cluster.py", "get", "cannot run kubectl: {}. Fix: install kub"):
        "a missing prerequisite: kubectl",
    ("promotion/cluster.py", "get", "`{}` failed: {}. Fix: sign in to the clu"):
        "an operation failed: a kubectl command",
    ("promotion/cluster.py", "get", "`{}` printed no JSON. Fix: run it yourse"):
        "an operation failed: kubectl's output",
    ("promotion/fleet.py", "az_token", "cannot run the Azure CLI: {}. Fix: insta"):
        "a missing prerequisite: the Azure CLI",
    ("promotion/fleet.py", "az_token", "`az account get-access-token` failed: {}"):
        "an az command failed: the sign-in",
    ("promotion/fleet.py", "send", "{} {} answered {}: {}. Fix: check the re"):
        "an operation failed: Azure refused the request",
    ("promotion/fleet.py", "send", "{} {} failed: {}. Fix: check the network"):
        "an operation failed: the network",
    ("promotion/promote.py", "roll_back_canary", "cannot run the Azure CLI: {}. Fix: insta"):
        "a missing prerequisite: the Azure CLI",
    ("promotion/promote.py", "roll_back_canary", "`{}` failed: {}. Fix: AKS rolls a pool b"):
        "an az command failed: AKS refused the rollback",
    ("promotion/promote.py", "apply", "could not change {} without changing wha"):
        "a refusal that protects the user's file: the edit would change other text; nothing was written",
    ("promotion/records.py", "read_file", "cannot read the verdicts file {}: {}. Fi"):
        "an operation failed: reading a file (the OS error says why)",
}


def _message_start(node: ast.expr) -> str:
    """The first 40 characters of a message as written: text as it is, {} for each formatted value,
    and the source of anything else (a name, a call)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        text = node.value
    elif isinstance(node, ast.JoinedStr):
        text = "".join(part.value if isinstance(part, ast.Constant) else "{}" for part in node.values)
    else:
        text = ast.unparse(node)
    return text[:40]


@functools.cache  # each scan parses every module of aksgpu: once per process
def _error_classes() -> frozenset[str]:
    """UserError and its subclasses in aksgpu whose first argument is a message (SpecError's is
    its problems, so it is left out), read from the source."""
    classes = [node for path in sorted(PACKAGE.rglob("*.py"))
               for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))) if isinstance(node, ast.ClassDef)]
    subclasses = {"UserError"}
    while True:
        more = {cls.name for cls in classes
                if any(isinstance(base, ast.Name) and base.id in subclasses for base in cls.bases)} - subclasses
        if not more:
            break
        subclasses |= more
    names = {"UserError"}
    for cls in classes:
        if cls.name not in subclasses:
            continue
        init = next((node for node in cls.body if isinstance(node, ast.FunctionDef) and node.name == "__init__"),
                    None)
        if init is None or (len(init.args.args) > 1 and init.args.args[1].arg == "message"):
            names.add(cls.name)
    return frozenset(names)


def _message_of_fail(node: ast.Call) -> ast.expr | None:
    """The message of a `fail(...)` call (cli/console.py) given a text rather than an error: an error
    by another road than UserError, so it is held to the same rule."""
    if node.args and isinstance(node.args[0], (ast.Constant, ast.JoinedStr, ast.IfExp, ast.BinOp)):
        return node.args[0]
    return None


@functools.cache
def message_only_errors() -> tuple[tuple[str, str, str, int], ...]:
    """Every call of UserError (or a subclass) in aksgpu without `problems=`, and every `fail` with a
    text: (file, function, message start, line)."""
    classes = _error_classes()
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE).as_posix()
        tree = ast.parse(path.read_text(encoding="utf-8"))
        functions = [node for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))]
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            name = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", None)
            if name == "fail" and relative.startswith("cli/"):
                message = _message_of_fail(node)
                if message is None:
                    continue
            elif name not in classes or any(keyword.arg == "problems" for keyword in node.keywords):
                continue
            else:
                message = node.args[0] if node.args else next(
                    (keyword.value for keyword in node.keywords if keyword.arg == "message"), None)
            if message is None:  # UserError() with nothing at all
                found.append((relative, "?", "", node.lineno))
                continue
            enclosing = [f for f in functions if f.lineno <= node.lineno <= (f.end_lineno or f.lineno)]
            function = max(enclosing, key=lambda f: f.lineno).name if enclosing else "<module>"
            found.append((relative, function, _message_start(message), node.lineno))
    return tuple(found)


def test_every_message_only_user_error_is_on_the_allow_list_with_a_reason() -> None:
    new = [f"aksgpu/{path}:{line} in {function}(): {start!r}" for path, function, start, line in
           message_only_errors() if (path, function, start) not in ALLOWED]
    assert not new, (
        "A UserError with a message only. If it is about something the user wrote (a field, an argument or "
        "option, a path, an environment name), raise UserError(problems=[Problem(path, value, rule, fix)]) "
        "instead; if no one value is at fault, add it to ALLOWED with the reason:\n" + "\n".join(new))


def test_the_allow_list_names_only_calls_that_exist() -> None:
    found = {(path, function, start) for path, function, start, _ in message_only_errors()}
    assert not set(ALLOWED) - found, sorted(set(ALLOWED) - found)
    assert all(reason.strip() for reason in ALLOWED.values())


def test_the_scan_finds_a_message_only_error_over_several_lines_and_in_a_subclass(tmp_path: Path) -> None:
    """The scanner itself: a multi-line f-string call is found, a call with problems= is not."""
    tree = ast.parse('def f(x):\n    raise UserError(\n        f"{x} is bad. "\n        "Fix: no.")\n'
                     'def g(x):\n    raise UserError(problems=[Problem("p", x, "r", "f")])\n')
    calls = [node for node in ast.walk(tree) if isinstance(node, ast.Call) and getattr(node.func, "id", "") ==
             "UserError"]
    assert [_message_start(call.args[0]) for call in calls if call.args] == ["{} is bad. Fix: no."]
    assert "EnvironmentNotRendered" in _error_classes() and "SpecError" not in _error_classes()


# --- the converted errors, as a person and a script see them ----------------------------------


def _problem(result: Any) -> dict[str, Any]:
    document = json.loads(result.stdout)
    [problem] = document["error"]["problems"]
    return dict(problem)


def test_an_unknown_stack_names_the_argument_its_value_and_the_known_stacks(project: Path) -> None:
    result = runner.invoke(app, ["plan", "staging", "--json"])
    assert result.exit_code == 2
    problem = _problem(result)
    assert (problem["path"], problem["value"]) == ("STACK argument", "staging")
    assert "use one of: dev, prod" in problem["fix"]
    assert result.stderr.startswith('error: STACK argument = "staging": no stack of that name')


def test_a_bad_set_assignment_names_the_option_and_the_assignment(project: Path) -> None:
    result = runner.invoke(app, ["init", "staging", "--preset", "dev", "--location", "eastus2",
                                 "--set", "controlPlane.tierr=Premium"])
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith('error: --set = "controlPlane.tierr=Premium": "tierr" is not a field at '
                                    'controlPlane.'), result.stderr
    assert 'did you mean "tier"?' in result.stderr


def test_an_unknown_preset_names_where_it_was_written(project: Path) -> None:
    result = runner.invoke(app, ["init", "staging", "--preset", "nosuch", "--location", "eastus2"])
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith('error: --preset = "nosuch": no preset of that name. Fix: use one of: ')


@pytest.mark.parametrize(("words", "path", "value"), [
    (["ci", "oidc", "dev", "--repo", "https://github.com/contoso/x"], "--repo", "https://github.com/contoso/x"),
    (["backend", "bootstrap", "--resource-group", "rg", "--location", "East US", "--storage-account", "st1",
      "--container", "pulumi-state", "--key-vault", "kv-state-1"], "--location", "East US"),
])
def test_bad_options_are_problems_with_the_option_and_its_value(project: Path, words: list[str], path: str,
                                                                value: str) -> None:
    result = runner.invoke(app, words)
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith(f'error: {path} = "{value}": must be'), result.stderr
    assert "Fix: e.g." in result.stderr


def test_a_bad_environments_file_lists_its_problems_under_its_name(project: Path) -> None:
    """One problem too: the list names the file (a problem's own line has no source here)."""
    path = project / "stacks" / "environments.yaml"
    path.write_text(path.read_text().replace("    preset: dev\n", "    preset: dev\n    presett: dev\n", 1))
    result = runner.invoke(app, ["validate", "--json"])
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("error: environments.yaml has 1 problem:\n  - environments.dev.presett = "), \
        result.stderr
    problem = _problem(result)
    assert (problem["path"], problem["value"]) == ("environments.dev.presett", "dev")


def test_a_message_only_error_still_says_what_to_do(monkeypatch: pytest.MonkeyPatch) -> None:
    """Azure DevOps failing with a code other than 401/403 (which have their own fix) gets a fix too."""
    import urllib.error

    from aksgpu.ci import comment
    from aksgpu.errors import UserError

    def refuse(request: Any, timeout: float) -> Any:
        raise urllib.error.HTTPError(request.full_url, 500, "Server Error", None, None)  # type: ignore[arg-type]

    monkeypatch.setattr(comment.urllib.request, "urlopen", refuse)
    with pytest.raises(UserError, match=r"answered 500 to GET https://dev.azure.com/x/threads\. Fix: run the job"):
        comment._sender("token")("GET", "https://dev.azure.com/x/threads?api-version=7.1", None)


@pytest.mark.parametrize(("words", "expected", "fix"), [
    (["policy", "show", "no-such-rule"], 'error: RULE argument = "no-such-rule": is not a policy of aksgpu',
     "see `aksgpu policy list`"),
    (["schema", "nope"], 'error: KIND argument = "nope": no schema of that name', "use one of: cluster, environments"),
    (["render", "--check", "--force"], "error: --force = true: --check writes nothing and --force overwrites",
     "drop one of them"),
])
def test_bad_arguments_the_commands_check_themselves_are_problems(project: Path, words: list[str], expected: str,
                                                                  fix: str) -> None:
    result = runner.invoke(app, words)
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith(expected) and f"Fix: {fix}" in result.stderr, result.stderr
