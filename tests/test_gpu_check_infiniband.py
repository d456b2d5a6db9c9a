"""The GPU check on InfiniBand sizes: every InfiniBand port ACTIVE, LinkUp and at the VM size's rate,
the VM size's number of HCAs, and the RDMA devices visible to the check's pod.

The fake sysfs trees are written in the kernel's own formats (drivers/infiniband/core/sysfs.c:
state "%d: %s", phys_state "%u: %s", rate "%d%s Gb/sec (%dX%s)", link_layer "InfiniBand" or
"Ethernet"; Documentation/ABI/stable/sysfs-class-infiniband), laid out as an ND H100 v5 node on AKS
shows them: mlx5_0..mlx5_7 on InfiniBand and the accelerated-networking VF, mlx5_8, on Ethernet
(aksgpu/catalog/fabric.yaml ncclIbHca: Azure's AKS RDMA test names it mlx5_8; the check goes by
link layer, not by name, and one test puts the VF first). The expected figures are the fabric
table's (aksgpu.spec.fabric.fabric_profile)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from aksgpu import catalog
from aksgpu.components.kubernetes import gpu_gate
from aksgpu.node.gpu_check import interconnect, run, thresholds, xids
from aksgpu.components.kubernetes.objects import PoolTarget
from aksgpu.spec.fabric import fabric_profile
from tests.helpers import base_spec, edit, find_object, plan_spec

STATES = {1: "DOWN", 2: "INIT", 3: "ARMED", 4: "ACTIVE", 5: "ACTIVE_DEFER"}
PHYS_STATES = {1: "Sleep", 2: "Polling", 3: "Disabled", 4: "PortConfigurationTraining", 5: "LinkUp",
               6: "LinkErrorRecovery", 7: "Phy Test"}
# IB_SPEED_* as rate_show turns them into deci-Gb/s per lane.
SPEEDS = {"SDR": 25, "HDR": 500, "NDR": 1000, "XDR": 2000}


def kernel_rate(speed: str, width: int = 4) -> str:
    """rate_show: "%d%s Gb/sec (%dX%s)" of rate (deci-Gb/s) / 10, ".5" for a half, the speed " NDR"
    with its leading space."""
    rate = SPEEDS[speed] * width
    return f"{rate // 10}{'.5' if rate % 10 else ''} Gb/sec ({width}X {speed})"


def write_port(sysfs: Path, device: str, state: int = 4, physical: int = 5, speed: str = "NDR",
               layer: str = "InfiniBand", port: int = 1) -> None:
    folder = sysfs / device / "ports" / str(port)
    folder.mkdir(parents=True)
    (folder / "state").write_text(f"{state}: {STATES[state]}\n")
    (folder / "phys_state").write_text(f"{physical}: {PHYS_STATES[physical]}\n")
    (folder / "rate").write_text(kernel_rate(speed) + "\n")
    (folder / "link_layer").write_text(layer + "\n")


def nd_h100_node(tmp_path: Path, hcas: int = 8, **broken: dict[str, object]) -> Path:
    """An ND H100 v5 node's /sys/class/infiniband: 8 NDR HCAs and the Ethernet VF (rate as the
    kernel would print a 50 Gb/s Ethernet port; anything below 400 Gb/s shows the point)."""
    sysfs = tmp_path / "class" / "infiniband"
    for index in range(hcas):
        write_port(sysfs, f"mlx5_{index}", **broken.get(f"mlx5_{index}", {}))  # type: ignore[arg-type]
    write_port(sysfs, f"mlx5_{hcas}", speed="HDR", layer="Ethernet")
    return sysfs


def rdma_devices(tmp_path: Path, hcas: list[str], rdma_cm: bool = True) -> tuple[Path, Path]:
    """/dev/infiniband as the RDMA shared device plugin fills a container, and
    /sys/class/infiniband_verbs/uverbsN/ibdev naming each device's HCA."""
    dev, verbs = tmp_path / "dev" / "infiniband", tmp_path / "class" / "infiniband_verbs"
    dev.mkdir(parents=True)
    for index, hca in enumerate(hcas):
        for kind in ("uverbs", "umad", "issm"):
            (dev / f"{kind}{index}").touch()
        (verbs / f"uverbs{index}").mkdir(parents=True)
        (verbs / f"uverbs{index}" / "ibdev").write_text(hca + "\n")
    if rdma_cm:
        (dev / "rdma_cm").touch()
    return dev, verbs


H100 = "Standard_ND96isr_H100_v5"
EIGHT = [f"mlx5_{index}" for index in range(8)]


def test_the_check_expects_what_the_fabric_table_says_for_every_infiniband_size() -> None:
    """Every size with InfiniBand in the catalog has a fabric profile, and the check's figures for it
    (read from the same tables inside the check's image) are the profile's: HCAs and port rate."""
    sizes = [name for name, size in catalog.vm_sizes().items() if size.infiniband]
    assert len(sizes) >= 7
    for name in sizes:
        profile = fabric_profile(name)
        assert profile is not None, name
        limits = thresholds.limits(None, name)
        assert limits.infiniband_hcas == profile.hca_count, name
        assert limits.infiniband_gbps == profile.port_gbps, name
    assert thresholds.infiniband_hcas("Standard_NC24ads_A100_v4") is None
    assert thresholds.limits(None, "Standard_NC24ads_A100_v4").infiniband_gbps is None


def test_a_healthy_nd_h100_node_passes_and_its_ethernet_vf_is_not_judged(tmp_path: Path) -> None:
    """Before, every port under /sys/class/infiniband was held to the InfiniBand rate, so the
    Ethernet VF (mlx5_8) failed every ND node."""
    sysfs = nd_h100_node(tmp_path)
    found = interconnect.infiniband_checks(sysfs, 400.0, 8)
    assert [r.verdict for r in found] == ["pass"] * 9
    assert found[0].check == "infiniband-hcas" and found[0].value == 8
    assert "mlx5_8" not in {r.details.get("port", "").split("/")[0] for r in found}
    assert found[1].reason == "mlx5_0/1: ACTIVE, LinkUp, 400 Gb/sec (4X NDR)"


def test_the_ethernet_vf_may_enumerate_first(tmp_path: Path) -> None:
    """Names follow enumeration order: with the VF as mlx5_0 the HCAs are mlx5_1..mlx5_8, all judged."""
    sysfs = tmp_path / "ib"
    write_port(sysfs, "mlx5_0", speed="HDR", layer="Ethernet")
    for index in range(1, 9):
        write_port(sysfs, f"mlx5_{index}")
    found = interconnect.infiniband_checks(sysfs, 400.0, 8)
    assert [r.verdict for r in found] == ["pass"] * 9
    assert {r.details["port"] for r in found[1:]} == {f"mlx5_{index}/1" for index in range(1, 9)}


@pytest.mark.parametrize(("state", "physical", "speed", "reason"), [
    (2, 5, "NDR", "state 2: INIT, not 4: ACTIVE"),              # link up, no subnet manager yet
    (3, 5, "NDR", "state 3: ARMED"),
    (5, 5, "NDR", "state 5: ACTIVE_DEFER"),
    (1, 2, "NDR", "physical state 2: Polling"),                 # no cable, or the switch port is down
    (4, 6, "NDR", "physical state 6: LinkErrorRecovery"),
    (4, 4, "NDR", "physical state 4: PortConfigurationTraining"),
    (4, 5, "HDR", "rate 200 Gb/sec (4X HDR) below 400 Gb/s"),    # trained at a lower speed
    (4, 5, "SDR", "rate 10 Gb/sec (4X SDR) below 400 Gb/s"),
])
def test_a_port_not_active_linkup_or_at_rate_fails(tmp_path: Path, state: int, physical: int, speed: str,
                                                   reason: str) -> None:
    sysfs = nd_h100_node(tmp_path, mlx5_3={"state": state, "physical": physical, "speed": speed})
    found = interconnect.infiniband_checks(sysfs, 400.0, 8)
    failed = [r for r in found if r.verdict == "fail"]
    assert len(failed) == 1 and failed[0].details["port"] == "mlx5_3/1" and reason in failed[0].reason, failed


def test_a_narrower_link_fails_on_rate(tmp_path: Path) -> None:
    sysfs = tmp_path / "ib"
    write_port(sysfs, "mlx5_0")
    folder = sysfs / "mlx5_0" / "ports" / "1"
    (folder / "rate").write_text(kernel_rate("NDR", width=1) + "\n")  # "100 Gb/sec (1X NDR)": one lane trained
    [count, port] = interconnect.infiniband_checks(sysfs, 400.0, 1)
    assert count.verdict == "pass" and port.verdict == "fail" and "100 Gb/sec (1X NDR)" in port.reason


def test_a_missing_hca_fails_the_node(tmp_path: Path) -> None:
    sysfs = nd_h100_node(tmp_path, hcas=7)
    found = interconnect.infiniband_checks(sysfs, 400.0, 8)
    assert found[0].check == "infiniband-hcas" and found[0].verdict == "fail" and found[0].value == 7
    assert "7 InfiniBand HCAs" in found[0].reason


def test_no_infiniband_at_all(tmp_path: Path) -> None:
    only_ethernet = tmp_path / "ib"
    write_port(only_ethernet, "mlx5_0", speed="HDR", layer="Ethernet")  # an NC node's accelerated networking
    assert [r.verdict for r in interconnect.infiniband_checks(only_ethernet, None, None)] == ["skip"]
    assert [r.verdict for r in interconnect.infiniband_checks(only_ethernet, 400.0, 8)] == ["fail"]
    assert [r.verdict for r in interconnect.infiniband_checks(tmp_path / "none", 400.0, 8)] == ["fail"]


def test_gb300_ports_at_xdr_pass(tmp_path: Path) -> None:
    sysfs = tmp_path / "ib"
    for index in range(4):
        write_port(sysfs, f"mlx5_{index}", speed="XDR")
    profile = fabric_profile("Standard_ND128isr_GB300_v6")
    assert profile is not None
    found = interconnect.infiniband_checks(sysfs, float(profile.port_gbps), profile.hca_count)
    assert [r.verdict for r in found] == ["pass"] * 5 and found[1].value == 800


# --- the RDMA devices -------------------------------------------------------------------------


def test_the_rdma_devices_the_plugin_mounts_pass(tmp_path: Path) -> None:
    sysfs = nd_h100_node(tmp_path)
    dev, verbs = rdma_devices(tmp_path, EIGHT)
    [found] = interconnect.rdma_device_checks(sysfs, dev, verbs, 8)
    assert found.check == "rdma-devices" and found.verdict == "pass" and found.value == 8


@pytest.mark.parametrize(("hcas", "rdma_cm", "reason"), [
    (EIGHT[:7], True, "7 verbs devices"),
    (EIGHT[:3] + EIGHT[4:] + ["mlx5_8"], True, "none for mlx5_3"),  # 8 devices, one of them the Ethernet VF's
    (EIGHT, False, "rdma_cm"),
    ([], False, "0 verbs devices"),                                  # the pod did not request the resource
])
def test_missing_rdma_devices_fail(tmp_path: Path, hcas: list[str], rdma_cm: bool, reason: str) -> None:
    sysfs = nd_h100_node(tmp_path)
    dev, verbs = rdma_devices(tmp_path, hcas, rdma_cm)
    [found] = interconnect.rdma_device_checks(sysfs, dev, verbs, 8)
    assert found.verdict == "fail" and reason in found.reason, found.reason
    assert "request its resource" in found.reason


def test_no_rdma_check_off_infiniband(tmp_path: Path) -> None:
    assert interconnect.rdma_device_checks(tmp_path, tmp_path / "dev", tmp_path / "verbs", None) == []


def test_a_run_on_an_nd_h100_node_checks_ports_and_devices(tmp_path: Path) -> None:
    """A quick run with the VM size known: the figures come from the tables, both checks report."""
    from tests.test_gpu_check import FakeProbe, healthy

    sysfs = nd_h100_node(tmp_path)
    dev, verbs = rdma_devices(tmp_path, EIGHT)
    node = run.Node(FakeProbe([healthy(i) for i in range(8)]), None, [], kernel_log=xids.KernelLog.of(""),
                    infiniband_sysfs=sysfs, rdma_dev=dev, verbs_sysfs=verbs, vm_size=H100)
    verdicts = {r.check: r.verdict for r in run.check_node(node, "quick").results if r.gpu is None}
    assert verdicts["infiniband-hcas"] == verdicts["infiniband"] == verdicts["rdma-devices"] == "pass"
    hidden = run.Node(FakeProbe([healthy(i) for i in range(8)]), None, [], kernel_log=xids.KernelLog.of(""),
                      infiniband_sysfs=sysfs, rdma_dev=tmp_path / "nothing", verbs_sysfs=verbs, vm_size=H100)
    report = run.check_node(hidden, "quick")
    assert "rdma-devices" in {r.check for r in report.failures}


def test_the_cli_takes_the_device_paths() -> None:
    args = run.parser().parse_args(["--rdma-dev", "/x/infiniband", "--verbs-sysfs", "/y"])
    assert args.rdma_dev == "/x/infiniband" and args.verbs_sysfs == "/y"


# --- the check pods request the RDMA resource on InfiniBand pools ---------------------------------


def _ib_pool(name: str, driver: str) -> dict[str, object]:
    return {"name": name, "kind": "gpu", "vmSize": H100, "zones": ["1"], "minCount": 0, "maxCount": 4,
            "gpu": {"driver": driver}}


def _check(pod_spec: dict[str, object]) -> dict[str, object]:
    [check] = [c for c in pod_spec["initContainers"] if c["name"] == "check"]  # type: ignore[union-attr,index]
    return check  # type: ignore[no-any-return]


@pytest.mark.parametrize("driver", ["None", "Install"])
def test_the_check_pods_of_an_infiniband_pool_request_the_rdma_resource(driver: str) -> None:
    plan = plan_spec(edit(base_spec(), "nodePools.1", _ib_pool("h100", driver)))
    profile = fabric_profile(H100)
    assert profile is not None
    gate = "aksgpu-gpu-gate-operator-8gpu" if driver == "None" else "aksgpu-gpu-gate-aks-driver-8gpu"
    recheck = "aksgpu-gpu-recheck-8gpu-operator" if driver == "None" else "aksgpu-gpu-recheck-8gpu"
    for kind, name, pod in (("DaemonSet", gate, lambda o: o["spec"]["template"]["spec"]),
                            ("CronJob", recheck, lambda o: o["spec"]["jobTemplate"]["spec"]["template"]["spec"])):
        check = _check(pod(find_object(plan, kind, name)))
        for part in ("requests", "limits"):
            assert check["resources"][part][profile.rdma_resource] == str(profile.rdma_per_node), (name, part)
    # The 1-GPU A100 pool's check asks for no RDMA resource: no device plugin would ever offer it there.
    a100 = _check(find_object(plan, "DaemonSet", "aksgpu-gpu-gate-aks-driver-1gpu")["spec"]["template"]["spec"])
    assert not any(key.startswith("rdma/") for part in a100["resources"].values() for key in part)


def test_pools_of_one_gpu_count_with_and_without_infiniband_get_separate_checks() -> None:
    """GB300 (4 GPUs, InfiniBand) beside NC96ads A100 v4 (4 GPUs, none): two groups, the InfiniBand
    one named -rdma; GPU counts that do not mix keep the plain names."""
    def target(name: str, vm_size: str) -> PoolTarget:
        return PoolTarget(name, SimpleNamespace(vm_size=vm_size, size=catalog.vm_size(vm_size)), ())  # type: ignore[arg-type]

    nc, gb, h100 = (target("nc", "Standard_NC96ads_A100_v4"), target("gb", "Standard_ND128isr_GB300_v6"),
                    target("h100", H100))
    assert {name: [t.name for t in found] for name, found in gpu_gate._by_fabric([nc, gb, h100]).items()} == {
        "": ["nc", "h100"], "-rdma": ["gb"]}
    assert {name: [t.name for t in found] for name, found in gpu_gate._by_fabric([nc, h100]).items()} == {
        "": ["nc", "h100"]}
    assert gpu_gate.rdma_request([gb]) == {"rdma/shared_ib": "1"} and gpu_gate.rdma_request([nc]) == {}
    shapes = [(gpus, [t.name for t in targets], suffix) for gpus, (targets, _), suffix in gpu_gate._shapes([nc, gb,
                                                                                                            h100])]
    assert shapes == [(4, ["nc"], ""), (4, ["gb"], "-rdma"), (8, ["h100"], "")]
