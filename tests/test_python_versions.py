"""What differs on the oldest Python oplib claims (3.10: numpy 2.2 at most), checked on
every version: CI runs the suite on 3.10 and 3.13 beside 3.11 (.ci/run, noxfile.py)."""

from __future__ import annotations

import inspect

import numpy as np

from oplib_core._tensor import numpy_interop as _numpy_interop


def test_numpy_signatures_for_older_numpy_are_numpys_own():
    """numpy < 2.3 (the newest on Python 3.10 is 2.2) gives np.concatenate and np.where no
    signature; the interop's stand-ins must say what newer numpy says."""
    for name, stand_in in _numpy_interop._SIGNATURES.items():
        ours = inspect.signature(stand_in)
        try:
            theirs = inspect.signature(getattr(np, name))
        except ValueError:  # this numpy has none: the stand-in is what the interop binds
            assert _numpy_interop.FUNCTIONS[getattr(np, name)].signature() == ours
            continue
        assert [(p.name, p.kind, p.default) for p in ours.parameters.values()] == [
            (p.name, p.kind, p.default) for p in theirs.parameters.values()
        ]
