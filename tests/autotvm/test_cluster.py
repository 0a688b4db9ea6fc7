"""Measuring on a Dask cluster: routing by target, same records as on one worker, killed workers, clear errors.

The clusters are ``distributed.LocalCluster(processes=True)`` on this machine, plus ``tensortune worker``
processes; their workers import this checkout (``PYTHONPATH``). No assertion is on timings.
"""
from __future__ import annotations

import contextlib
import functools
import io
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from measure_templates import MODES, faulty_template
from tensortune import cli
from tensortune.autotvm.measure import BuildOptions, ErrorKind, MeasureInput, MeasureOptions, RunOptions
from tensortune.autotvm.measure import cluster as cluster_module
from tensortune.autotvm.measure.cluster import (ClusterError, ClusterMeasurer, ClusterOptions, NoMatchingWorkerError,
                                                device_resource)
from tensortune.autotvm.progress import PlainProgress, format_workers
from tensortune.autotvm.record import load_records
from tensortune.autotvm.task import Task
from tensortune.autotvm.templates.matmul import matmul_template
from tensortune.autotvm.tune import TuneError, tune
from tensortune.target import ISA, Target

ROOT = Path(__file__).parent.parent.parent
HOST = Target.host()
OTHER = Target(ISA.SCALAR, 1, HOST.arch)  # another target this machine can run: measured by another worker
MATMUL = Task(matmul_template, (16, 16, 16), HOST)
# One thread per kernel: two devices sharing this machine's cores must not oversubscribe them (OpenMP slows down a lot).
FAST = MeasureOptions(BuildOptions(n_parallel=1, timeout=60.0), RunOptions(number=2, repeat=2, timeout=60.0, num_threads=1))
PATIENT = ClusterOptions(no_worker_timeout=120.0)  # a loaded machine may take long to restart a worker


@pytest.fixture(scope="module")
def worker_env():
    """Workers (spawned by LocalCluster's nannies, or ``tensortune worker``) import this checkout and the tests'
    templates; they must not be daemonic, since they start the guarded build and run processes."""
    dask = pytest.importorskip("dask")
    pytest.importorskip("distributed")
    path = os.pathsep.join([str(ROOT), str(ROOT / "tests"), os.environ.get("PYTHONPATH", "")])
    with pytest.MonkeyPatch.context() as mp, dask.config.set({"distributed.worker.daemon": False}):
        mp.setenv("PYTHONPATH", path)
        yield


def local_cluster(n_workers: int, target: Target = HOST):
    from distributed import LocalCluster

    return LocalCluster(n_workers=n_workers, processes=True, threads_per_worker=1, dashboard_address=":0",
                        resources={device_resource(target): 1})


@pytest.fixture(scope="module")
def cluster(worker_env):
    """One worker measuring for this machine's target (tests scale it up)."""
    from distributed import Client

    with local_cluster(1) as lc, Client(lc, set_as_default=False) as client:
        yield lc, client


def indices_and_kinds(records) -> list[tuple[int, ErrorKind]]:
    return [(r.config_index, r.error_kind) for r in records]


# ----------------------------------------------------------------------------------------- without a cluster

def test_importing_tensortune_does_not_import_dask():
    code = ("import sys, tensortune, tensortune.cli, tensortune.autotvm.tune, tensortune.autotvm.measure;"
            "tensortune.cli.build_parser();"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('dask', 'distributed')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "[]"


def test_without_dask_the_cluster_is_a_one_line_error(monkeypatch, tmp_path, capsys):
    monkeypatch.setitem(sys.modules, "distributed", None)  # import distributed raises ImportError
    with pytest.raises(ClusterError, match=r'pip install "tensortune\[cluster\]"'):
        ClusterMeasurer("tcp://127.0.0.1:8786")
    argv = ["tune", "matmul", "--shape", "M=8", "N=8", "K=8", "--log", str(tmp_path / "log"), "--cluster",
            "tcp://127.0.0.1:8786"]
    for args in (argv, ["worker", "tcp://127.0.0.1:8786"]):
        assert cli.main(args) == cli.EXIT_USAGE
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("tensortune: error:") and "tensortune[cluster]" in err


def test_a_malformed_or_unreachable_scheduler_is_a_clear_error(worker_env, tmp_path, capsys):
    argv = ["tune", "matmul", "--shape", "M=8", "N=8", "K=8", "--log", str(tmp_path / "log"), "--cluster", "myhost"]
    for args in (argv, ["worker", "myhost"]):
        assert cli.main(args) == cli.EXIT_USAGE
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "malformed scheduler address 'myhost'" in err and "tcp://HOST:PORT" in err
    with pytest.raises(ClusterError, match="cannot reach the Dask scheduler at tcp://127.0.0.1:9 .*dask scheduler"):
        ClusterMeasurer("tcp://127.0.0.1:9", cluster_options=ClusterOptions(connect_timeout=1.0))


def test_device_resources_are_readable_and_differ_by_target():
    assert device_resource(Target.parse("c -isa=avx2 -cores=8 -arch=x86_64 -native")) == \
        "device:c:isa-avx2:cores-8:arch-x86_64:native"
    targets = [HOST, OTHER, Target(ISA.SCALAR, 2, HOST.arch), Target(ISA.SCALAR, 1, HOST.arch, native=True)]
    assert len({device_resource(t) for t in targets}) == len(targets)


def test_progress_names_the_workers_of_the_last_batch():
    assert format_workers([]) == ""
    assert format_workers(["tcp://10.0.0.6:1", "tcp://10.0.0.5:2"]) == " | 2 workers: 10.0.0.5:2, 10.0.0.6:1"
    assert format_workers([f"tcp://h:{i}" for i in range(5)]) == " | 5 workers: h:0, h:1, h:2 +2 more"
    stream = io.StringIO()
    PlainProgress("task", 8, stream=stream, clock=lambda: 0.0).update(4, 1.0, 2.0, workers=["tcp://10.0.0.5:2"])
    assert stream.getvalue().rstrip().endswith("| 1 worker: 10.0.0.5:2")


def test_tune_takes_measure_or_cluster_not_both():
    with pytest.raises(TuneError, match="not both"):
        tune(MATMUL, 4, tuner="random", measure=lambda inputs: [], cluster="tcp://127.0.0.1:8786", progress=False)


# ----------------------------------------------------------------------------------------- one cluster

@pytest.mark.slow
def test_two_workers_give_the_same_records_as_one_and_a_joining_worker_is_used(cluster, tmp_path):
    lc, client = cluster
    one, two = tmp_path / "one.json", tmp_path / "two.json"
    tune(MATMUL, 8, tuner="random", batch_size=4, seed=3, log_file=one, progress=False, cluster=client)
    assert len(lc.workers) == 1

    def add_a_worker(tuner, inputs, results):
        if len(lc.workers) == 1:
            lc.scale(2)
            client.wait_for_workers(2, timeout=120)

    # Joins after the first batch: batches 2-4 may use it. Same seed, same tuner: the same configs.
    with ClusterMeasurer(client, FAST, PATIENT) as measurer:
        tune(MATMUL, 16, tuner="random", batch_size=4, seed=3, log_file=two, progress=False,
             measure=measurer.measure, callbacks=[add_a_worker])
    first, second = load_records(one), load_records(two)
    assert indices_and_kinds(second[:8]) == indices_and_kinds(first)
    assert all(r.ok for r in second), [r.error_msg for r in second if not r.ok]
    assert len({r.config_index for r in second}) == 16
    assert len({r.worker for r in first}) == 1 and len({r.worker for r in second[:4]}) == 1
    assert len({r.worker for r in second[4:]}) == 2  # the new worker measured too
    assert sum(measurer.stats.workers.values()) == 16 and measurer.stats.n_measured == 16


def test_failed_candidates_are_results_and_the_worker_survives_a_crashing_build(cluster):
    _, client = cluster
    faulty = Task(faulty_template, (16,), HOST)
    inputs = [MeasureInput(faulty, MODES[m]) for m in ("invalid", "crash", "wrong_kernel", "ok")]
    with ClusterMeasurer(client, FAST, PATIENT) as measurer:
        before = set(client.scheduler_info(n_workers=-1)["workers"])
        results = measurer(inputs)
        after = set(client.scheduler_info(n_workers=-1)["workers"])
    assert [r.error_kind for r in results] == [ErrorKind.INVALID_CONFIG, ErrorKind.UNKNOWN, ErrorKind.WRONG_ANSWER,
                                               ErrorKind.NONE]
    assert "build worker died" in results[1].error_msg  # the template's os._exit killed a guarded build process
    assert before == after  # ... and no Dask worker


@pytest.mark.slow
def test_workers_of_two_targets_get_only_their_own_measurements(cluster, tmp_path):
    lc, client = cluster
    proc = subprocess.Popen([sys.executable, "-m", "tensortune", "worker", lc.scheduler_address, "--target",
                             str(OTHER), "--name", "other-target"], stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    try:
        with ClusterMeasurer(client, FAST, PATIENT) as measurer:
            other = _wait_for_device(measurer, OTHER, proc)
            mine = set(measurer.device_workers()[device_resource(HOST)])
            assert not mine & other
            tasks = [MATMUL, Task(matmul_template, (16, 16, 16), OTHER)]
            inputs = [MeasureInput(t, i) for i in range(4) for t in tasks]
            results = measurer(inputs)
        assert all(r.ok for r in results), [r.error_msg for r in results]
        for inp, res in zip(inputs, results):
            assert res.worker in (other if inp.task.target == OTHER else mine)
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert f"measures target '{OTHER}'" in err


def _wait_for_device(measurer: ClusterMeasurer, target: Target, proc: subprocess.Popen) -> set[str]:
    for _ in range(240):
        workers = measurer.device_workers().get(device_resource(target))
        if workers:
            return set(workers)
        assert proc.poll() is None, proc.communicate()[1]
        time.sleep(0.5)
    raise AssertionError("the tensortune worker did not join within 120 s")


def test_the_cli_tunes_on_the_cluster_and_logs_each_worker(cluster, tmp_path, capsys):
    lc, _ = cluster
    log = tmp_path / "log.json"
    argv = ["tune", "matmul", "--shape", "M=16", "N=16", "K=16", "--tuner", "random", "--trials", "4", "--log",
            str(log), "--cluster", lc.scheduler_address, "--quiet", "--json"]
    assert cli.main(argv) == cli.EXIT_OK
    summary = json.loads(capsys.readouterr().out)
    records = load_records(log)
    assert len(records) == 4 and all(r.worker.startswith("tcp://") for r in records)
    assert summary["workers"] == {w: sum(r.worker == w for r in records) for w in {r.worker for r in records}}


@pytest.mark.slow
def test_no_matching_worker_is_a_clear_error(cluster, tmp_path, capsys, monkeypatch):
    _, client = cluster
    lonely = Target(ISA.SCALAR, 3, HOST.arch)
    with ClusterMeasurer(client, FAST, ClusterOptions(no_worker_timeout=1.0)) as measurer:
        with pytest.raises(NoMatchingWorkerError, match=f"target '{lonely}'.*tensortune worker"):
            measurer([MeasureInput(Task(matmul_template, (16, 16, 16), lonely), 0)])
    # On the command line: one line, exit status 2 (the CLI's default wait shortened for the test).
    monkeypatch.setattr(cluster_module, "ClusterOptions", functools.partial(ClusterOptions, no_worker_timeout=1.0))
    with _scheduler_without_workers() as address:
        argv = ["tune", "matmul", "--shape", "M=16", "N=16", "K=16", "--trials", "4", "--log", str(tmp_path / "log"),
                "--cluster", address, "--quiet"]
        assert cli.main(argv) == cli.EXIT_USAGE
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no worker of the cluster measures target" in err


@contextlib.contextmanager
def _scheduler_without_workers():
    from distributed import LocalCluster

    with LocalCluster(n_workers=0, processes=False, dashboard_address=":0") as lc:
        yield lc.scheduler_address


# ----------------------------------------------------------------------------------------- killed workers

@pytest.mark.slow
@pytest.mark.parametrize("allowed_failures", [3, 0], ids=["retried-elsewhere", "no-retry-left"])
def test_a_worker_killed_mid_batch_loses_and_duplicates_nothing(worker_env, tmp_path, allowed_failures):
    """SIGKILL a worker while it measures: its candidates are measured by the other worker (Dask's default of 3
    worker deaths per task), or, with no retries allowed, are WORKER_LOST results; the run goes on, and the
    log has each config once."""
    import dask
    from distributed import Client

    # Each candidate is timed for >= 3 x 100 ms, so the victim is caught measuring.
    slow = MeasureOptions(BuildOptions(n_parallel=1, timeout=60.0),
                          RunOptions(number=1, repeat=3, min_repeat_ms=100.0, timeout=60.0, num_threads=1))
    log = tmp_path / "log.json"
    killed: list[tuple[str, str]] = []  # (worker address, key of the task it was running)
    with dask.config.set({"distributed.scheduler.allowed-failures": allowed_failures}), \
            local_cluster(2) as lc, Client(lc, set_as_default=False) as client:
        pids = client.run(os.getpid)
        victim = sorted(pids)[0]

        def kill_when_measuring() -> None:
            for _ in range(1200):
                running = client.run(_executing, workers=[victim]).get(victim, [])
                if running:
                    os.kill(pids[victim], signal.SIGKILL)
                    killed.append((victim, running[0]))
                    return
                time.sleep(0.1)

        killer = threading.Thread(target=kill_when_measuring, daemon=True)
        killer.start()
        with ClusterMeasurer(client, slow, PATIENT) as measurer:
            result = tune(MATMUL, 6, tuner="random", batch_size=6, seed=5, log_file=log, progress=False,
                          measure=measurer.measure)
        killer.join(timeout=60)
    assert killed, "the victim was never seen measuring"
    records = load_records(log)
    assert [r.config_index for r in records] == [t.config_index for t in result.history]
    assert len({r.config_index for r in records}) == 6  # nothing measured twice into the log
    [in_flight] = [r for r in records if r.config_index == int(killed[0][1].split("-")[-2])]
    if allowed_failures:  # nothing lost: what the victim was measuring was measured again by another worker
        assert all(r.ok for r in records), [r.error_msg for r in records if not r.ok]
        assert in_flight.worker != victim
    else:  # recorded as lost, with every other candidate the victim held; the rest were measured
        assert in_flight.error_kind is ErrorKind.WORKER_LOST and "died" in in_flight.error_msg
        assert {r.error_kind for r in records} == {ErrorKind.NONE, ErrorKind.WORKER_LOST}


def _executing(dask_worker) -> list[str]:
    return [str(ts.key) for ts in dask_worker.state.executing if "measure" in str(ts.key)]


def test_the_default_batch_keeps_every_device_busy():
    from tensortune.autotvm.tune import DEFAULT_BATCH_SIZE, default_batch_size

    class FakeCluster:
        def __init__(self, devices):
            self.devices = devices

        def suggested_batch_size(self, target):
            return 4 * self.devices

        def measure(self, inputs):
            return []

    from tensortune.autotvm.catalog import create_task

    task = create_task("matmul", {"M": 16, "N": 16, "K": 16})
    assert default_batch_size(lambda inputs: [], task) == DEFAULT_BATCH_SIZE  # one machine
    assert default_batch_size(FakeCluster(2).measure, task) == DEFAULT_BATCH_SIZE
    assert default_batch_size(FakeCluster(8).measure, task) == 32  # 4 per device
