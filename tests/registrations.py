"""Run a project's real Pulumi program (no alias dropping, unlike `aksgpu plan`) under Pulumi's
mock runtime and record every RegisterResource request exactly as an engine would receive it.

    python tests/registrations.py STACK_FILE OUT.json [--no-alias-specs] [--eager] [--drop-aliases] [--gc-off]

The mock monitor reports alias-spec support, as every Pulumi CLI since 3.50 does, unless
--no-alias-specs (then the SDK sends alias URNs it computes itself). --eager sets
AKSGPU_EAGER_ALIAS_URNS=1 for the program (aksgpu/program/alias_urns.py off). --drop-aliases drops
every resource's aliases, as the offline plan does (the baseline of tests/benchmark_real_program.py;
its requests differ). The collector runs as in a real `pulumi preview` (whatever the program does
with it), unless --gc-off. OUT gets one entry per
request: its URN and the request's deterministic protobuf bytes (hex), plus the Python-side
wall time of the run. Used by tests/test_alias_urns.py and tests/benchmark_real_program.py.
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import runpy
import sys
import time
from pathlib import Path

from aksgpu.plan.planner import make_plan_mocks
from aksgpu.project.stackfile import resolve_stack


def record(stack: str, *, alias_specs: bool, drop_aliases: bool = False) -> tuple[list[dict[str, str]], float]:
    import pulumi
    from pulumi.runtime import mocks
    from pulumi.runtime import stack as runtime_stack
    from pulumi.runtime.proto import resource_pb2

    stack_file = resolve_stack(stack)
    requests: list[dict[str, str]] = []

    class RecordingMonitor(mocks.MockMonitor):
        def RegisterResource(self, request):  # noqa: N802 - gRPC method name
            requests.append({"urn": self.make_urn(request.parent, request.type, request.name),
                             "request": request.SerializeToString(deterministic=True).hex()})
            return super().RegisterResource(request)

        def GetDeploymentInfo(self, request):  # noqa: N802 - gRPC method name
            # The SDK reads the monitor's features from here (settings.monitor_supports_feature).
            info = super().GetDeploymentInfo(request)
            if not alias_specs:
                features = [f for f in info.supportedFeatures if f != resource_pb2.RESOURCE_MONITOR_FEATURE_ALIAS_SPECS]
                info = resource_pb2.DeploymentInfo(supportedFeatures=features)
            return info

    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    pulumi.runtime.set_all_config(stack_file.engine_config(), [])
    invokes: list[str] = []
    monitor = RecordingMonitor(make_plan_mocks(invokes)())  # the offline plan's answers
    mocks.set_mocks(monitor.mocks, project="gpu-clusters", stack=stack_file.stack, preview=True, monitor=monitor)
    if drop_aliases:
        from aksgpu.plan.offline_sdk import drop_aliases as aliases_dropped

        pulumi.runtime.register_stack_transformation(aliases_dropped)
    program = stack_file.project_dir / "__main__.py"

    async def run() -> None:
        runpy.run_path(str(program), run_name="__main__")

    start = time.perf_counter()
    loop.run_until_complete(runtime_stack.run_pulumi_func(run))
    return requests, time.perf_counter() - start


def main() -> None:
    stack, out = sys.argv[1], Path(sys.argv[2])
    if "--eager" in sys.argv:
        os.environ["AKSGPU_EAGER_ALIAS_URNS"] = "1"
    if "--gc-off" in sys.argv:
        gc.disable()
    requests, seconds = record(stack, alias_specs="--no-alias-specs" not in sys.argv,
                               drop_aliases="--drop-aliases" in sys.argv)
    out.write_text(json.dumps({"seconds": seconds, "requests": requests}), encoding="utf-8")
    sys.stdout.flush()
    os._exit(0)  # skip interpreter teardown: the figure is the program's, not Python's exit


if __name__ == "__main__":
    main()
