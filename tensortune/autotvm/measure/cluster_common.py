"""What the cluster's client (``cluster``) and its workers (``cluster_worker``) share: the error they raise, the
Dask resource that names a target's measuring device, and the checks of a scheduler's address."""
from __future__ import annotations

from ...errors import TensortuneError
from ...target import Target


class ClusterError(TensortuneError, RuntimeError):
    """The cluster cannot be used: Dask is missing, the scheduler cannot be reached, or a worker is unfit."""


def device_resource(target: Target) -> str:
    """The Dask resource a worker advertises to measure for ``target``: a readable name made from every word
    of the target's string form, e.g. ``device:c:isa-avx2:cores-8:arch-x86_64:native``."""
    words = [w.lstrip("-").replace("=", "-") for w in str(target).split()]
    return ":".join(["device", *words])


def check_address(address: str) -> None:
    """Raise ``ClusterError`` unless ``address`` reads as a scheduler's address (``tcp://HOST:PORT``, or any
    other protocol Dask knows, e.g. ``inproc://`` in one process).

    Checked before Dask sees it: a ``Client`` that fails on a malformed address blocks the interpreter's exit."""
    from distributed.comm.addressing import parse_address, parse_host_port

    try:
        protocol, location = parse_address(address)
        if protocol in ("tcp", "tls"):
            parse_host_port(location)
    except ValueError as e:
        raise ClusterError(f"malformed scheduler address {address!r} ({e}); write it as tcp://HOST:PORT") from None


def unreachable(address: str, timeout: float, error: BaseException) -> ClusterError:
    return ClusterError(f"cannot reach the Dask scheduler at {address} within {timeout:g} s ({error}); start one "
                        f"with 'dask scheduler' and pass the address it prints")
