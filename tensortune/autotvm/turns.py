"""Tuning runs that take turns on one machine.

Two ways of tuning compared on a host whose speed changes in spells (a cloud guest whose vCPUs move between
cores) are decided by which run met more of the slow spells when they run one after the other. Run side by
side in turns instead (``run_in_turns``: a thread each, one turn at a time, the next to the run that has had the
least time), they spend the same minutes of the host and meet its spells alike. A tuning run takes part by doing
its work inside ``with turn():`` (``TaskScheduler(..., turn=turn)``, ``tune_model(..., turn=turn)``).
"""
from __future__ import annotations

import contextlib
import threading
import time
from typing import Callable, ContextManager, Iterator, Mapping, Sequence, TypeVar

from .tune import TuneError

T = TypeVar("T")


class Turns:
    """Runs that take turns: ``turn(name)`` waits until it is ``name``'s turn and, on leaving, passes the turn to
    the run still running that has spent the least time inside its turns (``seconds``; the first of ``names`` on
    a tie); ``finish(name)`` takes a run out. Two tuning runs compared on one machine so share its time evenly and
    meet the same spells of a noisy host (``run_in_turns``), even when one's rounds are shorter than the other's.
    ``clock``: seconds, for the time a turn takes."""

    def __init__(self, names: Sequence[str], clock: Callable[[], float] = time.perf_counter):
        if not names or len(set(names)) != len(names):
            raise TuneError(f"runs taking turns need one or more distinct names, got {list(names)!r}")
        self.order = list(names)
        self.live = set(names)
        self.current = self.order[0]
        self.seconds = dict.fromkeys(names, 0.0)
        self.clock = clock
        self._cv = threading.Condition()

    @contextlib.contextmanager
    def turn(self, name: str) -> Iterator[None]:
        with self._cv:
            if name not in self.live:
                raise TuneError(f"run {name!r} is not taking turns (finished, or not one of {self.order})")
            self._cv.wait_for(lambda: self.current == name)
        start = self.clock()
        try:
            yield
        finally:
            with self._cv:
                self.seconds[name] += self.clock() - start
                self._advance()

    def finish(self, name: str) -> None:
        with self._cv:
            self.live.discard(name)
            if self.current == name:
                self._advance()

    def _advance(self) -> None:  # (holding the lock)
        live = [n for n in self.order if n in self.live]
        if live:
            self.current = min(live, key=lambda n: self.seconds[n])
        self._cv.notify_all()


def run_in_turns(jobs: Mapping[str, Callable[[Callable[[], ContextManager]], T]],
                 clock: Callable[[], float] = time.perf_counter) -> tuple[dict[str, T], Turns]:
    """Run each job in a thread of its own, the jobs taking turns: a job gets a ``turn`` function to pass on (e.g.
    ``tune_model(..., turn=turn)``), and does its work inside ``with turn():``, one job at a time, the next turn
    to the job that has had the least time (``Turns``). Returns each job's result and the ``Turns`` (its
    ``seconds``); a job's exception is raised here once every job has stopped."""
    turns = Turns(list(jobs), clock)
    results: dict[str, T] = {}
    errors: list[BaseException] = []

    def work(name: str, job) -> None:
        try:
            results[name] = job(lambda: turns.turn(name))
        except BaseException as e:  # raised in the caller's thread below
            errors.append(e)
        finally:
            turns.finish(name)

    threads = [threading.Thread(target=work, args=item, name=f"turns-{item[0]}", daemon=True) for item in jobs.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return results, turns
