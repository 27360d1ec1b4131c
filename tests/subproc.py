"""Run a Python snippet in a fresh interpreter (for process-wide state such as renaming the
private-use backend) and return what it put in its ``OUT`` dict.

The snippet gets ``OUT`` (a dict, printed as JSON at the end) and ``catch(fn, *a, **kw)``,
which returns ``[exception type name, message]`` or ``None`` when ``fn`` does not raise.
``OPLIB_*`` variables of the parent are dropped (but ``OPLIB_CACHE_DIR``, the run's cache
directory: see conftest); pass ``env`` to set some.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

_PRELUDE = """\
import json
OUT = {}
def catch(fn, *args, **kwargs):
    try:
        fn(*args, **kwargs)
    except BaseException as e:
        return [type(e).__name__, str(e)]
    return None
"""
_MARK = "@@OUT@@"


def run_python(
    code: str,
    env: dict[str, str] | None = None,
    timeout: float = 60,
    cwd: Path | str = ROOT,
) -> dict[str, Any]:
    full_env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("OPLIB_") or k == "OPLIB_CACHE_DIR"  # the run's (see conftest)
    }
    full_env.update(env or {})
    epilogue = f"\nprint({_MARK!r} + json.dumps(OUT, default=str))\n"
    script = _PRELUDE + textwrap.dedent(code) + epilogue
    proc = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        env=full_env,
        timeout=timeout,
        cwd=cwd,
        check=False,
    )
    if proc.returncode != 0:
        raise AssertionError(f"snippet failed (exit {proc.returncode}):\n{proc.stderr}")
    for line in proc.stdout.splitlines():
        if line.startswith(_MARK):
            return json.loads(line[len(_MARK) :])
    raise AssertionError(f"snippet printed no result:\n{proc.stdout}\n{proc.stderr}")
