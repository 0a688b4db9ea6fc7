"""Measure on a Dask cluster: its machines are the device pool (what TVM's RPC tracker is to AutoTVM).

    dask scheduler                                       # one machine; prints tcp://HOST:8786
    tensortune worker tcp://HOST:8786                    # each measuring machine
    tensortune tune ... --cluster tcp://HOST:8786        # anywhere

A ``ClusterMeasurer`` is a ``measure(inputs) -> results`` callable like ``Measurer``; each candidate becomes
Dask tasks:

* a target without ``-native``: a build task that needs no resource (any worker runs it, where there are
  spare threads), whose ``BuildResult`` (the shared library's bytes, a ``Library``) Dask sends to a measure
  task that needs the target's device resource;
* a ``-native`` target: one task that builds and measures on the device. ``-march=native`` means "the CPU
  of the machine that compiles": built elsewhere, the kernel could use instructions the device lacks
  (SIGILL) or miss ones it has, and its timing would be of another kernel.

A device worker (``tensortune worker``) advertises one unit of ``device_resource(target)``, so it measures one
candidate at a time and timings never overlap on a device. On a worker, builds and measurements go
through the guarded processes of one machine (``LocalBuilder``, ``LocalRunner``), held by the worker's
``DevicePlugin`` and reused across tasks: a crashing kernel costs one candidate, not the worker.

Faults: Dask gives the tasks of a worker that dies to another worker with the resource, up to the
scheduler's ``distributed.scheduler.allowed-failures`` (default 3) deaths per task; after that the
candidate is a ``WORKER_LOST`` result. A task that raises (an error of the worker's machinery, not a
failed candidate, which is a result) is rerun ``ClusterOptions.retries`` times, then it is an ``UNKNOWN``
result. Each candidate's result comes back once, so nothing is logged twice. A worker that joins is used
from the next batch (its plugin comes from the scheduler). With no worker for a target for ``no_worker_timeout`` seconds,
``measure`` raises ``NoMatchingWorkerError`` instead of waiting forever.

Dask is an optional dependency (``pip install "tensortune[cluster]"``): it is imported when a
``ClusterMeasurer`` is made, never when tensortune is.
"""
from __future__ import annotations

import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Sequence

from ...target import Target
from .cluster_common import ClusterError, check_address, device_resource, unreachable
from .measure import MeasureOptions, MeasureStats
from .result import ErrorKind, MeasureInput, MeasureResult

if TYPE_CHECKING:
    from distributed import Client, Future

    from .cluster_worker import DevicePlugin

INSTALL_HINT = 'pip install "tensortune[cluster]"'
POLL_S = 2.0  # how often a waiting measure() checks that the cluster still has the devices it waits for


class NoMatchingWorkerError(ClusterError):
    """No worker of the cluster measures the target of a task (none was started for it, or all died)."""


def require_distributed() -> Any:
    """The ``distributed`` module, or a ``ClusterError`` that says how to install it."""
    try:
        import distributed
    except ImportError as e:
        raise ClusterError(f"measuring on a cluster needs Dask ({e}); install it with: {INSTALL_HINT}") from None
    return distributed


@dataclass(frozen=True)
class ClusterOptions:
    """``retries``: reruns of a task that raised; ``no_worker_timeout``: seconds to wait for a worker with the
    device a task needs before ``NoMatchingWorkerError``; ``connect_timeout``: seconds to reach the scheduler."""

    retries: int = 2
    no_worker_timeout: float = 30.0
    connect_timeout: float = 30.0

    def __post_init__(self) -> None:
        if self.retries < 0 or self.no_worker_timeout < 0 or self.connect_timeout <= 0:
            raise ValueError(f"ClusterOptions needs retries, no_worker_timeout >= 0 and connect_timeout > 0, got {self}")


@dataclass
class ClusterStats(MeasureStats):
    """``build_s`` and ``run_s`` summed over workers (they overlap); ``wall_s`` spent in ``measure``; candidates
    measured by each worker."""

    wall_s: float = 0.0
    workers: Counter = field(default_factory=Counter)

    @property
    def per_minute(self) -> float:
        """Candidates measured per minute of wall time."""
        return 60.0 * self.n_measured / self.wall_s if self.wall_s > 0 else 0.0


class ClusterMeasurer:
    """Builds and measures each batch on the workers of a Dask cluster (``close()`` disconnects).

    ``cluster``: the scheduler's address (``tcp://HOST:PORT``) or a ``distributed.Client`` (left open).
    ``device``: the worker-side plugin that builds and runs candidates (default: the real ``DevicePlugin``;
    the scaling benchmark passes a simulated one).
    """

    def __init__(self, cluster: str | Client, options: MeasureOptions | None = None,
                 cluster_options: ClusterOptions | None = None, device: DevicePlugin | None = None):
        distributed = require_distributed()
        from .cluster_worker import DevicePlugin

        self.options = options or MeasureOptions()
        self.cluster_options = cluster_options or ClusterOptions()
        self.device = device if device is not None else DevicePlugin()
        self.stats = ClusterStats()
        self._missing_since: float | None = None
        self._targets: dict[str, str] = {}  # device resource -> target string, for messages
        if isinstance(cluster, str):
            self.client, self._owns_client = _connect(distributed, cluster, self.cluster_options.connect_timeout), True
        elif isinstance(cluster, distributed.Client):
            self.client, self._owns_client = cluster, False
        else:
            raise ClusterError(f"cluster must be a scheduler address such as 'tcp://HOST:8786' or a "
                               f"distributed.Client, got {cluster!r}")
        try:
            # Idempotent: a worker that has the plugin keeps it (and its runner); workers that join later get it.
            self.client.register_plugin(self.device, name=self.device.name)
        except BaseException:
            self.close()
            raise

    def measure(self, inputs: Sequence[MeasureInput]) -> list[MeasureResult]:
        """One result per input, in order; failed candidates are results with an error kind."""
        start = time.perf_counter()
        resources = [device_resource(inp.task.target) for inp in inputs]
        new = {r: str(inp.task.target) for r, inp in zip(resources, inputs) if r not in self._targets}
        if new or self._missing_since is not None:  # later, a lost device shows while waiting for its tasks
            self._targets.update(new)
            self._await_devices(set(resources), pending=0)
        futures = self._submit(inputs, resources)
        try:
            self._wait(futures, resources)
            finished = [f for f in futures if f.status == "finished"]
            values = dict(zip((f.key for f in finished), self.client.gather(finished)))  # one round trip
            outcomes = [values[f.key] if f.key in values else self._failure(f) for f in futures]
        finally:
            pending = [f for f in futures if not f.done()]
            if pending:  # the wait was interrupted (Ctrl-C, no device left): leave nothing running
                self.client.cancel(pending)
        results = [res for res, _ in outcomes]
        for res, build_s in outcomes:
            self.stats.build_s += build_s
            self.stats.run_s += max(0.0, res.all_cost - build_s)
            if res.worker:
                self.stats.workers[res.worker] += 1
        self.stats.n_measured += len(inputs)
        self.stats.wall_s += time.perf_counter() - start
        return results

    __call__ = measure

    def suggested_batch_size(self, target: Target, per_device: int = 4) -> int:
        """Configs per batch that keep every device of ``target`` busy: ``per_device`` each (the tuning loop
        waits for a whole batch before it proposes the next)."""
        return per_device * max(1, len(self.device_workers().get(device_resource(target), [])))

    def device_workers(self) -> dict[str, list[str]]:
        """The addresses of the cluster's workers, by the device resource they advertise."""
        out: dict[str, list[str]] = {}
        for address, info in self.client.scheduler_info(n_workers=-1)["workers"].items():
            for name in info.get("resources", {}):
                if name.startswith("device:"):
                    out.setdefault(name, []).append(address)
        return out

    def close(self) -> None:
        if self._owns_client:
            self.client.close()

    def __enter__(self) -> ClusterMeasurer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ----------------------------------------------------------------------------------------- internals

    def _submit(self, inputs: Sequence[MeasureInput], resources: list[str]) -> list[Future]:
        """The task whose result is ``(result, build seconds)``, per input; one ``map`` (one message to the
        scheduler) per device and kind of build, since tasks sent one by one reach the workers one by one."""
        from . import cluster_worker as w

        groups: dict[tuple[str, bool], list[int]] = {}
        for i, (inp, res) in enumerate(zip(inputs, resources)):
            groups.setdefault((res, inp.task.target.native), []).append(i)
        futures: list[Future] = [None] * len(inputs)  # type: ignore[list-item]
        build, run, name = self.options.builder, self.options.runner, self.device.name
        common = dict(retries=self.cluster_options.retries, pure=False)
        for (resource, native), indices in groups.items():
            group = [inputs[i] for i in indices]
            tags = [f"{inp.config_index}-{uuid.uuid4().hex[:12]}" for inp in group]  # readable, unique task keys
            on_device = dict(resources={resource: 1}, **common)
            if native:  # built on the device itself: see the module docstring
                done = self.client.map(w.build_and_measure_task, group, key=_keys("build-and-measure", tags),
                                       device=name, build_options=build, run_options=run, **on_device)
            else:
                built = self.client.map(w.build_task, group, key=_keys("build", tags), device=name, options=build,
                                        **common)
                done = self.client.map(w.measure_task, group, built, key=_keys("measure", tags), device=name,
                                       options=run, **on_device)
            for i, fut in zip(indices, done):
                futures[i] = fut
        return futures

    def _wait(self, futures: list[Future], resources: list[str]) -> None:
        """Until every future is done; raises ``NoMatchingWorkerError`` if the devices they need are gone too long."""
        from distributed import wait

        while True:
            try:
                with self.client.as_current():  # wait() uses the current client, and ours need not be the default
                    wait(futures, timeout=POLL_S)
                return
            except TimeoutError:
                waiting = [res for f, res in zip(futures, resources) if not f.done()]
                self._await_devices(set(waiting), pending=len(waiting))

    def _await_devices(self, resources: set[str], pending: int) -> None:
        """Return at once if the cluster has a worker for each of ``resources``; else wait for one, up to
        ``no_worker_timeout`` seconds counted from when it was first found missing, then raise."""
        timeout = self.cluster_options.no_worker_timeout
        while True:
            have = self.device_workers()
            missing = sorted(r for r in resources if r not in have)
            if not missing:
                self._missing_since = None
                return
            now = time.monotonic()
            if self._missing_since is None:
                self._missing_since = now
            if now - self._missing_since >= timeout:
                self._missing_since = None
                raise NoMatchingWorkerError(_no_worker_message([self._targets[r] for r in missing], have, timeout,
                                                               pending))
            if pending:  # measure() is waiting on futures: go back to them, check again after the next poll
                return
            time.sleep(min(POLL_S, timeout))

    def _failure(self, fut: Future) -> tuple[MeasureResult, float]:
        """A task that did not finish, as a failed candidate (and 0 build seconds)."""
        from distributed import KilledWorker

        exc = fut.exception() if fut.status == "error" else None
        if isinstance(exc, KilledWorker):
            return MeasureResult((), ErrorKind.WORKER_LOST, f"the workers measuring it died too often ({exc})", 0.0), 0.0
        what = f"{type(exc).__name__}: {exc}" if exc is not None else f"the task ended as {fut.status!r}"
        return MeasureResult((), ErrorKind.UNKNOWN, f"cluster task failed after {self.cluster_options.retries} "
                                                    f"retries: {what}", 0.0), 0.0


def _keys(stage: str, tags: list[str]) -> list[str]:
    return [f"tensortune-{stage}-{tag}" for tag in tags]


def _connect(distributed: Any, address: str, timeout: float) -> Client:
    check_address(address)
    try:
        return distributed.Client(address, timeout=timeout, set_as_default=False)
    except (OSError, TimeoutError) as e:
        raise unreachable(address, timeout, e) from None


def _no_worker_message(missing: list[str], have: dict[str, list[str]], timeout: float, pending: int) -> str:
    devices = ", ".join(f"{r} ({len(a)} worker(s))" for r, a in sorted(have.items())) or "none"
    waiting = f" ({pending} candidate(s) were waiting)" if pending else ""
    return (f"no worker of the cluster measures target '{', '.join(missing)}' after {timeout:g} s{waiting}; its "
            f"devices: {devices}; start 'tensortune worker SCHEDULER_ADDRESS' on a machine of that target "
            f"(--target TARGET), or tune for a target the workers have")
