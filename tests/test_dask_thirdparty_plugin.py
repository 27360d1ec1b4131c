"""A third-party op package, used as an in-process plugin by the dask tests.

It is what an op author ships for dask workers to find: a module importable on the workers
(here: ``tests/`` is on their ``sys.path``, inherited from the test process), with
module-level kernels, a fake kernel and ``Tag.pointwise``. It holds no tests itself.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

import oplib_core as oplib

NAME = "dasktp"
SOFTPLUS = "dasktp::softplus"
WORKER_PID = "dasktp::worker_pid"


def softplus_cpu(x: np.ndarray, beta: float) -> np.ndarray:
    return np.logaddexp(0.0, x * beta).astype(x.dtype, copy=False) / x.dtype.type(beta)


def softplus_fake(x: Any, beta: float) -> Any:
    return oplib.empty_like(x)


def worker_pid_cpu(x: np.ndarray) -> np.ndarray:
    """Each element: the id of the process that computed its chunk."""
    return np.full(x.shape, os.getpid(), dtype=np.int64)


def worker_pid_fake(x: Any) -> Any:
    return x.new_empty(x.shape, np.int64)


@oplib.hookimpl
def oplib_define(registrar: Any) -> None:
    registrar.define(SOFTPLUS, "(Tensor x, float beta=1.0) -> Tensor", tags=oplib.Tag.pointwise)
    registrar.define(WORKER_PID, "(Tensor x) -> Tensor", tags=oplib.Tag.pointwise)


@oplib.hookimpl
def oplib_impl(registrar: Any) -> None:
    registrar.impl(SOFTPLUS, "cpu", softplus_cpu)
    registrar.impl(WORKER_PID, "cpu", worker_pid_cpu)


@oplib.hookimpl
def oplib_register_fake(registrar: Any) -> None:
    registrar.register_fake(SOFTPLUS, softplus_fake)
    registrar.register_fake(WORKER_PID, worker_pid_fake)
