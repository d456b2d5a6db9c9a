"""RDMA over InfiniBand on InfiniBand GPU pools (aksgpu/components/kubernetes/fabric.py), judged against
what no one here wrote: the Network Operator's NicClusterPolicy CRD, chart values and release image
list (tests/data/network-operator, v26.4.1), the variables NCCL reads (tests/data/nccl), Azure's
topology files, the GPU Operator's NFD configuration (tests/data/gpu-operator), and where each pod
may run (tests/oracles/scheduling)."""

from __future__ import annotations

import copy
import hashlib
import json
import re
from typing import Any

import jsonschema
import pytest
import yaml

from aksgpu.plan.planner import Plan
from aksgpu import catalog
from aksgpu.components.kubernetes.objects import GATE_TAINT
from aksgpu.spec import SpecError, parse_cluster_spec
from aksgpu.spec.fabric import (
    TOPOLOGY_KEY,
    fabric_profile,
    fabric_profiles,
    fabric_table,
    pod_requirements,
    topology_mount_path,
)
from tests.helpers import REPO, base_spec, edit, kubernetes_manifests, shared_plan
from tests.oracles.kubernetes import DATA, template_value_paths, unknown_value_paths, validate_object
from tests.oracles.scheduling import fits, plan_nodes

NETWORK_OPERATOR = DATA / "network-operator"
CHART_VALUES = yaml.safe_load((NETWORK_OPERATOR / "values.yaml").read_text())
NFD_VALUES = yaml.safe_load((NETWORK_OPERATOR / "node-feature-discovery" / "values.yaml").read_text())
NFD_SCHEMA = json.loads((NETWORK_OPERATOR / "node-feature-discovery" / "values.schema.json").read_text())
RELEASE_IMAGES = yaml.safe_load((NETWORK_OPERATOR / "hack-release.yaml").read_text())
GPU_OPERATOR_VALUES = yaml.safe_load((DATA / "gpu-operator" / "values.yaml").read_text())
NCCL_NAMES = set((DATA / "nccl" / "env_names.txt").read_text().split())
# The label the Network Operator deploys its operands on (pkg/nodeinfo/attributes.go NodeLabelMlnxNIC, v26.4.1).
MLNX_NIC_LABEL = "feature.node.kubernetes.io/pci-15b3.present"

H100 = {"name": "h100", "kind": "gpu", "vmSize": "Standard_ND96isr_H100_v5", "zones": ["1"], "minCount": 0,
        "maxCount": 4, "gpu": {"driver": "None"}, "team": "research"}


def infiniband_spec(**pool: Any) -> dict[str, Any]:
    """base_spec's A100 pool (no InfiniBand), an H100 pool (InfiniBand) and two teams."""
    spec = edit(base_spec(), "nodePools.1", {**H100, **pool})
    return edit(spec, "access.teams", [{"name": "research"}, {"name": "vision"}])


def releases(plan: Plan, chart: str) -> list[dict[str, Any]]:
    return [r.inputs for r in plan.by_type("kubernetes:helm.sh/v3:Release") if r.inputs["chart"] == chart]


def objects(plan: Plan, kind: str) -> list[dict[str, Any]]:
    return [o for o in kubernetes_manifests(plan) if o["kind"] == kind]


def helm_merge(defaults: Any, values: Any) -> Any:
    if isinstance(defaults, dict) and isinstance(values, dict):
        merged = copy.deepcopy(defaults)
        for key, value in values.items():
            merged[key] = helm_merge(defaults.get(key), value) if key in defaults else value
        return merged
    return copy.deepcopy(values)


def worker_config_reference() -> dict[str, Any]:
    """The NFD chart's documented nfd-worker configuration: its commented default, uncommented."""
    text = (NETWORK_OPERATOR / "node-feature-discovery" / "values.yaml").read_text()
    block = text.split("<NFD-WORKER-CONF-START-DO-NOT-REMOVE>")[1].split("### <NFD-WORKER-CONF-END")[0]
    lines = [line.strip()[1:] for line in block.splitlines() if line.strip().startswith("#")]
    return yaml.safe_load("\n".join(lines))


@pytest.fixture(scope="module")
def mixed_plan() -> Plan:
    """Driver None and driver Install InfiniBand pools beside a non-InfiniBand GPU pool: both NFDs."""
    spec = infiniband_spec()
    spec = edit(spec, "nodePools.2", {"name": "a100ib", "kind": "gpu", "vmSize": "Standard_ND96amsr_A100_v4",
                                      "zones": ["2"], "minCount": 0, "maxCount": 2})
    spec = edit(spec, "nodePools.3", {"name": "cpu", "vmSize": "Standard_D8ds_v5", "count": 1})
    return shared_plan(spec)


# --- the facts table ---------------------------------------------------------------------------


def test_every_infiniband_size_has_a_fabric_profile_and_no_other() -> None:
    sizes = catalog.vm_sizes()
    infiniband = {name for name, size in sizes.items() if size.infiniband}
    assert infiniband >= {"Standard_ND96isr_H100_v5", "Standard_ND96isr_H200_v5", "Standard_ND96asr_v4",
                          "Standard_ND96amsr_A100_v4", "Standard_ND128isr_NDR_GB200_v6", "Standard_ND128isr_GB300_v6"}
    assert set(fabric_profiles()) == infiniband
    for name in infiniband:
        profile = fabric_profile(name)
        assert profile is not None
        # One HCA per GPU (the size pages: a dedicated InfiniBand link per GPU), at the size's rate.
        assert profile.hca_count == sizes[name].gpus, name
        assert f"{profile.port_gbps} Gb/s" in (sizes[name].infiniband or ""), name
        assert profile.rdma_resource == "rdma/shared_ib" and profile.rdma_per_node == 1
        assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", profile.nccl_config_map) and \
            len(profile.nccl_config_map) <= 63
    assert fabric_profile("Standard_NC24ads_A100_v4") is None
    assert fabric_profile("Standard_D8ds_v5") is None
    assert fabric_profile("Standard_ND96isr_H100_v5").port_gbps == 400
    assert fabric_profile("Standard_ND96asr_v4").port_gbps == 200
    assert fabric_profile("Standard_ND128isr_GB300_v6").port_gbps == 800


def test_the_nccl_environment_is_variables_nccl_reads_each_with_a_source() -> None:
    table = fabric_table()
    for family, facts in table["families"].items():
        for name, entry in facts["ncclEnv"].items():
            assert name in NCCL_NAMES, f"{family}: {name} is not a variable NCCL v2.30.7 reads"
            assert entry["source"].strip(), f"{family}: {name} has no source"
            assert isinstance(entry["value"], str), f"{family}: {name} must be a string (a ConfigMap value)"
    for profile in fabric_profiles().values():
        assert set(profile.nccl_env) <= NCCL_NAMES
        assert set(profile.nccl_env) == set(profile.nccl_env_sources)
        # No fixed HCA list or exclusion: names follow enumeration order on AKS nodes, and the device
        # plugin hands pods the InfiniBand-link HCAs only (fabric.yaml ncclIbHca, and the NicClusterPolicy test).
        assert "NCCL_IB_HCA" not in profile.nccl_env
    assert "NCCL_IB_HCAS" not in NCCL_NAMES and "NCCL_TOPOFILE" not in NCCL_NAMES, "the list catches a misspelling"


def test_topology_files_are_azures_unchanged_and_describe_the_size() -> None:
    """Each shipped file is byte-identical to Azure's (SOURCE.md) and lists the size's GPUs
    (PCI class 0x0302) and InfiniBand HCAs (0x0207), one per GPU as the profile says."""
    source = (REPO / "aksgpu" / "catalog" / "nccl_topology" / "SOURCE.md").read_text()
    shipped = 0
    for name, profile in fabric_profiles().items():
        if profile.topology_file is None:
            assert "NCCL_TOPO_FILE" not in profile.nccl_env
            continue
        shipped += 1
        xml = profile.topology_xml()
        assert xml is not None
        digest = hashlib.sha256(xml.encode()).hexdigest()
        assert re.search(rf"\| {re.escape(profile.topology_file)} \|.*\| {digest} \|", source), name
        assert xml.count('class="0x030200"') == catalog.vm_sizes()[name].gpus, name
        assert xml.count('class="0x020700"') == profile.hca_count, name
        assert profile.nccl_env["NCCL_TOPO_FILE"] == f"{topology_mount_path()}/{TOPOLOGY_KEY}"
    assert shipped == 4  # ND A100 v4 (two sizes) and ND H100/H200 v5


# --- what is declared --------------------------------------------------------------------------


def test_no_infiniband_pool_declares_nothing() -> None:
    plan = shared_plan(edit(base_spec(), "access.teams", [{"name": "research"}]))
    assert releases(plan, "network-operator") == []
    assert objects(plan, "NicClusterPolicy") == []
    assert not [c for c in objects(plan, "ConfigMap") if c["metadata"]["name"].startswith("aksgpu-nccl")]
    assert not [n for n in objects(plan, "Namespace") if n["metadata"]["name"] == "network-operator"]
    gang = shared_plan(edit(edit(base_spec(), "access.teams", [{"name": "research"}]), "gangScheduling.enabled", True))
    [kueue] = [r.inputs for r in gang.by_type("kubernetes:helm.sh/v3:Release") if r.inputs["chart"].endswith("kueue")]
    assert "resources" not in yaml.safe_load(kueue["values"]["managerConfig"]["controllerManagerConfigYaml"])


def test_the_nic_cluster_policy_validates_against_the_upstream_crd(mixed_plan: Plan) -> None:
    [policy] = objects(mixed_plan, "NicClusterPolicy")
    assert validate_object(policy, "1.33") == []
    # The operator reconciles this name only (pkg/consts/consts.go NicClusterPolicyResourceName, v26.4.1).
    assert policy["metadata"]["name"] == "nic-cluster-policy"
    broken = copy.deepcopy(policy)
    broken["spec"]["rdmaSharedDevicePlugin"]["confg"] = "{}"
    assert validate_object(broken, "1.33"), "the CRD refuses an unknown field"
    config = json.loads(policy["spec"]["rdmaSharedDevicePlugin"]["config"])
    # The resource pods request is <prefix>/<resourceName> of this configuration, as in Azure's examples.
    [entry] = config["configList"]
    assert f"rdma/{entry['resourceName']}" == fabric_profile("Standard_ND96isr_H100_v5").rdma_resource
    assert entry["selectors"] == {"vendors": ["15b3"], "linkTypes": ["infiniband"]}


def test_pinned_images_are_the_releases_own(mixed_plan: Plan) -> None:
    [policy] = objects(mixed_plan, "NicClusterPolicy")
    for field, component in (("ofedDriver", "Mofed"), ("rdmaSharedDevicePlugin", "RdmaSharedDevicePlugin")):
        pinned = {key: policy["spec"][field][key] for key in ("repository", "image", "version")}
        upstream = RELEASE_IMAGES[component]
        assert pinned == {key: upstream[key] for key in ("repository", "image", "version")}, field
    [release] = releases(mixed_plan, "network-operator")
    chart = yaml.safe_load((NETWORK_OPERATOR / "Chart.yaml").read_text())
    assert release["version"] == f"v{chart['version']}" and release["namespace"] == "network-operator"
    assert release["repositoryOpts"]["repo"] == "https://helm.ngc.nvidia.com/nvidia"


def test_network_operator_values_are_keys_the_chart_reads(mixed_plan: Plan) -> None:
    [release] = releases(mixed_plan, "network-operator")
    values = release["values"]
    templates = template_value_paths([p.read_text() for p in (NETWORK_OPERATOR / "templates").glob("*.yaml")])
    assert unknown_value_paths(values, CHART_VALUES, templates, skip=("node-feature-discovery",)) == []
    nfd = helm_merge(CHART_VALUES["node-feature-discovery"], values["node-feature-discovery"])
    jsonschema.validate(values["node-feature-discovery"], NFD_SCHEMA)
    assert unknown_value_paths(values["node-feature-discovery"], NFD_VALUES, set(), skip=("worker",)) == []
    worker = dict(values["node-feature-discovery"]["worker"])
    config = worker.pop("config")
    assert unknown_value_paths({"worker": worker}, NFD_VALUES, set()) == []
    # worker.config is nfd-worker.conf, free-form in values.yaml: its keys are the ones the chart
    # documents there (commented out, between the NFD-WORKER-CONF markers).
    assert unknown_value_paths(config, worker_config_reference(), set()) == []
    assert nfd["worker"]["config"]["sources"]["pci"]["deviceClassWhitelist"] == ["0207"]
    assert unknown_value_paths({"operator": {"nodeSelectr": {}}}, CHART_VALUES, templates) == \
        ["operator.nodeSelectr"], "the oracle catches a misspelt key"


def test_the_namespace_is_privileged_as_azure_labels_it(mixed_plan: Plan) -> None:
    [namespace] = [n for n in objects(mixed_plan, "Namespace") if n["metadata"]["name"] == "network-operator"]
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"


# --- where things run --------------------------------------------------------------------------


def _gpu_operator_nfd_worker(plan: Plan) -> dict[str, Any] | None:
    found = releases(plan, "gpu-operator")
    if not found:
        return None
    values = helm_merge(GPU_OPERATOR_VALUES, found[0]["values"])
    return values["node-feature-discovery"]["worker"]


def _labels_infiniband(worker: dict[str, Any]) -> bool:
    """NFD's pci source labels pci-<vendor>.present for devices of a whitelisted class (a class
    prefix matches): an InfiniBand controller (0207) gives pci-15b3.present."""
    pci = worker["config"]["sources"]["pci"]
    return any("0207".startswith(cls) for cls in pci["deviceClassWhitelist"]) and "vendor" in pci["deviceLabelFields"]


def _labels_gpus(worker: dict[str, Any]) -> bool:
    pci = worker["config"]["sources"]["pci"]
    return any("0302".startswith(cls) or "0300".startswith(cls) for cls in pci["deviceClassWhitelist"])


def test_operator_on_the_system_pool_operands_on_infiniband_pools_only(mixed_plan: Plan) -> None:
    nodes = plan_nodes(mixed_plan)
    infiniband = {node.pool for node in nodes if fabric_profile(node.vm_size)}
    assert infiniband and any(node.labels.get("kubernetes.azure.com/accelerator") == "nvidia"
                              and node.pool not in infiniband for node in nodes), "the plan has both kinds"
    [release] = releases(mixed_plan, "network-operator")
    values = helm_merge(CHART_VALUES, release["values"])
    [policy] = objects(mixed_plan, "NicClusterPolicy")
    operands = {"affinity": {"nodeAffinity": policy["spec"]["nodeAffinity"]},
                "tolerations": policy["spec"]["tolerations"]}
    operator = {"nodeSelector": values["operator"]["nodeSelector"], "tolerations": values["operator"]["tolerations"],
                "affinity": values["operator"]["affinity"]}
    for node in nodes:
        system = node.labels["kubernetes.azure.com/mode"] == "system"
        assert fits(operator, node) == system, node.pool
        assert fits(operands, node) == (node.pool in infiniband), node.pool
        if node.pool in infiniband:
            # Still under the GPU gate's startup taint: the RDMA devices are there when the gate checks.
            assert fits(operands, node.with_state(taints=[GATE_TAINT])), node.pool


def test_every_infiniband_node_gets_the_mellanox_label_from_exactly_one_nfd(mixed_plan: Plan) -> None:
    """The operator deploys only on nodes labelled pci-15b3.present: on each InfiniBand node exactly one
    NFD worker runs and labels InfiniBand controllers; the Network Operator's labels no GPU (pci-10de,
    which would draw the GPU Operator's operands onto a driver Install pool)."""
    [release] = releases(mixed_plan, "network-operator")
    network = helm_merge(CHART_VALUES["node-feature-discovery"], release["values"]["node-feature-discovery"])["worker"]
    network_spec = {"affinity": network["affinity"], "tolerations": network["tolerations"]}
    gpu = _gpu_operator_nfd_worker(mixed_plan)
    assert gpu is not None and release["values"]["nfd"]["enabled"] is True
    gpu_spec = {"affinity": gpu.get("affinity"), "tolerations": gpu.get("tolerations"),
                "nodeSelector": gpu.get("nodeSelector")}
    assert _labels_infiniband(network) and not _labels_gpus(network)
    for node in plan_nodes(mixed_plan):
        new = node.with_state(taints=[GATE_TAINT]) if node.labels.get("kubernetes.azure.com/accelerator") else node
        workers = [w for w, spec in ((network, network_spec), (gpu, gpu_spec)) if fits(spec, new)]
        if fabric_profile(node.vm_size):
            assert len(workers) == 1 and _labels_infiniband(workers[0]), node.pool
        else:
            assert network not in workers, node.pool


def test_only_driver_none_infiniband_pools_use_the_gpu_operators_nfd() -> None:
    plan = shared_plan(infiniband_spec())
    [release] = releases(plan, "network-operator")
    assert release["values"]["nfd"] == {"enabled": False, "deployNodeFeatureRules": False}
    worker = _gpu_operator_nfd_worker(plan)
    assert worker is not None and _labels_infiniband(worker)
    h100 = next(n for n in plan_nodes(plan) if n.pool.startswith("h100"))
    assert fits({"affinity": worker["affinity"], "tolerations": worker["tolerations"]}, h100)


# --- jobs get the settings ---------------------------------------------------------------------


def test_teams_that_may_use_an_infiniband_pool_get_its_nccl_config_maps(mixed_plan: Plan) -> None:
    maps = {(c["metadata"]["namespace"], c["metadata"]["name"]): c for c in objects(mixed_plan, "ConfigMap")
            if c["metadata"]["name"].startswith("aksgpu-nccl")}
    h100 = fabric_profile("Standard_ND96isr_H100_v5")
    a100 = fabric_profile("Standard_ND96amsr_A100_v4")
    # research owns the H100 pool; the A100 InfiniBand pool is shared, so both teams may use it.
    assert set(maps) == {("research", h100.nccl_config_map), ("research", h100.topology_config_map),
                         ("research", a100.nccl_config_map), ("research", a100.topology_config_map),
                         ("vision", a100.nccl_config_map), ("vision", a100.topology_config_map)}
    env = maps[("research", h100.nccl_config_map)]["data"]
    # The keys are the names without NCCL_; envFrom's prefix gives them back (aksgpu-team-gpus admits
    # envFrom in a GPU container only with a prefix).
    assert {f"NCCL_{key}": value for key, value in env.items()} == h100.nccl_env
    # envFrom skips (or, with relaxed validation, imports) keys that are not variable names: keep to names.
    assert all(re.fullmatch(r"[A-Z_][A-Z0-9_]*", key) for key in env)
    topology = maps[("research", h100.topology_config_map)]["data"]
    assert topology == {TOPOLOGY_KEY: h100.topology_xml()}
    for config_map in maps.values():
        assert validate_object(config_map | {"apiVersion": "v1", "kind": "ConfigMap"}, "1.33") == []


def test_gpu_operator_leaves_driver_rdma_off() -> None:
    """GPUDirect RDMA on driver None pools goes through DMA-BUF; driver.rdma (cluster-wide) would make
    the driver wait for a DOCA driver on every pci-15b3 node (nvidia-validator MOFED.validate)."""
    plan = shared_plan(infiniband_spec())
    [release] = releases(plan, "gpu-operator")
    values = helm_merge(GPU_OPERATOR_VALUES, release["values"])
    assert values["driver"]["rdma"]["enabled"] is False
    assert values["driver"]["kernelModuleType"] == "auto"


# --- the spec ----------------------------------------------------------------------------------


def test_an_infiniband_pool_with_driver_install_is_warned() -> None:
    _, issues = parse_cluster_spec(infiniband_spec(gpu={"driver": "Install"}))
    [warning] = [i for i in issues if i.path == "nodePools[1].gpu.driver"]
    assert warning.severity == "warning" and "nvidia-peermem" in warning.rule and "gpu.driver: None" in warning.fix
    _, issues = parse_cluster_spec(infiniband_spec())
    assert not [i for i in issues if i.path == "nodePools[1].gpu.driver"]
    _, issues = parse_cluster_spec(edit(infiniband_spec(gpu={"driver": "Install"}), "inCluster.enabled", False))
    assert not [i for i in issues if i.path == "nodePools[1].gpu.driver"], "nothing installed, nothing to warn of"


def test_the_chart_version_is_a_spec_field() -> None:
    spec = edit(infiniband_spec(), "gpuSoftware.networkOperator.chartVersion", "v26.1.2")
    [release] = releases(shared_plan(spec), "network-operator")
    assert release["version"] == "v26.1.2"
    with pytest.raises(SpecError):
        parse_cluster_spec(edit(infiniband_spec(), "gpuSoftware.networkOperator.chartVersion", "not a version!"))


# --- the README's gang example -------------------------------------------------------------------


def readme_gang_example() -> list[dict[str, Any]]:
    from tests.docs_pages import docs_page, section as docs_section

    section = docs_section(docs_page("guides/gpus/training.md"), "How a user submits a gang job")
    [block] = re.findall(r"```yaml\n(.*?)```", section, re.S)
    return list(yaml.safe_load_all(block))


def test_the_readme_gang_example_runs_nccl_over_infiniband_as_aksgpu_sets_it_up() -> None:
    """The example asks for what aksgpu's fabric provides on the prod example's H100 pool, by the
    names the table gives: the RDMA resource, the NCCL ConfigMaps, the topology mount, IPC_LOCK, /dev/shm."""
    objects_ = readme_gang_example()
    for obj in objects_:
        assert validate_object(obj, "1.33") == [], obj["kind"]
    job = next(o for o in objects_ if o["kind"] == "Job")
    profile = fabric_profile("Standard_ND96isr_H100_v5")
    pod = job["spec"]["template"]["spec"]
    [container] = pod["containers"]
    limits = container["resources"]["limits"]
    assert limits[profile.rdma_resource] == profile.rdma_per_node
    assert limits["nvidia.com/gpu"] == catalog.vm_sizes()[profile.vm_size].gpus
    assert {"prefix": "NCCL_", "configMapRef": {"name": profile.nccl_config_map}} in container["envFrom"]
    needs = pod_requirements()
    assert set(needs.capabilities) <= set(container["securityContext"]["capabilities"]["add"])
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    assert volumes[mounts[needs.shm_mount_path]]["emptyDir"]["medium"] == needs.shm_medium == "Memory"
    topology = volumes[mounts[topology_mount_path()]]
    assert topology["configMap"]["name"] == profile.topology_config_map
    assert profile.nccl_env["NCCL_TOPO_FILE"].startswith(topology_mount_path() + "/")
    # The pods find each other through the headless Service the Job's subdomain names.
    service = next(o for o in objects_ if o["kind"] == "Service")
    assert pod["subdomain"] == service["metadata"]["name"] and service["spec"]["clusterIP"] == "None"


def test_the_readme_example_objects_are_declared_in_the_prod_example(example_plans: dict[str, Plan]) -> None:
    """The ConfigMaps the README's example reads exist in its namespace in the prod plan, and Kueue
    does not hold the RDMA resource against quota there."""
    plan = example_plans["prod"]
    job = next(o for o in readme_gang_example() if o["kind"] == "Job")
    namespace = job["metadata"]["namespace"]
    pod = job["spec"]["template"]["spec"]
    wanted = {ref["configMapRef"]["name"] for ref in pod["containers"][0]["envFrom"]} | \
        {v["configMap"]["name"] for v in pod["volumes"] if "configMap" in v}
    declared = {c["metadata"]["name"] for c in objects(plan, "ConfigMap")
                if c["metadata"].get("namespace") == namespace}
    assert wanted <= declared
    [kueue] = releases(plan, "oci://registry.k8s.io/kueue/charts/kueue")
    config = yaml.safe_load(kueue["values"]["managerConfig"]["controllerManagerConfigYaml"])
    rdma = fabric_profile("Standard_ND96isr_H100_v5").rdma_resource
    assert any(rdma.startswith(prefix) for prefix in config["resources"]["excludeResourcePrefixes"])


def test_the_watchdog_knows_what_each_gate_pod_waits_for(mixed_plan: Plan) -> None:
    """A gate pod that requests the RDMA resource cannot be scheduled until the Network Operator's
    device plugin advertises it; the watchdog must know that resource per pool to name it when a
    node's check never starts (node_gate.py watch_unstarted)."""
    waits: dict[str, set[str]] = {}
    for daemonset in objects(mixed_plan, "DaemonSet"):
        if not daemonset["metadata"]["name"].startswith("aksgpu-gpu-gate"):
            continue
        pod = daemonset["spec"]["template"]["spec"]
        terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
        pools = {value for term in terms for e in term["matchExpressions"]
                 if e["key"] == "kubernetes.azure.com/agentpool" for value in e["values"]}
        requested = {name for c in [*pod.get("initContainers", []), *pod["containers"]]
                     for name in (c.get("resources") or {}).get("requests", {}) if name.startswith("rdma/")}
        for pool in pools:
            waits.setdefault(pool, set()).update(requested)
    [watchdog] = [c for c in objects(mixed_plan, "CronJob") if c["metadata"]["name"] == "aksgpu-gpu-gate-watchdog"]
    args = watchdog["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["command"]
    told = dict(pair.split("=") for pair in args[args.index("--gate-resources") + 1].split(","))
    assert told == {pool: resource for pool, found in waits.items() for resource in found}
    assert set(told) == {"h100", "a100ib"}, "both InfiniBand pools, whatever their driver mode"


def test_the_gates_check_on_an_infiniband_node_waits_for_the_doca_driver(mixed_plan: Plan) -> None:
    """The DOCA-OFED driver container reloads mlx5 when it starts; a port check during the reload
    would fail a healthy node. The gate's check requests the RDMA resource, and the upstream RDMA
    shared device plugin that advertises it runs only on nodes whose driver container is Ready."""
    template = (NETWORK_OPERATOR / "manifests" / "0060_rdma-shared-dev-plugin-ds.yaml").read_text()
    selector = template.split("nodeSelector:", 1)[1].split("{{-", 1)[0]
    assert yaml.safe_load(selector) == {"feature.node.kubernetes.io/pci-15b3.present": "true",
                                        "network.nvidia.com/operator.mofed.wait": "false"}
    [policy] = objects(mixed_plan, "NicClusterPolicy")
    assert policy["spec"].get("ofedDriver"), "the driver the plugin waits for is the one aksgpu installs"
    checks = [c for d in objects(mixed_plan, "DaemonSet") if d["metadata"]["name"].startswith("aksgpu-gpu-gate")
              for c in d["spec"]["template"]["spec"].get("initContainers", []) if c["name"] == "check"]
    waiting = [c for c in checks if "rdma/shared_ib" in c["resources"]["requests"]]
    assert len(waiting) == 2, "both InfiniBand pools' checks (driver None and driver Install)"
