"""Oracle: which GPUs a container on an AKS GPU node can use, from its pod spec, its image's ENV and
the node, following the chain from the API object to the NVIDIA container runtime.

Each step is the upstream behaviour as read at the versions aksgpu runs (the files the tests read
are under tests/data/nvidia-container-toolkit/ and tests/data/gpu-operator/, SOURCE.md there):

1. The device plugin answers Allocate for a container that requests nvidia.com/gpu (a request of 0
   calls none). With the envvar strategy (aksgpu's own plugin on driver Install pools) it returns
   NVIDIA_VISIBLE_DEVICES=<ids>; with the GPU Operator's CDI strategies (cdi-annotations,cdi-cri,
   the operator's transformDevicePluginCtrForCDI @v26.7.0) it returns the CDI devices and no
   variable (NVIDIA/k8s-device-plugin internal/plugin/server.go getAllocateResponse @v0.20.0).
2. kubelet builds the env: the device plugin's envs first, then the pod's, where envFrom is applied
   first (prefix + key) and env replaces it (kubernetes/kubernetes pkg/kubelet/kubelet_pods.go
   GenerateRunContainerOptions and makeEnvironmentVariables, commit 001a80e9).
3. containerd puts the image ENV first and the CRI envs after it (internal/cri/server/
   container_create.go @v2.1.4); the NVIDIA runtime reads the resulting list into a map, so the last
   value of a name wins (nvidia-container-toolkit internal/config/image/builder.go WithEnv @v1.20.0).
   containerd injects the CRI CDI devices itself (internal/cri/opts/spec_linux.go WithCDI).
4. The runtime: on a driver Install pool containerd's default is nvidia-container-runtime
   (Azure/AgentBaker containerd template, IsNSeriesSKU) and the node has no other NVIDIA handler; on a
   GPU Operator pool with CDI (v26.7.0's default) the default stays runc, and the operator's
   RuntimeClasses nvidia (cdi mode), nvidia-cdi and nvidia-legacy select the NVIDIA runtime
   (transformToolkitCtrForCDI; assets/pre-requisites/02*_runtime_class*.yaml).
5. The NVIDIA runtime selects devices (internal/config/image/cuda_image.go VisibleDevices @v1.20.0):
   volume mounts of the host's /dev/null under /var/run/nvidia-container-devices when
   accept-nvidia-visible-devices-as-volume-mounts; otherwise NVIDIA_VISIBLE_DEVICES (unset on a
   legacy image, CUDA_VERSION without NVIDIA_REQUIRE_CUDA: all), honoured for a container that is
   privileged in its sense (CAP_SYS_ADMIN in the bounding set, privileged.go) or when
   accept-nvidia-visible-devices-envvar-when-unprivileged (default true). "void", "" and "none"
   select no GPU (devices.go).
6. A privileged container sees every device node of the host.
7. The operator's NRI plugin (cdi.nriPluginEnabled) injects the CDI devices a pod annotation
   nvidia.cdi.k8s.io/container.<name>, /pod or the bare key names (nri/plugin.go, containerd/nri
   GetEffectiveAnnotation).

What the oracle does not model: CDI annotations reaching the runtime through containerd's
container_annotations (kubelet fills container annotations only from the device plugin), DRA, and
NVIDIA_IMEX_CHANNELS (channels, not GPUs).
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass, field
from typing import Any

ALL_CAPABILITIES = frozenset({"CAP_SYS_ADMIN", "CAP_NET_ADMIN", "CAP_SYS_PTRACE", "CAP_IPC_LOCK", "CAP_CHOWN"})
# containerd's default set (pkg/oci/spec.go populateDefaultUnixSpec): no CAP_SYS_ADMIN.
DEFAULT_CAPABILITIES = frozenset({"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FSETID", "CAP_FOWNER", "CAP_MKNOD",
                                  "CAP_NET_RAW", "CAP_SETGID", "CAP_SETUID", "CAP_SETFCAP", "CAP_SETPCAP",
                                  "CAP_NET_BIND_SERVICE", "CAP_SYS_CHROOT", "CAP_KILL", "CAP_AUDIT_WRITE"})
VOLUME_MOUNT_ROOT = "/var/run/nvidia-container-devices"


@dataclass(frozen=True)
class Node:
    """A GPU node as the runtime sees it."""

    kind: str
    """"install" (AKS installs the driver; NVIDIA runtime is containerd's default) or "operator"
    (GPU Operator with CDI: runc by default, NVIDIA runtime through its RuntimeClasses)."""
    gpus: tuple[str, ...] = ("GPU-0", "GPU-1", "GPU-2", "GPU-3", "GPU-4", "GPU-5", "GPU-6", "GPU-7")
    accept_envvar_unprivileged: bool = True
    accept_volume_mounts: bool = False
    nri_plugin: bool = False


@dataclass
class Outcome:
    allocated: set[str] = field(default_factory=set)
    visible: set[str] = field(default_factory=set)
    failed: bool = False
    """The container would not start (e.g. a runtime handler the node lacks)."""

    @property
    def excess(self) -> set[str]:
        return set() if self.failed else self.visible - self.allocated


def _gpu_request(container: dict[str, Any]) -> int:
    limits = (container.get("resources") or {}).get("limits") or {}
    return int(str(limits.get("nvidia.com/gpu", "0")))


def _pod_env(container: dict[str, Any], config_maps: dict[str, dict[str, str]]) -> dict[str, str]:
    """kubelet makeEnvironmentVariables: envFrom (prefix + key), then env replacing it."""
    env: dict[str, str] = {}
    for source in container.get("envFrom") or []:
        ref = source.get("configMapRef") or source.get("secretRef") or {}
        for key, value in config_maps.get(ref.get("name", ""), {}).items():
            env[(source.get("prefix") or "") + key] = value
    for variable in container.get("env") or []:
        if "value" in variable:
            env[variable["name"]] = variable["value"]
        else:
            source = variable.get("valueFrom") or {}
            ref = source.get("configMapKeyRef")
            if ref is not None:
                env[variable["name"]] = config_maps.get(ref["name"], {}).get(ref["key"], "")
            elif source.get("fieldRef", {}).get("fieldPath") in ("spec.nodeName", "metadata.name",
                                                                  "metadata.namespace", "status.podIP"):
                # A name or address: never a device selection the runtime understands.
                env[variable["name"]] = f"<{source['fieldRef']['fieldPath']}>"
            else:
                raise NotImplementedError(f"valueFrom {source}")
    return env


def _final_env(image_env: dict[str, str], plugin_env: dict[str, str], pod_env: dict[str, str]) -> dict[str, str]:
    """containerd: image ENV, then the CRI envs (the device plugin's, then the pod's); last one wins."""
    final: dict[str, str] = {}
    for source in (image_env, plugin_env, pod_env):
        final.update(source)
    return final


def _capabilities(container: dict[str, Any]) -> set[str]:
    context = container.get("securityContext") or {}
    if context.get("privileged"):
        return set(ALL_CAPABILITIES)
    added = (context.get("capabilities") or {}).get("add") or []
    caps = set(DEFAULT_CAPABILITIES)
    if "ALL" in added:  # containerd: exact "ALL" adds every capability
        caps |= ALL_CAPABILITIES
    caps |= {"CAP_" + name.upper() for name in added if name.upper() != "ALL"}
    return caps


def _select(value: str, node: Node) -> set[str]:
    devices = [part.strip() for part in value.split(",") if part.strip()]
    if not devices or "void" in devices or "none" in devices:
        return set()
    if "all" in devices:
        return set(node.gpus)
    chosen = set()
    for device in devices:
        if device.isdigit() and int(device) < len(node.gpus):
            chosen.add(node.gpus[int(device)])
        elif device in node.gpus:
            chosen.add(device)
    return chosen


def _mount_requests(pod: dict[str, Any], container: dict[str, Any]) -> list[str]:
    volumes = {volume["name"]: volume for volume in pod["spec"].get("volumes") or []}
    requests = []
    for mount in container.get("volumeMounts") or []:
        host = (volumes.get(mount["name"]) or {}).get("hostPath")
        if host is None:
            continue
        source = posixpath.normpath(posixpath.join(host["path"], mount.get("subPath", "")))
        destination = posixpath.normpath(mount["mountPath"])
        if source == "/dev/null" and destination.startswith(VOLUME_MOUNT_ROOT):
            device = destination[len(VOLUME_MOUNT_ROOT):].strip("/")
            if device:
                requests.append(device)
    return requests


def _nvidia_runtime_devices(pod: dict[str, Any], container: dict[str, Any], env: dict[str, str],
                            node: Node) -> set[str]:
    """cuda_image.go VisibleDevices (annotations aside)."""
    if node.accept_volume_mounts:
        from_mounts = _mount_requests(pod, container)
        if from_mounts:
            return _select(",".join(from_mounts), node)
    if "NVIDIA_VISIBLE_DEVICES" in env:
        value = env["NVIDIA_VISIBLE_DEVICES"]
    elif env.get("CUDA_VERSION") and not env.get("NVIDIA_REQUIRE_CUDA"):
        value = "all"  # a legacy image
    else:
        value = "void"
    privileged = "CAP_SYS_ADMIN" in _capabilities(container)
    if privileged or node.accept_envvar_unprivileged:
        return _select(value, node)
    return set()


def _nri_devices(pod: dict[str, Any], container: dict[str, Any], node: Node) -> set[str]:
    annotations = pod.get("metadata", {}).get("annotations") or {}
    key = "nvidia.cdi.k8s.io"
    for name in (f"{key}/container.{container['name']}", f"{key}/pod", key):
        if name in annotations:
            return {gpu for request in annotations[name].split(",")
                    for gpu in (node.gpus if request.endswith("=all") else
                                [g for g in node.gpus if request.endswith("=" + g)])}
    return set()


def visible_gpus(pod: dict[str, Any], container_name: str, node: Node, *, image_env: dict[str, str] | None = None,
                 config_maps: dict[str, dict[str, str]] | None = None) -> Outcome:
    """The GPUs the named container (of any of the pod's container lists) would use on `node`."""
    spec = pod["spec"]
    container = next(c for kind in ("containers", "initContainers", "ephemeralContainers")
                     for c in spec.get(kind) or [] if c["name"] == container_name)
    outcome = Outcome()
    requested = _gpu_request(container)
    outcome.allocated = set(node.gpus[:requested])
    runtime_class = spec.get("runtimeClassName")
    if node.kind == "install":
        if runtime_class in ("nvidia", "nvidia-cdi", "nvidia-legacy"):
            outcome.failed = True  # the AKS node's containerd has no such handler
            return outcome
        nvidia_runtime = True
        plugin_env = {"NVIDIA_VISIBLE_DEVICES": ",".join(outcome.allocated)} if requested else {}
    else:
        nvidia_runtime = runtime_class in ("nvidia", "nvidia-cdi", "nvidia-legacy")
        plugin_env = {}
        outcome.visible |= outcome.allocated  # CDI devices from the CRI, injected by containerd
    env = _final_env(image_env or {}, plugin_env, _pod_env(container, config_maps or {}))
    if nvidia_runtime:
        outcome.visible |= _nvidia_runtime_devices(pod, container, env, node)
    if (container.get("securityContext") or {}).get("privileged"):
        outcome.visible |= set(node.gpus)
    if node.kind == "operator" and node.nri_plugin:
        outcome.visible |= _nri_devices(pod, container, node)
    return outcome
