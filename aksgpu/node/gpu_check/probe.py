"""What NVML says about each GPU, behind a small interface (`Probe`) that tests replace, and the
inventory and error-state checks over it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from aksgpu.node.gpu_check.results import CheckResult
from aksgpu.node.gpu_check.thresholds import Limits, model_of

# NVML clock event ("throttle") reason bits (nvml.h, nvmlClocksEventReason*): which fail a GPU and
# which are only reported. Power cap and idle are normal; the hardware slowdowns are not.
THROTTLE_FAILS = {0x8: "HW slowdown", 0x40: "HW thermal slowdown", 0x80: "HW power brake slowdown"}
THROTTLE_WARNS = {0x20: "SW thermal slowdown", 0x100: "display clock setting"}


@dataclass
class GpuState:
    """One GPU as NVML reports it; None where NVML does not support the query on this GPU."""

    index: int
    name: str
    uuid: str
    memory_total_bytes: int
    volatile_uncorrected_ecc: int | None = None
    aggregate_uncorrected_ecc: int | None = None
    remapped_rows_pending: bool | None = None
    remapping_failed: bool | None = None
    retired_pages_pending: bool | None = None
    throttle_reasons: int | None = None
    temperature_c: int | None = None
    slowdown_temperature_c: int | None = None
    pcie_gen: int | None = None
    pcie_gen_max: int | None = None
    pcie_width: int | None = None
    pcie_width_max: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)


class Probe(Protocol):
    def driver_version(self) -> str | None: ...

    def gpus(self) -> list[GpuState]: ...


class NvmlProbe:
    """The real probe, through nvidia-ml-py (imported when used, so the checks load without it)."""

    def __init__(self) -> None:
        import pynvml

        self.nvml = pynvml
        pynvml.nvmlInit()

    def driver_version(self) -> str | None:
        version = self.nvml.nvmlSystemGetDriverVersion()
        return version.decode() if isinstance(version, bytes) else version

    def gpus(self) -> list[GpuState]:
        nvml = self.nvml
        states = []
        for index in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            name = nvml.nvmlDeviceGetName(handle)
            uuid = nvml.nvmlDeviceGetUUID(handle)
            state = GpuState(index, name.decode() if isinstance(name, bytes) else name,
                             uuid.decode() if isinstance(uuid, bytes) else uuid,
                             nvml.nvmlDeviceGetMemoryInfo(handle).total)
            state.volatile_uncorrected_ecc = self._try(nvml.nvmlDeviceGetTotalEccErrors, handle,
                                                       nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nvml.NVML_VOLATILE_ECC)
            state.aggregate_uncorrected_ecc = self._try(nvml.nvmlDeviceGetTotalEccErrors, handle,
                                                        nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                                                        nvml.NVML_AGGREGATE_ECC)
            remap = self._try(nvml.nvmlDeviceGetRemappedRows, handle)
            if remap is not None:  # (corrected rows, uncorrected rows, pending, failure occurred)
                state.remapped_rows_pending, state.remapping_failed = bool(remap[2]), bool(remap[3])
                state.extra["remappedRows"] = {"corrected": remap[0], "uncorrected": remap[1]}
            pending = self._try(nvml.nvmlDeviceGetRetiredPagesPendingStatus, handle)
            state.retired_pages_pending = None if pending is None else bool(pending)
            reasons = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or \
                nvml.nvmlDeviceGetCurrentClocksThrottleReasons
            state.throttle_reasons = self._try(reasons, handle)
            state.temperature_c = self._try(nvml.nvmlDeviceGetTemperature, handle, nvml.NVML_TEMPERATURE_GPU)
            state.slowdown_temperature_c = self._try(nvml.nvmlDeviceGetTemperatureThreshold, handle,
                                                     nvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN)
            state.pcie_gen = self._try(nvml.nvmlDeviceGetCurrPcieLinkGeneration, handle)
            state.pcie_gen_max = self._try(nvml.nvmlDeviceGetMaxPcieLinkGeneration, handle)
            state.pcie_width = self._try(nvml.nvmlDeviceGetCurrPcieLinkWidth, handle)
            state.pcie_width_max = self._try(nvml.nvmlDeviceGetMaxPcieLinkWidth, handle)
            states.append(state)
        return states

    def _try(self, function: Any, *args: Any) -> Any:
        try:
            return function(*args)
        except self.nvml.NVMLError:  # not supported on this GPU or in this VM: reported as unknown
            return None


def inventory_checks(states: list[GpuState], limits: Limits, driver: str | None,
                     expected_gpus: int | None, expected_model: str | None) -> list[CheckResult]:
    """The driver answers, the GPU count is what the VM size promises, each GPU is the expected model
    with its memory."""
    results = [CheckResult("driver", "pass" if driver else "fail",
                           f"driver {driver}" if driver else "NVML reports no driver version")]
    expected = expected_gpus if expected_gpus is not None else limits.expected_gpus
    promised = "expected (--expect-gpus)" if expected_gpus is not None else "the VM size has"
    if expected is None:
        results.append(CheckResult("gpu-count", "warn", f"{len(states)} GPUs; no expected count (the VM size is "
                                   "not in aksgpu's catalog and none was given)", value=len(states)))
    else:
        results.append(CheckResult("gpu-count", "pass" if len(states) == expected else "fail",
                                   f"{len(states)} GPUs, {promised} {expected}", value=len(states),
                                   threshold=expected))
    for state in states:
        model = model_of(state.name)
        if expected_model is not None and model != expected_model:
            results.append(CheckResult("gpu-model", "fail", f"{state.name} is not a {expected_model}", state.index))
        elif model is None:
            results.append(CheckResult("gpu-model", "warn", f"{state.name} is not in aksgpu's GPU table: only relative "
                                       "checks apply to it", state.index))
        else:
            results.append(CheckResult("gpu-model", "pass", f"{state.name} ({model})", state.index))
    return results


def error_checks(states: list[GpuState], limits: Limits) -> list[CheckResult]:
    """ECC, row remapping, retired pages, throttling, temperature and PCIe link of every GPU."""
    results: list[CheckResult] = []
    for s in states:
        gpu = s.index
        results.append(_zero("ecc-volatile-uncorrected", gpu, s.volatile_uncorrected_ecc,
                             "uncorrected ECC errors since the driver loaded"))
        if s.aggregate_uncorrected_ecc:
            results.append(CheckResult("ecc-aggregate-uncorrected", "warn", f"{s.aggregate_uncorrected_ecc} "
                                       "uncorrected ECC errors in the GPU's lifetime (remapped since)", gpu,
                                       s.aggregate_uncorrected_ecc))
        if s.remapping_failed:
            results.append(CheckResult("row-remap-failed", "fail",
                                       "a row remapping failed: the GPU needs service", gpu))
        elif s.remapped_rows_pending:
            results.append(CheckResult("row-remap-pending", "fail", "a row remapping is pending until the GPU is "
                                       "reset", gpu))
        elif s.remapping_failed is not None:
            results.append(CheckResult("row-remap", "pass", "no pending or failed row remapping", gpu))
        if s.retired_pages_pending:
            results.append(CheckResult("retired-pages-pending", "fail", "pages are pending retirement until the GPU "
                                       "is reset", gpu))
        results += _throttle(gpu, s.throttle_reasons)
        if s.temperature_c is not None and s.slowdown_temperature_c:
            limit = s.slowdown_temperature_c - limits.temperature_margin_c
            results.append(CheckResult("temperature", "pass" if s.temperature_c < limit else "fail",
                                       f"{s.temperature_c} C, slowdown at {s.slowdown_temperature_c} C", gpu,
                                       s.temperature_c, limit, "C"))
        if s.pcie_width is not None and s.pcie_width_max:
            results.append(CheckResult("pcie-width", "pass" if s.pcie_width >= s.pcie_width_max else "fail",
                                       f"PCIe x{s.pcie_width} of x{s.pcie_width_max}", gpu, s.pcie_width,
                                       s.pcie_width_max))
        if s.pcie_gen is not None and s.pcie_gen_max:
            # An idle GPU lowers its link generation to save power: below the maximum is reported,
            # not failed (the link width, which does not change at idle, is the hard check).
            results.append(CheckResult("pcie-gen", "pass" if s.pcie_gen >= s.pcie_gen_max else "warn",
                                       f"PCIe gen {s.pcie_gen} of {s.pcie_gen_max}", gpu, s.pcie_gen, s.pcie_gen_max))
    return results


def _zero(check: str, gpu: int, count: int | None, what: str) -> CheckResult:
    if count is None:
        return CheckResult(check, "skip", f"NVML does not report {what} on this GPU", gpu)
    return CheckResult(check, "pass" if count == 0 else "fail", f"{count} {what}", gpu, count, 0)


def _throttle(gpu: int, reasons: int | None) -> list[CheckResult]:
    if reasons is None:
        return [CheckResult("throttle", "skip", "NVML does not report clock event reasons on this GPU", gpu)]
    failing = [name for bit, name in THROTTLE_FAILS.items() if reasons & bit]
    if failing:
        return [CheckResult("throttle", "fail", "clocks held down: " + ", ".join(failing), gpu, reasons)]
    warning = [name for bit, name in THROTTLE_WARNS.items() if reasons & bit]
    if warning:
        return [CheckResult("throttle", "warn", "clocks held down: " + ", ".join(warning), gpu, reasons)]
    return [CheckResult("throttle", "pass", "no hardware slowdown", gpu, reasons)]
