"""aksgpu's GPU node health check: the program that decides whether a GPU node may take work.

It runs in the GPU gate (GpuHealth) on every new GPU node and in the re-checks of idle ones, in
its own image (Dockerfile beside this file: a public PyTorch CUDA image plus nvidia-ml-py), and
needs only the standard library, PyTorch, nvidia-ml-py and PyYAML. `python -m
aksgpu.node.gpu_check --help` says how to run it.

- results.py: a check's result (verdict, measured value, threshold, reason), the node's verdict,
  straggler detection against the node's median GPU.
- thresholds.py (+ thresholds.yaml): the limits per GPU model and VM size, each with its source;
  the peaks come from aksgpu's VM catalog (catalog/vm_sizes.yaml).
- probe.py: what NVML says (inventory, ECC, row remapping, retired pages, throttling,
  temperature, PCIe) behind a small interface tests replace; xids.py reads this boot's Xid events
  (/dev/kmsg where readable, else the node's text logs under its mounted /var/log).
- measure.py: the measurements with PyTorch (BF16 GEMM, device-to-device bandwidth, a memory
  pattern test sized from the memory free as it allocates), all GPUs in parallel;
  interconnect.py: NCCL all-reduce bus bandwidth, peer access, InfiniBand ports.
- report.py: the JSON report (the gate's contract: failedCheck, reason, warnings) and, on request,
  a Prometheus text-format file for a textfile collector of the user's own (aksgpu collects none).
- run.py: the levels (--quick, standard, --full), the phase time limits (thresholds.yaml), the
  exit code (0 on a pass, warnings included) and, behind --apply-verdict, the gate's node
  actions (node_gate.py).
"""
