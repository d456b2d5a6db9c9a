"""Run aksgpu's GPU health check for real on this machine's GPUs and print what it measured
(figures, not a test). On a machine without a GPU it says so and exits 2.

    python3 tests/benchmark_gpu_check.py [--out DIR] [--vm-size SIZE] [--expect-gpus N]

Prints: the quick level's time; the standard level's time, per-GPU GEMM TFLOPS and device copy
bandwidth against the catalog's peaks, the pattern test's coverage (with the GPU's free and total
memory), every failed or warned check; then a calibration sweep (GEMM at 4096, 8192 and 16384,
then after a 30 s burn), the standard level once more (still warm), and copies of 1, 2 and 4 GiB.
Writes the standard level's JSON report and Prometheus file to --out.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from aksgpu import catalog
from aksgpu.node.gpu_check import measure, probe, report, run, thresholds, xids


def main() -> int:
    cli = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    cli.add_argument("--out", default=".")
    cli.add_argument("--vm-size")
    cli.add_argument("--expect-gpus", type=int)
    args = cli.parse_args()
    started = time.monotonic()
    torch = measure.torch_module()
    if not torch.cuda.is_available():
        print("no CUDA GPU here: nothing to measure")
        return 2
    devices = measure.gpu_devices(torch)
    # On the machine itself: /dev/kmsg where readable, else its own /var/log.
    node = run.Node(probe.NvmlProbe(), torch, devices, xids.read_kernel_log(host_log_dir=Path("/var/log")),
                    vm_size=args.vm_size, expected_gpus=args.expect_gpus or len(devices))
    name = torch.cuda.get_device_name(0)
    model = thresholds.model_of(name)
    facts = catalog.gpu_model(model or "")
    print(f"GPUs: {len(devices)} x {name} (catalog model {model}); torch {torch.__version__}, "
          f"CUDA {torch.version.cuda}; driver {node.probe.driver_version()}")
    quick = run.check_node(node, "quick")
    print(f"quick level: {quick.duration_seconds:.2f} s, verdict {quick.verdict}")
    standard = run.check_node(node, "standard")
    print(f"standard level: {standard.duration_seconds:.2f} s, verdict {standard.verdict} ({standard.reason})")
    for check, unit, peak in (("gemm", "TFLOPS", facts.bf16_dense_tflops if facts else None),
                              ("memory-bandwidth", "TB/s", facts.memory_bandwidth_tbs if facts else None)):
        values = [r.value for r in standard.results if r.check == check and r.value is not None]
        if values:
            share = f", {statistics.median(values) / peak:.1%} of the {peak} {unit} peak" if peak else ""
            print(f"  {check}: " + ", ".join(f"{v:.1f}" if unit == "TFLOPS" else f"{v:.3f}" for v in values)
                  + f" {unit} per GPU{share}")
    for result in standard.results:
        if result.check == "memory-pattern":
            print(f"  memory-pattern GPU {result.gpu}: {result.reason}")
        elif result.verdict in ("fail", "warn"):
            print(f"  {result.verdict}: {result.check} GPU {result.gpu}: {result.reason}")
    out = Path(args.out)
    document = report.report_json(standard)
    report.write_atomically(out / "report.json", json.dumps(document, indent=2) + "\n")
    report.write_atomically(out / "aksgpu_gpu_check.prom", report.prometheus_text(standard))
    device = devices[0]
    print("calibration, GPU 0:")
    for n in (4096, 8192, 16384):
        print(f"  GEMM n={n}: {measure.gemm_tflops(torch, device, n, 30, 5):.1f} TFLOPS")
    print(f"  GEMM n=8192 after a 30 s burn: {measure.gemm_tflops(torch, device, 8192, 200, 20, 30.0):.1f} TFLOPS")
    again = run.check_node(node, "standard")
    gemm = next((r.value for r in again.results if r.check == "gemm" and r.value is not None), None)
    print(f"standard level again: {again.duration_seconds:.2f} s, GEMM {gemm} TFLOPS, verdict {again.verdict}")
    for gib in (1, 2, 4):
        print(f"  copy {gib} GiB: {measure.copy_bandwidth_tbs(torch, device, gib << 30, 20, 3):.3f} TB/s")
    print(f"total {time.monotonic() - started:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
