"""Timing only while the machine runs at its usual speed: a guard against the slow spells of shared machines.

On a cloud VM or a busy workstation another process can take a core for seconds. Every kernel timed in such a
spell runs up to twice as long (a kernel on 2 threads waits for its slower thread), and a whole batch of a
tuning run is misjudged at once: on a 2-core VM, the same configs timed in two runs a few minutes apart gave
batch medians 0.83-1.95x apart. The tuner then learns the spell, not the kernel, and a network's scheduler
gives trials to the task that merely looked slow.

``SpeedProbe`` times a short loop of fused multiply-adds on the kernels' threads (``runtime.fma``; it reads no
memory, so its time depends only on the cores it gets) and keeps the fastest time it has seen: its
``slowdown()`` is how much slower the machine runs now. ``time_steadily`` probes before and after a kernel's
timing and, when either probe is more than ``tolerance`` slower than the fastest, pauses and times the kernel
again (at most ``retries`` more times, the pauses doubling), keeping the timing taken in the steadiest conditions.
A timing that never got steady conditions is still kept, never lost; ``SlowSpellGuard`` notes it on the result,
and stops waiting when the machine stays busy.
"""
from __future__ import annotations

import time
from typing import Callable, TypeVar

from ...runtime.fma import fma_loop
from ...target import Target

T = TypeVar("T")


class SpeedProbe:
    """A loop of FMAs of about ``probe_ms`` on ``threads`` threads; ``slowdown()``: its time now over its fastest."""

    def __init__(self, threads: int, probe_ms: float = 5.0, target: Target | None = None, calls: int = 1):
        self.threads, self.calls = threads, calls
        self._loop = fma_loop(target or Target.host())
        self.iters = 1 << 10
        while self._time() < probe_ms / 4e3:  # calibrate: one call of about probe_ms
            self.iters *= 2
        self.iters = max(1, int(self.iters * probe_ms / 1e3 / self._time()))
        self.fastest = min(self._time() for _ in range(5))

    def _time(self) -> float:
        start = time.perf_counter()
        self._loop.run(self.iters, self.threads)
        return time.perf_counter() - start

    def slowdown(self) -> float:
        """The probe's time now (the fastest of ``calls`` calls: one late wake-up is no spell) over its fastest."""
        now = min(self._time() for _ in range(self.calls))
        self.fastest = min(self.fastest, now)
        return now / self.fastest


def time_steadily(timing: Callable[[], T], slowdown: Callable[[], float], retries: int = 3,
                  tolerance: float = 0.25, pause_s: float = 0.25, before: float | None = None) -> tuple[T, float, int]:
    """``timing()`` taken while ``slowdown()``, probed before and after it, stays within ``1 + tolerance``; else
    taken again, up to ``retries`` more times, after pauses that double from ``pause_s`` seconds (a spell lasts
    seconds). ``before``: a probe just taken, used as the first attempt's. Returns the timing of the steadiest
    attempt, the slowdown it was taken at (the larger of its two probes) and the number of attempts."""
    attempts = []
    for attempt in range(retries + 1):
        if attempt:
            time.sleep(pause_s * 2 ** (attempt - 1))
        if attempt or before is None:
            before = slowdown()
        result = timing()
        slow = max(before, slowdown())
        attempts.append((slow, attempt, result))
        if slow <= 1 + tolerance:
            break
    slow, _, result = min(attempts, key=lambda a: a[:2])
    return result, slow, len(attempts)


class SlowSpellGuard:
    """``time(timing)``: ``time_steadily`` with a speed probe, and a note for a timing never taken steady.

    A machine busy for good (the user compiles beside the tuner) is no spell to wait out: after ``give_up_after``
    candidates in a row found no steady moment, each is timed once (still probed and noted) until one is steady.
    Candidates timed back to back share a probe: the one after a timing is the next one's "before" when it is
    less than ``reuse_s`` seconds old.
    """

    def __init__(self, probe: SpeedProbe, retries: int = 3, tolerance: float = 0.25, pause_s: float = 0.25,
                 give_up_after: int = 8, reuse_s: float = 0.2):
        self.probe, self.retries, self.tolerance, self.pause_s = probe, retries, tolerance, pause_s
        self.give_up_after, self.reuse_s = give_up_after, reuse_s
        self.unsteady_in_a_row = 0
        self._last: tuple[float, float] | None = None  # (when, slowdown) of the last probe

    def _slowdown(self) -> float:
        slow = self.probe.slowdown()
        self._last = (time.perf_counter(), slow)
        return slow

    def time(self, timing: Callable[[], T]) -> tuple[T, str]:
        busy = self.unsteady_in_a_row >= self.give_up_after
        recent = self._last is not None and time.perf_counter() - self._last[0] < self.reuse_s
        result, slow, attempts = time_steadily(timing, self._slowdown, 0 if busy else self.retries,
                                               self.tolerance, self.pause_s, self._last[1] if recent else None)
        if slow <= 1 + self.tolerance:
            self.unsteady_in_a_row = 0
            return result, ""
        self.unsteady_in_a_row += 1
        why = (f"the machine has been busy for {self.unsteady_in_a_row - 1} candidates: timed once" if busy
               else f"{attempts} attempts")
        return result, f"timed while the machine ran {slow:.2f}x slower than its fastest (speed probe; {why})"
