"""`aksgpu promote ENV` end to end on a copy of the example project with a canary environment:
the decision from a verdicts file or from a stand-in API server (test_gpu_node_life's), and the
pins it writes into environments.yaml (comments kept, nothing written on --dry-run, refuse or a
bad edit)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from aksgpu.cli.app import app
from aksgpu.node import node_verdicts
from aksgpu.promotion import cluster
from aksgpu.project.yaml_edit import set_in_text
from aksgpu.errors import UserError
from tests.test_gpu_node_life import ApiHandler, Cluster, serving

DATA = Path(__file__).resolve().parent / "data" / "promotion"
runner = CliRunner()

LAB = '''
  lab:
    preset: dev
    overrides:
      name: gpu-lab
      resourceGroup: {name: rg-gpu-lab}
      controlPlane: {nodeOsUpgradeChannel: None, upgradeChannel: none}
      nodePools:
        # The canary: new node images land here first.
        - name: h100c
          kind: gpu
          vmSize: Standard_ND96isr_H100_v5
          zones: ["1"]
          minCount: 0
          maxCount: 2
          labels: {aksgpu.io/ib-domain: h100c}
        - name: h100a
          kind: gpu
          vmSize: Standard_ND96isr_H100_v5
          zones: ["1"]
          minCount: 0
          maxCount: 4
          labels: {aksgpu.io/ib-domain: h100a}
          pins:
            nodeImageSnapshot: h100c-202610-20-0  # the baseline
      promotion:
        canaryPool: h100c
        snapshots:
          - {name: h100c-202610-20-0, sourcePool: h100c}
'''


@pytest.fixture
def lab(project: Path) -> Path:
    path = project / "stacks" / "environments.yaml"
    path.write_text(path.read_text() + LAB)
    return path


def _lab(path: Path) -> dict[str, Any]:
    return yaml.safe_load(path.read_text())["environments"]["lab"]["overrides"]


def _promote(*args: str) -> Any:
    return runner.invoke(app, ["promote", "lab", *args])


def test_a_healthy_canary_moves_the_pins_and_keeps_the_file_as_written(lab: Path) -> None:
    before = lab.read_text()
    result = _promote("--verdicts", str(DATA / "healthy.jsonl"))
    assert result.exit_code == 0, result.output
    assert result.output.startswith("PROMOTE: environment lab")
    after = lab.read_text()
    overrides = _lab(lab)
    pins = {p["name"]: p.get("pins") for p in overrides["nodePools"]}
    assert pins == {"h100c": None, "h100a": {"nodeImageSnapshot": "h100c-202611-10-0"}}
    assert overrides["promotion"]["snapshots"][-1] == {"name": "h100c-202611-10-0", "sourcePool": "h100c"}
    # Only the pin's value and the new snapshot changed: every other line, comments included, stays.
    assert "nodeImageSnapshot: h100c-202611-10-0  # the baseline" in after
    assert after.replace("nodeImageSnapshot: h100c-202611-10-0", "nodeImageSnapshot: h100c-202610-20-0").startswith(
        before.rstrip("\n"))
    assert "not moved: t4spot" in result.output
    # The pin shapes pools created from now on; the existing h100a nodes move by a node-image-only
    # upgrade with the snapshot's ID (azure-aks-docs node-pool-snapshot.md), which promote prints.
    said = " ".join(result.output.split())
    assert ("az aks nodepool upgrade --resource-group rg-gpu-lab --cluster-name gpu-lab --name h100a "
            "--node-image-only --snapshot-id \"$(az aks nodepool snapshot show --resource-group rg-gpu-lab "
            "--name h100c-202611-10-0 --query id -o tsv)\"") in said
    rendered = runner.invoke(app, ["render", "lab"])
    assert rendered.exit_code == 0, rendered.output


def test_dry_run_writes_nothing(lab: Path) -> None:
    before = lab.read_text()
    result = _promote("--verdicts", str(DATA / "healthy.jsonl"), "--dry-run")
    assert result.exit_code == 0 and "(would set)" in result.output
    assert lab.read_text() == before


@pytest.mark.parametrize(("fixture", "verb"), [("slow-gemm", "REFUSE"), ("driver-mismatch", "ROLL BACK")])
def test_refuse_and_rollback_exit_1_and_keep_the_pins(lab: Path, fixture: str, verb: str) -> None:
    before = lab.read_text()
    result = _promote("--verdicts", str(DATA / f"{fixture}.jsonl"))
    assert result.exit_code == 1 and result.output.startswith(f"{verb}:")
    assert lab.read_text() == before


def test_rollback_names_the_aks_rollback_of_the_canarys_agent_pool(lab: Path) -> None:
    # AKS cannot downgrade through a pin; its node pool version rollback (GA, Azure CLI 2.88.0) can.
    result = _promote("--verdicts", str(DATA / "driver-mismatch.jsonl"), "--dry-run")
    assert result.exit_code == 1
    assert ("`az aks nodepool rollback --resource-group rg-gpu-lab --cluster-name gpu-lab --name h100c`"
            in " ".join(result.output.split()))


def test_roll_back_canary_runs_the_aks_rollback_only_on_a_rollback(lab: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    import subprocess

    ran: list[list[str]] = []

    def fake_az(argv: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
        ran.append(argv)
        return subprocess.CompletedProcess(argv, 0, "", "")

    monkeypatch.setattr(subprocess, "run", fake_az)
    result = _promote("--verdicts", str(DATA / "healthy.jsonl"), "--roll-back-canary", "--dry-run")
    assert result.exit_code == 0 and ran == []  # promote: nothing to roll back
    result = _promote("--verdicts", str(DATA / "driver-mismatch.jsonl"), "--roll-back-canary", "--dry-run")
    assert result.exit_code == 1 and ran == []  # a dry run runs nothing
    result = _promote("--verdicts", str(DATA / "driver-mismatch.jsonl"), "--roll-back-canary")
    assert result.exit_code == 1
    assert ran == [["az", "aks", "nodepool", "rollback", "--resource-group", "rg-gpu-lab", "--cluster-name", "gpu-lab",
                    "--name", "h100c"]]
    assert "ran `az aks nodepool rollback" in " ".join(result.output.split())


def test_a_refused_aks_rollback_says_what_else_to_do(lab: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import subprocess

    def refusing_az(argv: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
        return subprocess.CompletedProcess(argv, 1, "", "ERROR: (OperationNotAllowed) no rollback within 7 days\n")

    monkeypatch.setattr(subprocess, "run", refusing_az)
    result = _promote("--verdicts", str(DATA / "driver-mismatch.jsonl"), "--roll-back-canary")
    assert result.exit_code == 1 and result.output.startswith("ROLL BACK:")  # the decision's report, still
    said = " ".join(result.output.split())
    assert "the canary's rollback did not run" in said and "no rollback within 7 days" in said
    assert "recreate it pinned to" in said


def test_rollback_puts_the_canarys_driver_pin_back(lab: Path) -> None:
    text = lab.read_text().replace('''          maxCount: 2
''', '''          maxCount: 2
          gpu: {driver: None}
          pins: {driverVersion: "580.105.08"}
''').replace('''          pins:
            nodeImageSnapshot: h100c-202610-20-0  # the baseline
''', '''          gpu: {driver: None}
          pins:
            nodeImageSnapshot: h100c-202610-20-0  # the baseline
            driverVersion: "570.172.08"
''')
    lab.write_text(text)
    result = _promote("--verdicts", str(DATA / "driver-mismatch.jsonl"), "--json")
    assert result.exit_code == 1, result.output
    document = json.loads(result.stdout)
    assert document["action"] == "rollback" and document["written"] is True
    assert document["changes"] == [{"path": "nodePools.h100c.pins.driverVersion", "before": "580.105.08",
                                    "value": "570.172.08", "what": "canary h100c: driver back"}]
    assert _lab(lab)["nodePools"][0]["pins"] == {"driverVersion": "570.172.08"}
    assert 'pins: {driverVersion: "570.172.08"}' in lab.read_text(), "a flow mapping's value is edited in place"


def test_without_a_promotion_section_the_command_says_so(project: Path) -> None:
    result = runner.invoke(app, ["promote", "dev", "--verdicts", str(DATA / "healthy.jsonl")])
    assert result.exit_code == 2
    assert "promotion = (not set): cluster" in result.output and "needs a promotion section" in result.output
    assert "add promotion: {canaryPool: <a GPU pool>}" in result.output


def _stand_in(records: str) -> Cluster:
    state = Cluster()
    state.configmap["data"] = {node_verdicts.RECORD_KEY: records}
    state.events.append({"involvedObject": {"kind": "Node", "name": "aks-h100c-87654321-vmss000009"},
                         "source": {"component": node_verdicts.EVENT_SOURCE}, "reason": "GpuCheckPassed"})
    return state


class EventsHandler(ApiHandler):
    def get_more(self, path: str, query: dict[str, str]) -> None:
        if path == "/api/v1/namespaces/default/events" and query.get("fieldSelector") == "source=aksgpu-gpu-gate":
            self._reply(200, {"items": self.state.events})
        else:
            super().get_more(path, query)


def test_the_verdicts_come_from_the_cluster_through_the_api(lab: Path) -> None:
    state = _stand_in((DATA / "healthy.jsonl").read_text())
    with serving(state, EventsHandler) as url:
        result = _promote("--api-server", url, "--dry-run", "--json")
    assert result.exit_code == 0, result.output
    document = json.loads(result.output)
    assert document["action"] == "promote"
    assert document["eventOnlyNodes"] == ["aks-h100c-87654321-vmss000009"]


def test_the_cluster_constants_are_the_gates() -> None:
    assert (cluster.RECORD_CONFIGMAP, cluster.EVENT_SOURCE, cluster.EVENT_NAMESPACE) == (
        node_verdicts.RECORD_CONFIGMAP, node_verdicts.EVENT_SOURCE, node_verdicts.NODE_EVENT_NAMESPACE)


def test_kubectl_reads_the_same_paths() -> None:
    calls = []

    def run(command: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
        calls.append(command)
        body = {"data": {"verdicts": (DATA / "healthy.jsonl").read_text()}} if "configmaps" in command[-1] \
            else {"items": []}
        return subprocess.CompletedProcess(command, 0, json.dumps(body), "")

    found = cluster.read(cluster.kubectl_get("lab-admin", run=run))
    assert len(found.records) == 7 and found.event_only_nodes == []
    assert calls[0] == ["kubectl", "--context", "lab-admin", "get", "--raw",
                        "/api/v1/namespaces/aksgpu-system/configmaps/aksgpu-gpu-health-record"]

    def failing(command: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
        return subprocess.CompletedProcess(command, 1, "", "error: You must be logged in to the server")

    with pytest.raises(UserError, match="You must be logged in"):
        cluster.read(cluster.kubectl_get(run=failing))


def test_an_unreachable_api_server_is_one_clear_error(lab: Path) -> None:
    result = _promote("--api-server", "http://127.0.0.1:9", "--dry-run")
    assert result.exit_code == 2 and "kubectl proxy" in result.output


def test_the_text_edit_refuses_what_it_cannot_edit_in_place() -> None:
    with pytest.raises(UserError, match="not a list in block style"):
        set_in_text("a: [{name: x}]\n", ["a", ("name", "y"), "b"], "x")  # a flow list
    with pytest.raises(UserError, match="empty"):
        set_in_text("a: {}\n", ["a", "c"], "x")
    assert set_in_text("a: {b: 1}  # keep\n", ["a", "c", "d"], "x") == "a: {b: 1, c: {d: x}}  # keep\n"
    assert set_in_text("a:\n  b: 1  # keep\n", ["a", "b"], "2") == 'a:\n  b: "2"  # keep\n'
    assert set_in_text("a:\n  b: x  # keep\n", ["a", "b"], "y-1") == "a:\n  b: y-1  # keep\n"


def test_fleet_options_go_together_and_name_the_members_group(fleet_project: Path) -> None:
    from aksgpu.environments.file import load_environments
    from aksgpu.promotion.promote import fleet_group

    result = runner.invoke(app, ["promote", "gpu-fleet-canary", "--fleet-id", "/x", "--verdicts",
                                 str(DATA / "healthy.jsonl")])
    assert result.exit_code == 2
    assert "--update-run = (not set): --fleet-id and --update-run go together" in result.output
    environments = load_environments()
    stacks = {stack: member for stack, (_, member) in environments.stacks().items() if member == "canary"}
    [stack] = stacks
    assert fleet_group(environments, stack) == "canary"
    with pytest.raises(UserError) as refused:
        fleet_group(environments, "training")
    assert [(p.path, p.value) for p in refused.value.problems] == [("ENVIRONMENT argument", "training")]


GUIDE = Path(__file__).resolve().parents[1] / "docs" / "guides" / "promotion.md"


def _guide_commands() -> list[list[str]]:
    import re
    import shlex

    blocks = re.findall(r"```sh\n(.*?)```", GUIDE.read_text(encoding="utf-8"), re.S)
    return [shlex.split(line) for block in blocks for line in block.splitlines() if line.strip()]


def test_the_guides_commands_run(lab: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each `aksgpu promote` line of docs/guides/promotion.md runs as shown: the kubectl it relies on is
    a stand-in script on PATH, the proxy's address is the stand-in API server's; the fleet line's
    options are the command's (it needs Azure)."""
    record = {"kind": "ConfigMap", "data": {"verdicts": (DATA / "healthy.jsonl").read_text()}}
    kubectl = tmp_path / "bin" / "kubectl"
    kubectl.parent.mkdir()
    kubectl.write_text("#!/usr/bin/env python3\nimport json, sys\n"
                       f"record = {json.dumps(record)!r}\n"
                       "if sys.argv[1:3] == ['get', 'configmap']:\n    print(record)\n"
                       "elif 'configmaps' in sys.argv[-1]:\n    print(record)\n"
                       "elif 'events' in sys.argv[-1]:\n    print(json.dumps({'items': []}))\n"
                       "else:\n    sys.exit(1)\n")
    kubectl.chmod(0o755)
    monkeypatch.setenv("PATH", f"{kubectl.parent}:{__import__('os').environ['PATH']}")
    help_text = runner.invoke(app, ["promote", "--help"], env={"COLUMNS": "200"}).output
    ran = 0
    state = _stand_in((DATA / "healthy.jsonl").read_text())
    with serving(state, EventsHandler) as url:
        for argv in _guide_commands():
            if argv[0] == "kubectl" and argv[1] == "get":
                out = subprocess.run(argv[:-2] if ">" in argv else argv, capture_output=True, text=True, check=True)
                Path(argv[-1]).write_text(out.stdout)
                continue
            if argv[0] != "aksgpu":
                continue
            if "--fleet-id" in argv:
                assert all(option in help_text for option in argv if option.startswith("--")), argv
                continue
            argv = [url if arg == "http://127.0.0.1:8001" else arg for arg in argv]
            result = runner.invoke(app, argv[1:])
            assert result.exit_code == 0 and result.output.startswith("PROMOTE"), (argv, result.output)
            ran += 1
    assert ran == 3


def test_a_fleet_members_pins_go_under_its_member_entry(fleet_project: Path) -> None:
    from aksgpu.environments.file import load_environments
    from aksgpu.project.yaml_input import parse_yaml
    from aksgpu.promotion.promote import Change, overrides_path

    environments = load_environments()
    base = overrides_path(environments, "training-canary")
    assert base == ["environments", "training", "fleet", "members", ("name", "canary"), "overrides"]
    assert overrides_path(environments, "training") == ["environments", "training", "overrides"]
    path = [*base, "nodePools", ("name", "h100"), "pins", "nodeImageSnapshot"]
    assert Change(path, "s", None, "").field == "nodePools.h100.pins.nodeImageSnapshot"
    text = environments.path.read_text()
    edited = set_in_text(text, path, "h100-202611-10-0")
    member = next(m for m in parse_yaml(edited)["environments"]["training"]["fleet"]["members"]
                  if m["name"] == "canary")
    assert {"name": "h100", "maxCount": 2, "pins": {"nodeImageSnapshot": "h100-202611-10-0"}} in \
        member["overrides"]["nodePools"]


def test_pins_move_only_to_pools_the_canary_speaks_for(lab: Path) -> None:
    # Same VM size, but the GPU Operator's driver: the canary (AKS's driver install) never exercised
    # it (AKS#5869 broke AKS's install alone), so its pin stays and its verdicts are no baseline.
    lab.write_text(lab.read_text().replace('''      promotion:
        canaryPool: h100c''', '''        - name: h100op
          kind: gpu
          vmSize: Standard_ND96isr_H100_v5
          zones: ["1"]
          minCount: 0
          maxCount: 2
          labels: {aksgpu.io/ib-domain: h100op}
          gpu: {driver: None}
      promotion:
        canaryPool: h100c'''))
    result = _promote("--verdicts", str(DATA / "healthy.jsonl"))
    assert result.exit_code == 0, result.output
    pins = {p["name"]: p.get("pins") for p in _lab(lab)["nodePools"]}
    assert pins["h100op"] is None and pins["h100a"] == {"nodeImageSnapshot": "h100c-202611-10-0"}
    assert "h100op" in " ".join(result.output.split()).split("not moved:", 1)[1]
