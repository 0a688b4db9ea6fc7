"""Whole networks end to end: ResNet-18 and MobileNetV2 (batch 1, 224x224, float32, random weights, built here with
``tensortune.network.zoo``), on 1 and 2 threads: tensortune with default schedules and with a tuning log,
onnxruntime, PyTorch eager and ``torch.compile`` (when installed), in one run with one protocol.

Every peer runs in a child process of its own (thread pools apart), checks its output against onnxruntime's,
warms up and calibrates its runs per timing (at least ``--min-ms`` each); then the peers are timed in turns,
``--repeat`` rounds of one timing each, and each one's median is reported. Also measured: tensortune's compile
time with an empty build cache and with a warm one, and the peak memory (RSS) of a process that loads a
compiled ResNet-18 and runs it, against one that runs it with onnxruntime.

    python benchmarks/e2e.py                        # prints the table (--markdown FILE: its "Whole networks" section)
    python benchmarks/e2e.py --log tuned.jsonl      # "tensortune, with the log" with that log
    python benchmarks/e2e.py --log tuned.jsonl --refine  # refine the log for each network first
    python benchmarks/e2e.py --tune                 # tune each network first (tune-model, default trials below)
    python benchmarks/e2e.py --tune resnet18=1000 mobilenet_v2=600 --tune-dir results/e2e_logs

``--tune`` runs ``tune_model`` on each network (2 threads, ``xgb`` with the shipped model) into
``--tune-dir/<model>.jsonl`` before the timings, resuming a log already there, and refines it as ``tune-model``
does (each layer's best configs timed inside the network; ``--refine`` does that to a ``--log``): the defaults
(``DEFAULT_TRIALS``) take about an hour on 2 cores of an AVX2 machine, the tuning minutes are reported. Where the
log holds such in-network timings, the row "kernels chosen by their timings alone" compiles with the log without
them: what refining gained.
    python benchmarks/e2e.py --json e2e.json --models resnet18 --threads 2

``--target`` compiles (and tunes, refines) tensortune's networks for another target of this machine, e.g. its AVX2
code on an AVX-512 host, ``--target "c -isa=avx2 -cores=2 -arch=x86_64"``: the peers then run capped to that ISA,
PyTorch by its settings (``benchmarking.peers.ISA_CAPS``) and both it and onnxruntime, which has no such setting, by
CPUID capped to the ISA (``benchmarking.cpuid_cap``) where this machine can; where it cannot, onnxruntime runs its
widest code (the report says which).
    python benchmarks/e2e.py --target "c -isa=avx2 -cores=2 -arch=x86_64" --log avx2.jsonl --threads 2
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from common import positive_int, save_zoo_model

from tensortune.benchmarking.cpuid_cap import ENV_VAR as CPUID_VAR

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
MODELS = ("resnet18", "mobilenet_v2")
#: trials per network of ``--tune`` without values (about an hour on 2 cores, both networks)
DEFAULT_TRIALS = {"resnet18": 1500, "mobilenet_v2": 1000}
PEERS = ("tensortune", "tensortune_tuned", "tensortune_tuned_alone", "onnxruntime", "torch", "torch_compile",
         "tensortune_passive", "onnxruntime_no_spin")
LABELS = {"tensortune": "tensortune, default schedules", "tensortune_tuned": "tensortune, with the log",
          "tensortune_tuned_alone": "tensortune, with the log, kernels chosen by their timings alone",
          "onnxruntime": "onnxruntime", "torch": "PyTorch eager", "torch_compile": "torch.compile",
          "tensortune_passive": "tensortune, default schedules, OMP_WAIT_POLICY=PASSIVE",
          "onnxruntime_no_spin": "onnxruntime, intra-op spinning off"}
#: extra environment of a peer's child process (idle threads that sleep instead of spinning: on a busy machine a
#: spinning thread takes the core its partner needs)
PEER_ENV = {"tensortune_passive": {"OMP_WAIT_POLICY": "PASSIVE"}}
#: the peers that ``--target``'s ISA caps reach (``isa_caps``): onnxruntime through the CPUID cap alone
CAPPED_PEERS = ("onnxruntime", "onnxruntime_no_spin", "torch", "torch_compile")
SECTION = "## Whole networks"


# ------------------------------------------------------------------------------------------- child processes

def peak_rss_mib() -> float:
    """This process's peak resident memory (VmHWM: unlike ru_maxrss it is not inherited across exec from the
    parent that spawned the child)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _child(spec: dict) -> dict:
    """Serve timings of one peer on one network (in a child process): after loading, checking and calibrating it,
    print one JSON line, then for each line read on stdin, time one repeat and print its seconds per run. Returns
    the result to print last: at the end of stdin the process's peak RSS, or instead of the timings an error or
    the peer's absence when the peer cannot be timed.

    Peers: tensortune (``spec["network"]``), onnxruntime and OpenVINO (``spec["model"]``), PyTorch eager and
    ``torch.compile``: the model's graph run by ``torch_graph.GraphModule``, or with ``spec["zoo"]`` the real
    PyTorch module of that ``tests/model_zoo.py`` network (what was exported; ``spec["small"]``: its test size)."""
    from tensortune.benchmarking.cpuid_cap import cap_from_environment
    from tensortune.runtime.timer import time_repeats

    capped = cap_from_environment()  # --target's CPUID cap (set for the capped peers), before a peer reads CPUID
    threads = spec["threads"]
    x = np.load(spec["input"])
    feeds = dict(x) if isinstance(x, np.lib.npyio.NpzFile) else None  # several named inputs (an .npz)
    expected = np.load(spec["expected"]) if spec.get("expected") else None
    peer = spec["peer"]
    if peer.startswith("tensortune"):
        import tensortune as tt

        module = tt.load(spec["network"], num_threads=threads)
        first = module.outputs[0].name
        run = (lambda: module(x)) if feeds is None else (lambda: module.run(feeds)[first])  # noqa: E731
    elif peer.startswith("onnxruntime"):
        import onnxruntime as ort

        opts = ort.SessionOptions()
        opts.intra_op_num_threads = threads
        opts.inter_op_num_threads = 1
        if peer == "onnxruntime_no_spin":
            opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
        sess = ort.InferenceSession(spec["model"], opts, providers=["CPUExecutionProvider"])
        feeds = feeds if feeds is not None else {sess.get_inputs()[0].name: x}
        run = lambda: sess.run(None, feeds)[0]  # noqa: E731
    elif peer == "openvino":
        try:
            import openvino as ov
            import openvino.properties as props
            import openvino.properties.hint as hints
        except ImportError:
            return {"unavailable": "openvino is not installed"}
        compiled = ov.Core().compile_model(spec["model"], "CPU", {
            hints.inference_precision: ov.Type.f32,  # not the bf16 or f16 it would pick where the CPU has them
            props.inference_num_threads: threads, hints.performance_mode: hints.PerformanceMode.LATENCY})
        request = compiled.create_infer_request()
        feeds = feeds if feeds is not None else {compiled.inputs[0].get_any_name(): x}
        run = lambda: request.infer(feeds)[0]
    else:
        try:
            import torch
        except ImportError:
            return {"unavailable": "torch is not installed"}
        torch.set_num_threads(threads)
        if spec.get("zoo"):
            sys.path.insert(0, str(ROOT / "tests"))
            from model_zoo import ZOO

            zoo = ZOO[spec["zoo"]]
            net, args = zoo.build(spec.get("small", False))  # seeded: the module and inputs that were exported
            if feeds is None or set(feeds) != set(zoo.input_names) or not all(
                    np.array_equal(t.numpy(), feeds[n]) for n, t in zip(zoo.input_names, args)):
                return {"error": f"the inputs of the zoo's {spec['zoo']} are not the feeds of {spec['input']}"}
        else:
            sys.path.insert(0, str(HERE))
            from torch_graph import GraphModule

            from tensortune.frontend import import_onnx
            from tensortune.passes import eliminate_dead_nodes, fold_constants, remove_identities

            g = eliminate_dead_nodes(remove_identities(fold_constants(import_onnx(spec["model"]))))
            net, args = GraphModule(g).eval(), (torch.from_numpy(x),)
        if peer == "torch_compile":
            try:
                net = torch.compile(net)
            except Exception as e:  # noqa: BLE001 - a peer that cannot compile is reported, not fatal
                return {"unavailable": f"torch.compile failed: {type(e).__name__}: {e}"}

        def run():
            with torch.inference_mode():
                out = net(*args)
            return (out[0] if isinstance(out, (tuple, list)) else out).numpy()  # the first output

    try:
        got = run()
    except Exception as e:  # noqa: BLE001 - reported in the table
        if peer == "torch_compile":  # it compiles at the first call
            return {"unavailable": f"torch.compile failed: {type(e).__name__}: {e}"}
        return {"error": f"{type(e).__name__}: {e}"}
    if expected is not None:
        scale = max(1.0, float(np.abs(expected).max()))
        # spec["tolerance"]: the largest error allowed, relative to the largest expected magnitude
        rtol, atol = (0.0, spec["tolerance"] * scale) if spec.get("tolerance") else (1e-4, 1e-5 * scale)
        if not np.allclose(got, expected, rtol=rtol, atol=atol):
            return {"error": f"output differs from onnxruntime's by {float(np.abs(got - expected).max()):.3g}"}

    def timed(count: int) -> float:
        t0 = time.perf_counter()
        for _ in range(count):
            run()
        return time.perf_counter() - t0

    # the protocol of time_repeats: a warm-up, then runs per timing raised until one lasts at least min_ms
    per_run = time_repeats(timed, 1, 1, spec["min_ms"])[0]
    count = max(1, int(np.ceil(spec["min_ms"] / 1e3 / per_run)))
    print(json.dumps({"ready": True, "runs_per_timing": count, "cpuid_isa": capped and capped.value}), flush=True)
    for _ in sys.stdin:
        print(json.dumps(timed(count) / count), flush=True)
    return {"peak_rss_mib": peak_rss_mib()}


def _spawn(spec: dict, env: dict | None = None) -> dict:
    env = dict(os.environ if env is None else env)
    env["OMP_NUM_THREADS"] = str(spec.get("threads", 1))
    env["PYTHONPATH"] = f"{ROOT}{os.pathsep}{env.get('PYTHONPATH', '')}"
    proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--child", json.dumps(spec)],
                          capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return {"error": f"child failed (exit {proc.returncode}): {tail}"}
    return json.loads(proc.stdout.strip().splitlines()[-1])


class _Peer:
    """A peer's timing child: ``next()`` is the seconds per run of one more timing."""

    def __init__(self, spec: dict, env: dict):
        env = dict(env, OMP_NUM_THREADS=str(spec["threads"]),
                   PYTHONPATH=f"{ROOT}{os.pathsep}{env.get('PYTHONPATH', '')}")
        self.proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--child", json.dumps(spec)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     env=env)
        line = self.proc.stdout.readline()
        self.status = json.loads(line) if line else {"error": self._failure()}
        self.ok = bool(self.status.get("ready"))

    def _failure(self) -> str:
        self.proc.wait()
        tail = (self.proc.stderr.read().strip().splitlines() or ["no output"])[-1]
        return f"child failed (exit {self.proc.returncode}): {tail}"

    def next(self) -> float:
        self.proc.stdin.write("time\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(self._failure())
        return float(json.loads(line))

    def close(self) -> float | None:
        """End the child; its peak RSS in MiB, as a child that served its timings reports it last."""
        if self.proc.stdin:
            self.proc.stdin.close()
        last = self.proc.stdout.read().strip().splitlines()[-1:] if self.ok else []
        self.proc.wait()
        return json.loads(last[0]).get("peak_rss_mib") if last else None


def time_interleaved(specs: dict[str, dict], repeat: int, processes: int = 1,
                     caps: dict[str, str] | None = None) -> dict[str, dict]:
    """Each peer's median of ``repeat`` timings, taken in turns (one timing of each peer per round), so that the
    load of a shared machine changes under all peers alike. With ``processes`` > 1 this is done again in fresh
    child processes (started in a rotated order) and a peer's figure is the median of its processes' medians: a
    process's memory placement can bias all of its timings (4-10% between processes timing one network here).
    Also each peer's ``peak_rss_mib``: the largest peak RSS of its processes (loading, checking, timing).
    ``caps``: environment of the capped peers' processes (``isa_caps``)."""
    if processes < 1 or repeat < 1:
        raise ValueError(f"need at least one set of processes and one round; got processes={processes}, "
                         f"repeat={repeat}")
    runs: dict[str, list[list[float]]] = {name: [] for name in specs}
    rss: dict[str, float] = {}  # each peer's largest peak RSS of its processes
    status: dict[str, dict] = {}
    cpuid: dict[str, str | None] = {}
    for k in range(processes):
        names = list(specs)
        names = names[k % len(names):] + names[:k % len(names)]
        peers = {name: _Peer(specs[name], dict(os.environ, **PEER_ENV.get(name, {}),
                                               **((caps or {}) if name in CAPPED_PEERS else {})))
                 for name in names}
        live = [name for name in specs if peers[name].ok]
        try:
            for name in live:
                runs[name].append([])
            for _ in range(repeat):
                for name in live:
                    time.sleep(0.05)  # the previous peer's threads stop spinning
                    runs[name][-1].append(peers[name].next())
        finally:
            for name, p in peers.items():
                peak = p.close()
                if peak is not None:
                    rss[name] = max(peak, rss.get(name, 0.0))
        status.update({name: p.status for name, p in peers.items() if not p.ok and name not in status})
        cpuid.update({name: p.status.get("cpuid_isa") for name, p in peers.items() if p.ok})
    out: dict[str, dict] = {}
    for name in specs:
        if not runs[name]:
            out[name] = status[name]
            continue
        medians = [float(np.median(r)) for r in runs[name]]
        out[name] = {"median_s": float(np.median(medians)), "runs_s": [t for r in runs[name] for t in r]}
        if name in rss:
            out[name]["peak_rss_mib"] = rss[name]
        if cpuid.get(name):  # the ISA the peer's processes capped CPUID to, as they reported it
            out[name]["cpuid_isa"] = cpuid[name]
        if processes > 1:
            out[name]["process_medians_s"] = medians
    return out


def _compile_child(spec: dict) -> dict:
    """Compile a model (in a child, with the cache directory of the spec) and export it; returns the seconds."""
    import tensortune as tt

    start = time.perf_counter()
    module = tt.compile(spec["model"], target=spec.get("target"), log=spec.get("log"))
    seconds = time.perf_counter() - start
    module.export(spec["network"])
    tuned = sum(len(k.nodes) for k in module.manifest.kernels if k.template)
    return {"compile_s": seconds, "calls": module.manifest.calls, "tuned_calls": tuned}


def compile_network(model: Path, network: Path, cache: Path, log: str | None = None,
                    target: str | None = None) -> dict:
    env = dict(os.environ, TENSORTUNE_CACHE_DIR=str(cache))
    return _spawn({"compile": True, "model": str(model), "network": str(network), "log": log, "target": target},
                  env)


def _rss_child(spec: dict) -> dict:
    """Peak RSS of a process that only loads and runs the network (tensortune) or the model (onnxruntime)."""
    x = np.load(spec["input"])
    if spec["peer"] == "tensortune":
        import tensortune as tt

        module = tt.load(spec["network"], num_threads=spec["threads"])
        for _ in range(5):
            module(x)
    else:
        import onnxruntime as ort

        opts = ort.SessionOptions()
        opts.intra_op_num_threads = spec["threads"]
        sess = ort.InferenceSession(spec["model"], opts, providers=["CPUExecutionProvider"])
        for _ in range(5):
            sess.run(None, {sess.get_inputs()[0].name: x})
    return {"peak_rss_mib": peak_rss_mib()}


# ------------------------------------------------------------------------------------------- the run

def isa_caps(target: str | None) -> dict[str, str]:
    """The environment that caps the peers to ``target``'s ISA when it is narrower than this machine's: PyTorch's
    settings (its oneDNN and MKL too) and, where this machine can, the CPUID cap; {} for this machine's own target."""
    if target is None:
        return {}
    from tensortune.benchmarking.peers import peer_environment
    from tensortune.build import resolve_target

    return peer_environment(resolve_target(target), 1)[1]


def machine() -> str:
    try:
        cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                    if line.startswith("model name")), platform.processor())
    except OSError:
        cpu = platform.processor()
    from tensortune import Target

    host = Target.host()
    return f"{cpu}, {host.isa.value}, {os.cpu_count()} logical CPUs, load average {os.getloadavg()[0]:.1f}"


def tune(model: Path, trials: int, log: Path, target: str | None = None) -> dict:
    """Tune ``model`` up to ``trials`` trials in ``log`` (resumed), in this process; the tuning minutes."""
    from tensortune.build import resolve_target
    from tensortune.network.tuning import tune_model

    log.parent.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    result = tune_model(str(model), trials, log, target=resolve_target(target), tuner="xgb")
    minutes = (time.perf_counter() - start) / 60
    refined = refine_log(model, log, target)
    return {"log": str(log), "trials": trials, "minutes": minutes, "estimated_s": result.estimated_latency,
            "refine_minutes": refined["minutes"]}


def refine_log(model: Path, log: Path | str, target: str | None = None, quiet: bool = False) -> dict:
    """Time each layer's best configs of ``log`` inside the network (skipped when done since the last trial)."""
    from tensortune.build import resolve_target
    from tensortune.network import refine

    start = time.perf_counter()
    result = refine(str(model), log, target=resolve_target(target), force=False,
                    progress=None if quiet else lambda line: print(line, flush=True))
    return {"minutes": (time.perf_counter() - start) / 60, "whole_network_s": result.check}


def alone_log(log: str, path: Path) -> str | None:
    """A copy of ``log`` without its in-network timings (None when it has none)."""
    lines = Path(log).read_text().splitlines(keepends=True)
    kept = [line for line in lines if '"network":' not in line]
    if len(kept) == len(lines):
        return None
    path.write_text("".join(kept))
    return str(path)


def run(models, thread_counts, log, repeat, min_ms, work: Path, tune_trials: dict | None = None,
        tune_dir: Path | None = None, refine: bool = False, processes: int = 1, target: str | None = None) -> dict:
    caps = isa_caps(target)
    report = {"machine": machine(), "repeat": repeat, "processes": processes, "min_repeat_ms": min_ms, "log": log,
              "target": target, "peer_caps": caps, "models": {}}
    for name in models:
        model = save_zoo_model(work, name)
        tuning = None
        if tune_trials and name in tune_trials:
            tuning = tune(model, tune_trials[name], tune_dir / f"{name}.jsonl", target)
            print(f"{name}: tuned {tuning['trials']} trials in {tuning['minutes']:.1f} min, log {tuning['log']}",
                  flush=True)
        net_log = tuning["log"] if tuning else log
        if refine and net_log and not tuning:
            print(f"{name}: refined in {refine_log(model, net_log, target)['minutes']:.1f} min", flush=True)
        x = np.random.default_rng(0).uniform(-1, 1, (1, 3, 224, 224)).astype(np.float32)
        np.save(work / "input.npy", x)
        import onnxruntime as ort

        expected = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"]).run(None, {"input": x})[0]
        np.save(work / f"{name}_expected.npy", expected)
        cold_cache = work / f"cache-{name}"
        cold = compile_network(model, work / f"{name}.tt", cold_cache, target=target)
        warm = compile_network(model, work / f"{name}.tt", cold_cache, target=target)
        entry = {"compile_cold_s": cold.get("compile_s"), "compile_warm_s": warm.get("compile_s"),
                 "calls": cold.get("calls"), "threads": {}, "log": net_log, "tuning": tuning}
        alone = None
        if net_log:
            tuned = compile_network(model, work / f"{name}-tuned.tt", cold_cache, net_log, target)
            entry["tuned_calls"] = tuned.get("tuned_calls")
            alone = alone_log(net_log, work / f"{name}-alone.jsonl")
            if alone:
                compile_network(model, work / f"{name}-tuned-alone.tt", cold_cache, alone, target)
        for threads in thread_counts:
            specs, row = {}, {}
            for peer in PEERS:
                if peer == "tensortune_tuned" and not net_log:
                    row[peer] = {"unavailable": "no --log or --tune given"}
                    continue
                if peer == "tensortune_tuned_alone" and not alone:
                    row[peer] = {"unavailable": "the log has no timings inside the network"}
                    continue
                network = work / {"tensortune_tuned": f"{name}-tuned.tt",
                                  "tensortune_tuned_alone": f"{name}-tuned-alone.tt"}.get(peer, f"{name}.tt")
                specs[peer] = {"peer": peer, "threads": threads, "model": str(model), "network": str(network),
                               "input": str(work / "input.npy"), "expected": str(work / f"{name}_expected.npy"),
                               "min_ms": min_ms}
            row.update(time_interleaved(specs, repeat, processes, caps))
            for peer in PEERS:
                print(f"{name} {threads} thread(s) {LABELS[peer]}: {_fmt(row[peer])}", flush=True)
            entry["threads"][str(threads)] = {peer: row[peer] for peer in PEERS}
        if name == "resnet18":
            rss = {p: _spawn({"rss": True, "peer": p, "threads": max(thread_counts), "model": str(model),
                              "network": str(work / f"{name}.tt"), "input": str(work / "input.npy")})
                   for p in ("tensortune", "onnxruntime")}
            entry["peak_rss_mib"] = {p: r.get("peak_rss_mib") for p, r in rss.items()}
        report["models"][name] = entry
    return report


def _fmt(r: dict) -> str:
    if "median_s" in r:
        return f"{r['median_s'] * 1e3:.2f} ms"
    return r.get("unavailable") or r.get("error", "?")


def table(report: dict) -> str:
    lines = [SECTION, "",
             f"`python benchmarks/e2e.py` on {report['machine']}: batch 1, 224x224, float32, random weights; "
             f"median of {report['repeat']} timings of >= {report['min_repeat_ms']:g} ms after a warm-up"
             + (f" in each of {report['processes']} sets of fresh processes (the median of their medians)"
                if report.get("processes", 1) > 1 else "") + ", each peer in "
             "a child process of its own, the peers timed in turns (one timing of each per round, so that the "
             "machine's load falls on all alike), every output checked against onnxruntime's first. Ratios are "
             "against onnxruntime in the same run.", ""]
    if report.get("target"):
        caps = report.get("peer_caps") or {}
        settings = ", ".join(f"`{k}={v}`" for k, v in caps.items() if k != CPUID_VAR)
        lines[-1:-1] = ["", f"tensortune's networks compiled for `{report['target']}`; "
                        + ("the peers not capped (the target's ISA is this machine's)." if not caps else
                           f"PyTorch and onnxruntime capped to it: CPUID answers as on a `{caps[CPUID_VAR]}` machine "
                           f"(`{CPUID_VAR}`, `benchmarking.cpuid_cap`), and PyTorch's settings {settings}."
                           if CPUID_VAR in caps else
                           f"PyTorch capped to it ({settings}); onnxruntime cannot be capped on this machine (no "
                           "CPUID faulting) and runs its widest code.")]
    for name, entry in report["models"].items():
        tuning = entry.get("tuning")
        tuned = (f"; the log: {tuning['trials']} trials of `tune-model`, {tuning['minutes']:.1f} min" if tuning else
                 f"; the log: `{Path(entry['log']).name}`" if entry.get("log") else "")
        lines.append(f"**{name}** ({entry['calls']} kernel calls per run; compile {entry['compile_cold_s']:.1f} s "
                     f"with an empty build cache, {entry['compile_warm_s']:.2f} s with a warm one{tuned})")
        lines.append("")
        threads = list(entry["threads"])
        lines.append("| peer | " + " | ".join(f"{t} thread{'s' if t != '1' else ''}" for t in threads) + " |")
        lines.append("| --- |" + " --- |" * len(threads))
        for peer in PEERS:
            cells = []
            for t in threads:
                r = entry["threads"][t].get(peer, {"unavailable": "not measured"})  # a report of fewer peers
                ort_r = entry["threads"][t]["onnxruntime"]
                if "median_s" in r and "median_s" in ort_r:
                    cells.append(f"{r['median_s'] * 1e3:.2f} ms ({r['median_s'] / ort_r['median_s']:.2f}x)")
                else:
                    cells.append(_fmt(r))
            lines.append(f"| {LABELS[peer]} | " + " | ".join(cells) + " |")
        if "peak_rss_mib" in entry:
            rss = entry["peak_rss_mib"]
            if all(isinstance(v, float) for v in rss.values()):
                lines.append("")
                lines.append(f"Peak RSS of a process that loads the compiled network and runs it: tensortune "
                             f"{rss['tensortune']:.0f} MiB, onnxruntime {rss['onnxruntime']:.0f} MiB "
                             f"({rss['tensortune'] / rss['onnxruntime']:.2f}x).")
        lines.append("")
    return "\n".join(lines)


def write_section(path: Path, text: str, section: str = SECTION) -> None:
    """Replace the ``section`` ("Whole networks") of BENCHMARKS.md (or append it)."""
    old = path.read_text() if path.exists() else ""
    pattern = re.compile(rf"^{re.escape(section)}\n.*?(?=^## |\Z)", re.S | re.M)
    new = pattern.sub(text.rstrip() + "\n\n", old) if pattern.search(old) else old.rstrip() + "\n\n" + text
    path.write_text(new.rstrip() + "\n")


def parse_tune(values: list[str], models: list[str], parser: argparse.ArgumentParser) -> dict[str, int]:
    """``--tune`` values (``MODEL=TRIALS``) as trials per model; none: every model at its default."""
    if not values:
        return {m: DEFAULT_TRIALS[m] for m in models}
    out = {}
    for v in values:
        name, _, trials = v.partition("=")
        if name not in models or not trials.isdigit() or int(trials) < 1:
            parser.error(f"--tune takes MODEL=TRIALS with MODEL one of {' '.join(models)} and TRIALS a positive "
                         f"integer; got {v!r}")
        out[name] = int(trials)
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", nargs="+", choices=MODELS, default=list(MODELS))
    p.add_argument("--threads", nargs="+", type=int, default=[1, 2])
    p.add_argument("--log", help="tuning log for the 'with the log' row")
    p.add_argument("--tune", nargs="*", metavar="MODEL=TRIALS",
                   help="tune the networks first (all of --models at DEFAULT_TRIALS when no value is given)")
    p.add_argument("--tune-dir", default=str(ROOT / "results" / "e2e_logs"), help="folder of --tune's logs")
    p.add_argument("--target", help="target of tensortune's networks (default: this machine); the peers are capped "
                                    "to its ISA")
    p.add_argument("--refine", action="store_true",
                   help="first time each layer's best configs of --log inside each network (appends to the log)")
    p.add_argument("--repeat", type=positive_int, default=15)
    p.add_argument("--processes", type=positive_int, default=1,
                   help="time in this many sets of fresh processes, each peer's figure the median of their medians")
    p.add_argument("--min-ms", type=float, default=50.0)
    p.add_argument("--json", help="also write the results as JSON here")
    p.add_argument("--markdown", metavar="PATH", help="replace (or append) the \"Whole networks\" section of this file")
    p.add_argument("--no-markdown", action="store_true", help=argparse.SUPPRESS)  # the default now; kept for old commands
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        spec = json.loads(args.child)
        fn = _compile_child if spec.get("compile") else _rss_child if spec.get("rss") else _child
        print(json.dumps(fn(spec)))
        return 0
    tune_trials = None if args.tune is None else parse_tune(args.tune, args.models, p)
    if args.target is not None:
        from tensortune import Target
        from tensortune.build import resolve_target
        from tensortune.errors import TensortuneError
        from tensortune.network.module import runs_here

        try:
            target = resolve_target(args.target)
        except TensortuneError as e:
            p.error(f"--target: {e}")
        if not runs_here(target):
            p.error(f"--target: this machine ('{Target.host()}') cannot run code for '{target}'; time it on a "
                    "machine of that target")
    with tempfile.TemporaryDirectory(prefix="tt-e2e-") as tmp:
        report = run(args.models, args.threads, os.path.abspath(args.log) if args.log else None, args.repeat,
                     args.min_ms, Path(tmp), tune_trials, Path(args.tune_dir), args.refine, args.processes,
                     args.target)
    text = table(report)
    print()
    print(text)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1) + "\n")
    if args.markdown:
        write_section(Path(args.markdown), text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
