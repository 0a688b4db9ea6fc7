"""The worker side of cluster measurement: the device each worker holds, the task functions, ``tensortune worker``.

Imported by Dask workers (the task functions are pickled by reference) and, once Dask is known to be
installed, by ``cluster.ClusterMeasurer``. See ``cluster.py`` for how the tasks are laid out.
"""
from __future__ import annotations

import asyncio
import dataclasses
import multiprocessing
import signal
import threading
from typing import Callable

from distributed import Worker, WorkerPlugin, get_worker

from ...target import Target
from .builder import BuildOptions, LocalBuilder
from .cluster_common import ClusterError, check_address, device_resource, unreachable
from .result import BuildResult, MeasureInput, MeasureResult
from .runner import LocalRunner, RunOptions


class DevicePlugin(WorkerPlugin):
    """A worker's measuring device: guarded build processes and one guarded runner, started on first use and
    reused across tasks and tuning runs, closed with the worker. Subclasses may replace ``build`` and ``run``
    (the scaling benchmark simulates a device that way)."""

    name = "tensortune-device"
    idempotent = True  # registering again (a second client) keeps the worker's plugin and its runner

    def setup(self, worker: Worker) -> None:
        if multiprocessing.current_process().daemon:
            raise ClusterError(f"worker {worker.address} is a daemonic process, which cannot start the guarded build "
                               "and measurement processes; start workers with 'tensortune worker', or set "
                               "DASK_DISTRIBUTED__WORKER__DAEMON=False for 'dask worker' or a LocalCluster")
        self._run_lock = threading.Lock()  # one measurement at a time, even where more of the resource is advertised
        self._runner: LocalRunner | None = None
        self._pool_lock = threading.Lock()
        self._idle: dict[BuildOptions, list[LocalBuilder]] = {}  # builders between two tasks
        self._builders: list[LocalBuilder] = []

    def teardown(self, worker: Worker) -> None:
        for builder in self._builders:
            builder.close()
        if self._runner is not None:
            self._runner.close()

    def build(self, inp: MeasureInput, options: BuildOptions) -> BuildResult:
        """Build one candidate in a guarded process (a builder per worker thread that builds at the same time)."""
        options = dataclasses.replace(options, n_parallel=1)
        with self._pool_lock:
            idle = self._idle.setdefault(options, [])
            builder = idle.pop() if idle else None
        if builder is None:
            builder = LocalBuilder(options)
            with self._pool_lock:
                self._builders.append(builder)
        try:
            return builder.build([inp])[0]
        finally:
            with self._pool_lock:
                self._idle[options].append(builder)

    def run(self, inp: MeasureInput, build: BuildResult, options: RunOptions) -> MeasureResult:
        """Check and time one built candidate in the worker's guarded runner process."""
        with self._run_lock:
            if self._runner is None or self._runner.options != options:
                if self._runner is not None:
                    self._runner.close()
                self._runner = LocalRunner(options)
            return self._runner.run([inp], [build])[0]


# ------------------------------------------------------------------------- tasks (they run on the workers)
# ``device`` names the worker's device plugin. The measure tasks return ``(result, build seconds)``; the
# result names the worker that measured it.

def build_task(inp: MeasureInput, *, device: str, options: BuildOptions) -> BuildResult:
    """Build a candidate for a target that is not ``-native`` (on any worker); its library travels as bytes."""
    return _device(device).build(inp, options)


def measure_task(inp: MeasureInput, build: BuildResult, *, device: str,
                 options: RunOptions) -> tuple[MeasureResult, float]:
    """Measure a candidate built elsewhere (on a worker holding the target's device resource)."""
    return _stamped(_device(device).run(inp, build, options), build.build_seconds)


def build_and_measure_task(inp: MeasureInput, *, device: str, build_options: BuildOptions,
                           run_options: RunOptions) -> tuple[MeasureResult, float]:
    """Build and measure a candidate of a ``-native`` target on the device itself."""
    dev = _device(device)
    build = dev.build(inp, build_options)
    return _stamped(dev.run(inp, build, run_options), build.build_seconds)


def _device(name: str) -> DevicePlugin:
    worker = get_worker()
    plugin = worker.plugins.get(name)
    if plugin is None:  # the plugin's setup failed on this worker (it raised to the client that registered it)
        raise ClusterError(f"worker {worker.address} has no '{name}' plugin; see its log for why setting it up failed")
    return plugin


def _stamped(result: MeasureResult, build_s: float) -> tuple[MeasureResult, float]:
    return dataclasses.replace(result, worker=get_worker().address), build_s


# ------------------------------------------------------------------------- tensortune worker

def run_worker(scheduler: str, target: Target, *, name: str | None = None, build_threads: int = 0,
               connect_timeout: float = 60.0, on_start: Callable[[Worker], None] | None = None) -> None:
    """Serve this machine as a measuring device of ``target`` to the scheduler at ``scheduler`` until the worker
    is closed (SIGTERM, SIGINT, or the scheduler closes it).

    The worker advertises one unit of ``device_resource(target)`` and has ``1 + build_threads`` threads: with
    none extra, a build (of a candidate for any target) and a measurement never run at once on this machine,
    so builds never disturb timings; extra threads build while it measures, which is faster but noisier.
    """
    if build_threads < 0:
        raise ValueError(f"build_threads must be >= 0, got {build_threads}")
    check_address(scheduler)

    async def serve() -> None:
        try:
            worker = await Worker(scheduler, nthreads=1 + build_threads, resources={device_resource(target): 1},
                                  name=name, death_timeout=connect_timeout)
        except (OSError, TimeoutError) as e:
            raise unreachable(scheduler, connect_timeout, e) from None
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGTERM, lambda: asyncio.ensure_future(worker.close()))
        if on_start is not None:
            on_start(worker)
        try:
            await worker.finished()
        finally:
            await worker.close()

    asyncio.run(serve())
