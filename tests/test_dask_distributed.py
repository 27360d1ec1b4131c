"""The ``dask`` backend on real worker processes: ``distributed.LocalCluster`` on loopback
(two single-threaded worker processes), started and closed here.

Includes a third-party op from an in-process plugin (``test_dask_thirdparty_plugin``): its
tasks pickle the op by name plus its module, and each worker imports and registers that
plugin the first time it needs the op.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

import oplib_core as oplib

da = pytest.importorskip("dask.array")
distributed = pytest.importorskip("distributed")

import test_dask_thirdparty_plugin as tp  # noqa: E402

pytestmark = pytest.mark.slow
core = oplib.ops.oplib


@pytest.fixture(scope="module")
def client():
    cluster = distributed.LocalCluster(
        n_workers=2,
        threads_per_worker=1,
        processes=True,
        host="127.0.0.1",
        dashboard_address=None,
        worker_dashboard_address=None,
    )
    c = distributed.Client(cluster)
    try:
        yield c
    finally:
        c.close()
        cluster.close()


@pytest.fixture(scope="module")
def plugin():
    record = oplib.plugins.register(tp, name=tp.NAME)
    assert record.status == "loaded", record.error
    yield tp
    oplib.plugins.unregister(tp.NAME)


def _x():
    rng = np.random.default_rng(0)
    return da.from_array(rng.standard_normal((400, 300)), chunks=(100, 75))


def test_core_ops_compute_on_worker_processes(client):
    x = _x()
    xn = x.compute(scheduler="sync")
    y = core.sum(core.sin(core.mul.Scalar(x, 2.0)), [1], False)
    m = core.mean(core.abs(x), None, False)
    p = core.matmul(x, core.permute(xn, [1, 0]))
    out_y, out_m, out_p = client.compute([y, m, p], sync=True)
    np.testing.assert_allclose(out_y, np.sin(xn * 2).sum(1), rtol=1e-10)
    np.testing.assert_allclose(out_m, np.abs(xn).mean(), rtol=1e-10)
    np.testing.assert_allclose(out_p, xn @ xn.T, rtol=1e-10)


def test_third_party_op_from_an_in_process_plugin_reaches_the_workers(client, plugin):
    x = _x()
    xn = x.compute(scheduler="sync")
    y = oplib.ops.dasktp.softplus(x, 2.0)
    z = core.amax(y, [0], True)
    out_y, out_z = client.compute([y, z], sync=True)
    np.testing.assert_allclose(out_y, tp.softplus_cpu(xn, 2.0), rtol=1e-10)
    np.testing.assert_allclose(out_z, tp.softplus_cpu(xn, 2.0).max(0, keepdims=True))
    pids = np.unique(client.compute(oplib.ops.dasktp.worker_pid(x), sync=True))
    worker_pids = set(client.run(os.getpid).values())
    assert os.getpid() not in pids
    assert set(pids.tolist()) <= worker_pids
    # each worker registered the plugin itself, by module name
    loaded = client.run(
        lambda: sorted(r.name for r in oplib.plugins.list() if r.status == "loaded")
    )
    assert any(tp.NAME in names for names in loaded.values())
