"""oplib-cuda installed for real with cupy (``[cuda13]``) into a fresh virtualenv on a machine
with no GPU and no NVIDIA driver, the case of every laptop and CI runner that installs it
(slow; CI runs it; skipped where a CUDA device is usable, which the ``cuda`` tests cover):

- the backend says why it is unavailable, and every use of it raises oplib's
  ``BackendError`` with that reason, never cupy's own error from inside a kernel;
- the own elementwise kernels compile with cupy's NVRTC and the options cupy's
  ``RawModule`` gives them (``nvidia-cuda-nvrtc``, CUDA 13), each kernel in its module."""

from __future__ import annotations

import json
import subprocess
import textwrap
from pathlib import Path

import pytest

from helpers import venv_env, venv_with_plugin

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def python(tmp_path_factory: pytest.TempPathFactory) -> str:
    where = tmp_path_factory.mktemp("cuda-install")
    return venv_with_plugin(where, "cuda", "cuda13", "nvidia-cuda-nvrtc>=13,<14")


def _run(python: str, script: str) -> dict[str, object]:
    env = venv_env()
    proc = subprocess.run(
        [python, "-c", textwrap.dedent(script)],
        capture_output=True,
        text=True,
        env=env,
        cwd=Path(python).parents[2],
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    out: dict[str, object] = json.loads(proc.stdout.strip().splitlines()[-1])
    return out


def test_without_a_driver_every_use_says_why(python: str) -> None:
    out = _run(
        python,
        """
        import json, numpy as np, oplib_core as oplib
        from oplib_core.errors import BackendError
        from oplib_cuda import elementwise, runtime
        import cupy

        def error(fn):
            try:
                fn()
            except Exception as e:
                return [type(e).__name__, str(e)]
            return None

        print(json.dumps({
            "cupy": cupy.__version__,
            "status": runtime.status(),
            "available": oplib.cuda.is_available(),
            "count": oplib.cuda.device_count(),
            "row": oplib.backends.get("cuda").status(),
            "errors": {
                "factory": error(lambda: oplib.ones(3, device="cuda")),
                "to": error(lambda: oplib.tensor([1.0]).to("cuda")),
                "device module": error(oplib.cuda.current_device),
                "seed": error(lambda: oplib.cuda.manual_seed(0)),
            },
            "serves": elementwise.serves("add", np.ones(4), np.ones(4)),
            "cpu": (oplib.tensor([1.0, 2.0]) * 3.0).tolist(),
        }))
        """,
    )
    if out["status"] is None:
        pytest.skip("a CUDA device is usable here: the cuda-marked tests cover it")
    status = str(out["status"])
    # a machine without a driver: CUDA's runtime reports it as an insufficient driver
    assert status.startswith("CUDA driver error: cudaErrorInsufficientDriver"), status
    assert "no NVIDIA driver, or one older than this cupy's CUDA 13." in status
    assert "pip install 'oplib-cuda[cuda12]'" in status
    assert out["available"] is False and out["count"] == 0
    assert out["row"] == status
    errors = out["errors"]
    assert isinstance(errors, dict)
    for use, error in errors.items():
        assert error == ["BackendError", f"the cuda backend is unavailable: {status}"], use
    assert out["serves"] is False
    assert out["cpu"] == [3.0, 6.0]


def test_oplib_check_on_cuda_says_it_is_unavailable(python: str) -> None:
    env = venv_env()
    oplib = str(Path(python).with_name("oplib"))
    listed = subprocess.run(
        [oplib, "backends", "list", "--json"], capture_output=True, text=True, env=env, timeout=300
    )
    (cuda,) = [row for row in json.loads(listed.stdout) if row["name"] == "cuda"]
    if cuda["available"]:
        pytest.skip("a CUDA device is usable here: the cuda-marked tests cover it")
    checked = subprocess.run(
        [oplib, "check", "--backend", "cuda"], capture_output=True, text=True, env=env, timeout=300
    )
    assert checked.returncode == 1 and checked.stdout == ""
    assert checked.stderr == (
        "oplib: no backend asked for is available here, so no op was checked: "
        f"cuda: {cuda['reason']}\n"
    )


def test_the_own_kernels_compile_with_cupys_nvrtc(python: str) -> None:
    out = _run(
        python,
        """
        import json, re
        import cupy._core.core as core
        import cupy.cuda.compiler as compiler
        from oplib_cuda import elementwise as ew

        # RawModule's options (cupy's headers, C++17; -ftz=true as cupy adds it), for an
        # H100/H200 (sm_90; cupy asks the device, which this machine has not)
        options = (*core.assemble_cupy_compiler_options(()), "-ftz=true", "-arch=sm_90",
                   "--device-as-default-execution-space")
        out = {"nvrtc": list(compiler._get_nvrtc_version())}
        for dtype in ew.DTYPES:
            program = compiler._NVRTCProgram(ew.module_source(dtype), "oplib.cu", method="cubin")
            cubin, _ = program.compile(options)
            names = {n.decode() for n in re.findall(rb"oplib_[A-Za-z0-9_]+", cubin)}
            want = {ew.kernel_name(op, dtype, how) for op, how in ew.kernels_of(dtype)}
            out[dtype.name] = {"kernels": len(want), "missing": sorted(want - names)}
        try:  # and what cupy raises for source NVRTC rejects, which the plugin catches
            compiler._NVRTCProgram("not CUDA", "bad.cu", method="cubin").compile(options)
        except Exception as e:
            out["bad"] = [type(e).__module__ + "." + type(e).__qualname__, str(e)]
        print(json.dumps(out))
        """,
    )
    assert out["nvrtc"][0] == 13  # type: ignore[index]
    for dtype, kernels in (("float32", 119), ("int32", 94), ("float16", 119)):
        assert out[dtype] == {"kernels": kernels, "missing": []}, dtype
    kind, message = out["bad"]  # type: ignore[misc]
    assert kind == "cupy.cuda.compiler.CompileException"
    assert "error" in message
