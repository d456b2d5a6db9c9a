"""aksgpu's GPU metric list and alert rules against what they rely on: DCGM's own field list
(tests/data/dcgm, DCGM 4.6.0), the exporter's CSVs, the PodMonitor CRD, and the rules' PromQL,
parsed by promql-parser and evaluated on synthetic series by a small evaluator of exactly the
operators the rules use (instant and range selectors, max_over_time, max by, comparisons with a
number, unless on). Also the cordon blocks the in-cluster passive remediation reads."""

from __future__ import annotations

import csv
import datetime
import hashlib
import re
from pathlib import Path
from typing import Any

import promql_parser
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from aksgpu import catalog
from aksgpu.node.gpu_check import thresholds
from aksgpu.components.kubernetes.gpu_metrics import (
    alert_rules,
    bundled_prometheus_values,
    cordon_conditions,
    pod_monitor,
    scrape_job,
)
from aksgpu.spec import parse_cluster_spec
from tests.helpers import REPO, base_spec, edit
from tests.oracles.kubernetes import DATA, validate_object

METRICS_CSV = REPO / "aksgpu" / "catalog" / "dcgm_metrics.csv"
DCGM_FIELDS = DATA / "dcgm" / "dcgm_fields.h"
CORDONING = {"GpuCriticalXid", "GpuDoubleBitEccErrors", "GpuRowRemapFailure", "GpuRowRemapPending"}


# --- DCGM's field list -------------------------------------------------------------------------


def dcgm_fields(text: str) -> tuple[dict[str, int], dict[str, str]]:
    """DCGM's fields from dcgm_fields.h: every name (current, and the old names 4.6.0 keeps as
    `#define OLD NEW` aliases) with its id, and each id's comment."""
    ids = {name: int(value) for name, value in re.findall(r"^#define\s+(DCGM_FI_\w+)\s+(\d+)\b", text, re.M)}
    docs = {}
    for comment, name in re.findall(r"/\*((?:(?!\*/).)*)\*/\s*#define\s+(DCGM_FI_\w+)\s+\d+\b", text, re.S):
        docs[name] = " ".join(line.strip(" */") for line in comment.splitlines()).strip()
    aliases = dict(re.findall(r"^#define\s+(DCGM_FI_\w+)\s+(DCGM_FI_\w+)\b", text, re.M))
    for old, new in aliases.items():
        while new in aliases:
            new = aliases[new]
        if new in ids:
            ids[old] = ids[new]
            if new in docs:
                docs[old] = docs[new]
    return ids, docs


def metric_list(path: Path = METRICS_CSV) -> list[list[str]]:
    """The rows of a metric list as the exporter reads it (encoding/csv, '#' comments, fields trimmed;
    NVIDIA/dcgm-exporter internal/pkg/counters/counter_config.go@4.5.3-4.8.2 ReadCSVFile, ExtractCounters)."""
    lines = [line for line in path.read_text().splitlines() if line.strip() and not line.lstrip().startswith("#")]
    return [[field.strip() for field in row] for row in csv.reader(lines)]


def exporter_fields(path: Path) -> dict[str, str]:
    """Name -> type of every field an exporter CSV lists, commented out or not."""
    found = {}
    for line in path.read_text().splitlines():
        text = line.strip().lstrip("# ").strip()
        if text.startswith(("DCGM_FI_", "DCGM_EXP_")):
            name, kind = (part.strip() for part in text.split(",")[:2])
            found[name] = kind
    return found


def test_the_dcgm_copy_is_the_one_its_source_names() -> None:
    digest = hashlib.sha256(DCGM_FIELDS.read_bytes()).hexdigest()
    assert f"`{digest}`" in (DATA / "dcgm" / "SOURCE.md").read_text()


def test_the_metric_list_is_dcgms_own_fields_typed_as_dcgm_describes_them() -> None:
    ids, docs = dcgm_fields(DCGM_FIELDS.read_text())
    assert ids["DCGM_FI_DEV_ROW_REMAP_PENDING"] == 396 and ids["DCGM_FI_DEV_ROW_REMAP_FAILURE"] == 395
    assert ids["DCGM_FI_DEV_RETIRED_PENDING"] == ids["DCGM_FI_DEV_PAGE_RETIRED_PENDING"] == 392, "4.6.0's alias"
    assert "DCGM_FI_DEV_ROW_REMAP_PENDIN" not in ids and len(ids) > 600, "the parser finds DCGM's list, nothing else"
    rows = metric_list()
    assert all(len(row) == 3 for row in rows), "the exporter refuses a row that is not name, type, help"
    exporter = {**exporter_fields(DATA / "dcgm-exporter" / "default-counters.csv"),
                **exporter_fields(DATA / "dcgm-exporter" / "dcp-metrics-included.csv")}
    for name, kind, _help in rows:
        if name.startswith("DCGM_EXP_"):
            # Computed by the exporter itself, not DCGM fields (internal/pkg/counters/exporter_counters.go).
            assert exporter.get(name) == kind, name
            continue
        assert name in ids, f"{name} is no field of DCGM 4.6.0: the exporter would stop on it"
        assert kind in ("gauge", "counter", "label"), name
        doc = docs.get(name, "")
        if doc.startswith("Whether"):
            assert kind == "gauge", f"{name} is a yes/no flag ({doc!r}): a gauge"
        if "monotonically increasing" in doc:
            assert kind == "counter", f"{name}: {doc!r}"
    ours = {row[0]: row[1] for row in rows}
    assert ours["DCGM_FI_DEV_ROW_REMAP_PENDING"] == ours["DCGM_FI_DEV_RETIRED_PENDING"] == "gauge"
    defaults_off = set(exporter_fields(DATA / "dcgm-exporter" / "default-counters.csv")) - {
        row[0] for row in metric_list(DATA / "dcgm-exporter" / "default-counters.csv")}
    health = {"DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "DCGM_FI_DEV_RETIRED_PENDING",
              "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL", "DCGM_FI_DEV_THERMAL_VIOLATION",
              "DCGM_EXP_XID_ERRORS_COUNT"}
    assert health <= defaults_off & set(ours), "what the default list leaves out, aksgpu's adds"
    assert "DCGM_FI_DEV_ROW_REMAP_PENDING" not in exporter, "no exporter list has it: aksgpu adds it"
    assert {"DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_ROW_REMAP_FAILURE", "DCGM_FI_DEV_GPU_TEMP",
            "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED"} <= set(ours)


def test_the_type_rules_catch_a_flag_typed_as_a_counter(tmp_path: Path) -> None:
    _, docs = dcgm_fields(DCGM_FIELDS.read_text())
    assert docs["DCGM_FI_DEV_RETIRED_PENDING"].startswith("Whether"), \
        "the exporter's own CSV calls it a counter; DCGM says it is a yes/no flag"
    assert exporter_fields(DATA / "dcgm-exporter" / "default-counters.csv")["DCGM_FI_DEV_RETIRED_PENDING"] == "counter"
    broken = tmp_path / "list.csv"
    broken.write_text("DCGM_FI_DEV_RETIRED_PENDING, gauge, Whether pages are pending (1=yes, 0=no)\n")
    assert len(metric_list(broken)[0]) == 4, "a comma in the help text breaks the row"


# --- the rules as data -------------------------------------------------------------------------


def test_the_xids_are_azure_nhcs_plus_95_and_the_check_adds_only_94() -> None:
    table = catalog.load("gpu_alerts")
    aznhc = {int(x) for x in re.search(r"\(([\d ]+)\)", table["source"]["xids"]).group(1).split()}
    assert set(table["nodeXids"]) == aznhc | {95} and table["nodeXids"] == sorted(table["nodeXids"])
    assert 94 not in table["nodeXids"], "a contained error restarts one application, NVIDIA's catalog says"
    assert thresholds.limits(None, None).critical_xids - set(table["nodeXids"]) == {94}, \
        "the GPU check fails a node on the alert list and 94 (gpu_alerts.yaml says why)"
    [xid_rule] = [r for r in alert_rules() if r["alert"] == "GpuCriticalXid"]
    matcher = promql_parser.parse(xid_rule["expression"]).lhs.args[0].vector_selector.matchers.matchers[0]
    assert matcher.name == "xid" and set(matcher.value.split("|")) == {str(x) for x in table["nodeXids"]}


def test_page_retirement_is_watched_for_the_gpus_before_ampere_and_row_remapping_after() -> None:
    rules = {r["alert"]: r for r in alert_rules()}
    assert rules["GpuRowRemapPending"]["expression"] == "DCGM_FI_DEV_ROW_REMAP_PENDING > 0"
    assert "before Ampere" in rules["GpuRetiredPagesPending"]["reason"]
    architectures = {model["architecture"] for model in catalog.load("vm_sizes")["gpuModels"].values()}
    assert architectures & {"Volta", "Turing"}, "the catalog has GPUs that retire pages: the rule is not dead"
    assert architectures & {"Ampere", "Hopper", "Blackwell"}


def test_every_rule_cordons_or_says_why_not() -> None:
    table = catalog.load("gpu_alerts")
    ours = {row[0] for row in metric_list()}
    for rule in table["rules"]:
        block, why = rule.get("cordon"), rule.get("cordonReason")
        assert (block is None) != (why is None), f"{rule['alert']}: a cordon block or a cordonReason, not both"
        if rule["severity"] <= 1:
            assert block is not None or (isinstance(why, str) and why.strip()), rule["alert"]
        if why is not None:
            assert isinstance(why, str) and len(why) > 20, rule["alert"]
            continue
        assert set(block) <= {"metric", "above", "label", "values"} and isinstance(block["above"], (int, float))
        assert block["metric"] in ours, f"{rule['alert']} cordons on a metric the exporter is not told to export"
        selectors = re.findall(r"\b(DCGM_\w+)(?:\{([^}]*)\})?", rule["expression"])
        assert [name for name, _ in selectors] == [block["metric"]], "the rule and its cordon read one metric"
        if "label" in block:
            assert isinstance(table[block["values"]], list), "values names a list of this file"
            assert f'{block["label"]}=~"NODE_XIDS"' in selectors[0][1]
    assert {r["alert"] for r in table["rules"] if "cordon" in r} == CORDONING


def test_cordon_conditions_expand_the_list_they_name() -> None:
    conditions = {c["alert"]: c for c in cordon_conditions()}
    assert set(conditions) == CORDONING
    xid = conditions["GpuCriticalXid"]
    assert xid == {"alert": "GpuCriticalXid", "metric": "DCGM_EXP_XID_ERRORS_COUNT", "above": 0, "label": "xid",
                   "values": [str(x) for x in catalog.load("gpu_alerts")["nodeXids"]]}
    assert "95" in xid["values"] and "94" not in xid["values"]
    assert conditions["GpuRowRemapPending"] == {"alert": "GpuRowRemapPending",
                                                "metric": "DCGM_FI_DEV_ROW_REMAP_PENDING", "above": 0}


# --- one exporter scrape ----------------------------------------------------------------------

GPU_LABELS = 'gpu="{gpu}",UUID="GPU-{gpu}",pci_bus_id="00000000:{gpu}B:00.0",device="nvidia{gpu}",' \
             'modelName="NVIDIA H100 80GB HBM3",Hostname="aks-h100-1",DCGM_FI_DRIVER_VERSION="580.159.04"'


def exporter_scrape(xids: dict[int, int], dbe: int = 0, remap_failed: int = 0, remap_pending: int = 0) -> str:
    """One scrape of the exporter on a node, GPU 3 carrying the given values: the exporter's shape
    (HELP/TYPE from our list; the xid and window_size_in_ms labels of xid_collector.go and const.go)."""
    help_and_type = {row[0]: (row[2], row[1]) for row in metric_list()}
    lines: list[str] = []

    def family(name: str, samples: list[tuple[str, float]]) -> None:
        help_text, kind = help_and_type[name]
        lines.extend([f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"])
        lines.extend(f"{name}{{{labels}}} {value:g}" for labels, value in samples)

    family("DCGM_EXP_XID_ERRORS_COUNT", [(GPU_LABELS.format(gpu=3) + f',xid="{xid}",window_size_in_ms="300000"', count)
                                         for xid, count in xids.items()])
    for name, value in (("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", dbe), ("DCGM_FI_DEV_ROW_REMAP_FAILURE", remap_failed),
                        ("DCGM_FI_DEV_ROW_REMAP_PENDING", remap_pending), ("DCGM_FI_DEV_GPU_TEMP", 45)):
        family(name, [(GPU_LABELS.format(gpu=gpu), value if gpu == 3 else 0) for gpu in range(8)])
    return "\n".join(lines) + "\n"


def cordoning(scrape: str) -> set[str]:
    """The rules whose cordon block one scrape meets (the blocks' meaning, as gpu_alerts.yaml states it)."""
    met = set()
    for family in text_string_to_metric_families(scrape):
        for condition in cordon_conditions():
            if family.name != condition["metric"]:
                continue
            for sample in family.samples:
                label = condition.get("label")
                if sample.value > condition["above"] and (label is None
                                                          or sample.labels.get(label) in condition["values"]):
                    met.add(condition["alert"])
    return met


@pytest.mark.parametrize(("scrape", "expected"), [
    ({"xids": {}}, set()),
    ({"xids": {13: 4, 31: 1}}, set()),  # application faults: the device plugin ignores them too
    ({"xids": {94: 1}}, set()),  # contained: restart the one application
    ({"xids": {95: 1}}, {"GpuCriticalXid"}),
    ({"xids": {79: 2, 13: 1}}, {"GpuCriticalXid"}),
    ({"xids": {48: 1}, "dbe": 2, "remap_pending": 1},
     {"GpuCriticalXid", "GpuDoubleBitEccErrors", "GpuRowRemapPending"}),
    ({"xids": {}, "remap_failed": 1}, {"GpuRowRemapFailure"}),
    ({"xids": {}, "remap_pending": 1}, {"GpuRowRemapPending"}),
])
def test_one_exporter_scrape_meets_the_cordon_blocks(scrape: dict[str, Any], expected: set[str]) -> None:
    assert cordoning(exporter_scrape(**scrape)) == expected


# --- a small PromQL evaluator ------------------------------------------------------------------

Labels = dict[str, str]
Series = list[tuple[Labels, list[tuple[float, float]]]]  # labels (with __name__), samples (seconds, value)
LOOKBACK = 300.0  # Prometheus's default lookback delta for an instant selector
NOW = 3600.0


class Unsupported(Exception):
    """An operator this evaluator does not implement."""


def _matches(matchers: Any, labels: Labels, name: str | None) -> bool:
    if name is not None and labels.get("__name__") != name:
        return False
    for matcher in matchers.matchers:
        value = labels.get(matcher.name, "")
        if matcher.op == promql_parser.MatchOp.Equal:
            ok = value == matcher.value
        elif matcher.op == promql_parser.MatchOp.NotEqual:
            ok = value != matcher.value
        elif matcher.op == promql_parser.MatchOp.Re:
            ok = re.fullmatch(matcher.value, value) is not None
        else:
            ok = re.fullmatch(matcher.value, value) is None
        if not ok:
            return False
    return True


def _without_name(labels: Labels) -> Labels:
    return {k: v for k, v in labels.items() if k != "__name__"}


COMPARE = {">": float.__gt__, "<": float.__lt__, ">=": float.__ge__, "<=": float.__le__, "==": float.__eq__,
           "!=": float.__ne__}


def evaluate(expr: Any, series: Series, at: float = NOW) -> Any:
    """The instant vector (list of (labels, value)) or number `expr` gives at `at`."""
    if isinstance(expr, promql_parser.NumberLiteral):
        return float(expr.val)
    if isinstance(expr, promql_parser.ParenExpr):
        return evaluate(expr.expr, series, at)
    if isinstance(expr, promql_parser.VectorSelector):
        found = []
        for labels, samples in series:
            recent = [v for t, v in samples if at - LOOKBACK < t <= at]
            if recent and _matches(expr.matchers, labels, expr.name):
                found.append((labels, float(recent[-1])))
        return found
    if isinstance(expr, promql_parser.Call) and expr.func.name == "max_over_time":
        [matrix] = expr.args
        window = matrix.range.total_seconds()
        selector = matrix.vector_selector
        found = []
        for labels, samples in series:
            inside = [v for t, v in samples if at - window < t <= at]
            if inside and _matches(selector.matchers, labels, selector.name):
                found.append((_without_name(labels), float(max(inside))))
        return found
    if isinstance(expr, promql_parser.AggregateExpr) and str(expr.op) == "max" \
            and expr.modifier is not None and expr.modifier.type == promql_parser.AggModifierType.By:
        groups: dict[tuple[tuple[str, str], ...], float] = {}
        for labels, value in evaluate(expr.expr, series, at):
            key = tuple((name, labels[name]) for name in expr.modifier.labels if name in labels)
            groups[key] = max(value, groups.get(key, value))
        return [(dict(key), value) for key, value in groups.items()]
    if isinstance(expr, promql_parser.BinaryExpr):
        op = str(expr.op)
        left, right = evaluate(expr.lhs, series, at), evaluate(expr.rhs, series, at)
        if op in COMPARE and isinstance(right, float) and isinstance(left, list) and not expr.modifier:
            return [(labels, value) for labels, value in left if COMPARE[op](value, right)]
        matching = expr.modifier.matching if expr.modifier else None
        if op == "unless" and matching is not None and matching.type == promql_parser.LabelModifierType.Include:
            def signature(labels: Labels) -> tuple[str, ...]:
                return tuple(labels.get(name, "") for name in matching.labels)
            present = {signature(labels) for labels, _ in right}
            return [(labels, value) for labels, value in left if signature(labels) not in present]
    raise Unsupported(str(expr))


def firing(expression: str, series: Series) -> list[Labels]:
    return [labels for labels, _ in evaluate(promql_parser.parse(expression), series)]


def test_the_evaluator_follows_promql_on_what_it_implements() -> None:
    series: Series = [({"__name__": "x", "node": "a", "i": "1"}, [(NOW, 1.0)]),
                      ({"__name__": "x", "node": "a", "i": "2"}, [(NOW, 3.0)]),
                      ({"__name__": "x", "node": "b", "i": "1"}, [(NOW - 400, 5.0)]),  # older than the lookback
                      ({"__name__": "y", "node": "a"}, [(NOW, 1.0)])]
    assert evaluate(promql_parser.parse("max by (node) (x)"), series) == [({"node": "a"}, 3.0)]
    assert firing('x{i=~"1|3"} > 0', series) == [{"__name__": "x", "node": "a", "i": "1"}]
    assert firing("max by (node) (x) unless on (node) y", series) == []
    assert firing("max_over_time(x[10m]) > 4", series) == [{"node": "b", "i": "1"}]
    with pytest.raises(Unsupported):
        firing("increase(x[10m]) > 0", series)


# --- GpuMetricsMissing -------------------------------------------------------------------------


def relabel(meta: Labels, configs: list[dict[str, Any]]) -> Labels | None:
    """A target's labels after Prometheus relabeling (replace, keep), in a scrape job's (snake case) or
    a PodMonitor's (camel case) spelling; None when a keep drops the target; meta labels removed."""
    labels = dict(meta)
    for config in configs:
        sources = config.get("source_labels", config.get("sourceLabels", []))
        value = config.get("separator", ";").join(labels.get(name, "") for name in sources)
        match = re.fullmatch(config.get("regex", "(.*)"), value)
        action = config.get("action", "replace").lower()
        if action == "keep":
            if match is None:
                return None
        elif action == "replace":
            if match is not None:
                replacement = match.expand(config.get("replacement", "$1").replace("$", "\\"))
                target = config.get("target_label", config.get("targetLabel"))
                if replacement:
                    labels[target] = replacement
                else:
                    labels.pop(target, None)
        else:
            raise Unsupported(action)
    return {k: v for k, v in labels.items() if not k.startswith("__")}


def exporter_target(node: str, configs: list[dict[str, Any]], job: str, namespace: str) -> Labels:
    """The labels of `up` for the exporter pod on `node` (Prometheus's pod-role discovery meta labels)."""
    meta = {"__meta_kubernetes_namespace": namespace, "__meta_kubernetes_pod_name": f"dcgm-exporter-{node}",
            "__meta_kubernetes_pod_node_name": node, "__meta_kubernetes_pod_label_app": "nvidia-dcgm-exporter",
            "__meta_kubernetes_pod_container_port_name": "metrics", "__address__": "10.244.0.9:9400"}
    labels = relabel(meta, configs)
    assert labels is not None, "the scrape keeps the exporter's pod"
    return {"__name__": "up", **labels, "job": job, "instance": "10.244.0.9:9400"}


def kube_state(node: str, gpus: int | None, cordoned: bool = False) -> Series:
    """kube-state-metrics' series for a node (internal/store/node.go@v2.19.0 and @v2.20.0: node,
    resource, unit; an extended resource sanitized as node_test.go expects, nvidia_com_gpu)."""
    ksm = {"job": "kube-state-metrics", "instance": "ama-metrics-ksm.kube-system.svc.cluster.local:8080"}
    found: Series = [({"__name__": "kube_node_status_capacity", "node": node, "resource": "cpu", "unit": "core", **ksm},
                      [(NOW, 96.0)])]
    if gpus is not None:
        found.append(({"__name__": "kube_node_status_capacity", "node": node, "resource": "nvidia_com_gpu",
                       "unit": "integer", **ksm}, [(NOW, float(gpus))]))
    if cordoned:
        found.append(({"__name__": "kube_node_spec_taint", "node": node, "key": "node.kubernetes.io/unschedulable",
                       "value": "", "effect": "NoSchedule", **ksm}, [(NOW, 1.0)]))
    return found


def cluster(configs: list[dict[str, Any]], job: str, namespace: str) -> Series:
    up = {node: exporter_target(node, configs, job, namespace) for node in ("gpu-ok", "gpu-down", "gpu-rolling")}
    second = {**up["gpu-rolling"], "instance": "10.244.0.10:9400"}
    return [
        *kube_state("gpu-ok", 8), (up["gpu-ok"], [(NOW, 1.0)]),
        *kube_state("gpu-no-exporter", 8),
        *kube_state("gpu-down", 8), (up["gpu-down"], [(NOW, 0.0)]),
        *kube_state("gpu-rolling", 8), (up["gpu-rolling"], [(NOW, 0.0)]), (second, [(NOW, 1.0)]),
        *kube_state("gpu-cordoned", 8, cordoned=True),
        *kube_state("gpu-plugin-gone", 0),  # the kubelet zeroes a device plugin's resource when it goes
        *kube_state("cpu-node", None),
    ]


def _spec(scraper: str) -> Any:
    raw = edit(edit(base_spec(), "monitoring.managedPrometheus", scraper == "managedPrometheus"),
               "gpuHealth.metrics.scraper", scraper)
    if scraper == "bundled":  # the bundled Prometheus runs on a pool for ordinary pods
        raw = edit(raw, "nodePools.1", {"name": "cpu", "vmSize": "Standard_D8ds_v5", "count": 1})
    spec, _ = parse_cluster_spec(raw)
    return spec


@pytest.mark.parametrize("scraper", ["managedPrometheus", "bundled"])
def test_gpu_metrics_missing_fires_for_a_gpu_node_without_a_scraped_exporter(scraper: str) -> None:
    spec = _spec(scraper)
    if scraper == "managedPrometheus":
        monitor = pod_monitor(spec, "aksgpu-system")
        [endpoint] = monitor["spec"]["podMetricsEndpoints"]
        configs = endpoint.get("relabelings", [])
        # prometheus-operator sets a PodMonitor's job to <namespace>/<name> (Azure's target allocator
        # generates the scrape config with it), and keeps only the endpoint's port.
        job = f"{monitor['metadata']['namespace']}/{monitor['metadata']['name']}"
    else:
        config = scrape_job(spec, "aksgpu-system")
        configs, job = config["relabel_configs"], config["job_name"]
    [rule] = [r for r in alert_rules() if r["alert"] == "GpuMetricsMissing"]
    series = cluster(configs, job, "aksgpu-system")
    assert sorted(labels["node"] for labels in firing(rule["expression"], series)) == ["gpu-down", "gpu-no-exporter"]
    # The rule it replaces saw only the exporter that was there and down.
    assert [labels["node"] for labels in firing('up{job=~".*aksgpu-dcgm-exporter.*"} == 0', series)
            if labels["node"] != "gpu-rolling"] == ["gpu-down"]
    without_node = cluster([c for c in configs if c.get("target_label", c.get("targetLabel")) != "node"], job,
                           "aksgpu-system")
    assert len(firing(rule["expression"], without_node)) == 4, \
        "without the node on up, every schedulable GPU node looks blind"


def test_the_pod_monitor_puts_the_node_on_its_series_and_its_crd_accepts_it() -> None:
    monitor = pod_monitor(_spec("managedPrometheus"), "aksgpu-system")
    assert validate_object(monitor, "1.33") == []
    [endpoint] = monitor["spec"]["podMetricsEndpoints"]
    assert endpoint["relabelings"] == [{"sourceLabels": ["__meta_kubernetes_pod_node_name"], "targetLabel": "node",
                                        "action": "replace"}]
    broken = {**monitor, "spec": {**monitor["spec"], "podMetricsEndpoints": [
        {**endpoint, "relabelings": [{"sourceLabel": ["__meta_kubernetes_pod_node_name"], "targetLabel": "node"}]}]}}
    assert validate_object(broken, "1.33"), "the CRD refuses a misspelt relabeling"
    job = scrape_job(_spec("bundled"), "aksgpu-system")
    assert {"source_labels": ["__meta_kubernetes_pod_node_name"], "target_label": "node"} in job["relabel_configs"]


def test_the_bundled_prometheus_keeps_kube_state_metrics_node_label() -> None:
    """GpuMetricsMissing joins on kube-state-metrics' own node label: the chart's job for annotated
    services also writes a node target label (the scrape's pod), which honor_labels gives way."""
    chart = yaml.safe_load((DATA / "prometheus-chart" / "values.yaml").read_text())
    endpoints = chart["scrapeConfigs"]["kubernetes-service-endpoints"]
    assert endpoints["enabled"] is True and endpoints["honor_labels"] is True
    assert {"source_labels": ["__meta_kubernetes_pod_node_name"], "action": "replace", "target_label": "node"} in \
        endpoints["relabel_configs"]
    values = bundled_prometheus_values(_spec("bundled"), "aksgpu-system")
    assert values["kube-state-metrics"] == {"enabled": True} and "scrapeConfigs" not in values
    rules = values["serverFiles"]["alerting_rules.yml"]["groups"][0]["rules"]
    assert all("$labels.node" in rule["annotations"]["summary"] for rule in rules)


def test_every_rule_parses_and_the_instant_ones_fire_with_their_cordon_blocks() -> None:
    scrape = exporter_scrape(xids={95: 1, 94: 1}, remap_failed=1, remap_pending=1)
    series: Series = []
    for family in text_string_to_metric_families(scrape):
        for sample in family.samples:
            series.append(({"__name__": family.name, **sample.labels}, [(NOW - 60, sample.value)]))
    evaluated = set()
    for rule in alert_rules():
        promql_parser.parse(rule["expression"])
        try:
            fired = firing(rule["expression"], series)
        except Unsupported:
            continue  # increase(): its extrapolation is not modelled here
        evaluated.add(rule["alert"])
        if rule["alert"] in CORDONING:
            assert fired and all(labels["gpu"] == "3" for labels in fired), rule["alert"]
            if rule["alert"] == "GpuCriticalXid":
                assert [labels["xid"] for labels in fired] == ["95"]
    assert evaluated >= {"GpuCriticalXid", "GpuRowRemapFailure", "GpuRowRemapPending", "GpuRetiredPagesPending",
                         "GpuManyRemappedRows", "GpuMetricsMissing"}
    assert datetime.timedelta(minutes=15) == promql_parser.parse(
        next(r for r in alert_rules() if r["alert"] == "GpuCriticalXid")["expression"]).lhs.args[0].range
