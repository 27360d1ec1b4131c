"""Backend plugins loaded on first use of their backend, from what their last load showed.

Most installed backends are not used by a given program: one that computes with numpy
still paid for importing the jax, dask, cuda, meta and private-use plugins and registering
their few hundred kernels. A plugin whose whole contribution is backends of its own,
kernels for those backends and operators of its own (hooks ``oplib_backends``,
``oplib_define`` and ``oplib_impl`` only; nothing another plugin registers for its
backends or its operators, no override, nothing waiting) changes nothing until one of its
backends or operators is asked for. After a start-up that loaded every plugin, oplib
records those plugins here (their backends' names, dispatch keys and array class names,
the operators they define, and the files of their packages with their modification
times), next to the entry-point cache and keyed the same way; later start-ups only note
their backends and operator names, and the plugin is loaded (imported, its hooks run) the
first time anything needs one of them: an array of its class reaches an op, its device or
backend is named, its dispatch key gets a kernel, one of its operators is looked up, or
something reads the backends, operators or plugins as a whole (``oplib backends list``).

The record is dropped, and everything loaded, when a distribution is installed or
removed, ``sys.path`` or core's version changes, a recorded file changes, an ``OPLIB_*``
environment variable differs from the run that wrote it, or so does one of the variables
the plugin declares it reads (hook ``oplib_environment``: what it registers depends on
them). The file is read and written as the entry-point cache is (``_discovery``: a
directory only the user may write, a checksum that a corrupt file fails, which rebuilds it);
a recorded plugin waits only when the entry-point scan (checked against the installed
distributions) still lists its entry point with the same value. ``OPLIB_LAZY_BACKENDS=0``
loads every plugin at start-up.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterable
from typing import Any

from .._discovery import checksum, read_cache, switched_on, write_cache
from .._records import Record

__all__ = ["DeferredBackend", "DeferredPlugin", "enabled", "read", "write"]

ENV = "OPLIB_LAZY_BACKENDS"
_KIND = "backends"
_FORMAT = 3


class DeferredBackend(Record):
    """A backend of a deferred plugin: enough to know when it is asked for.
    ``type_names`` are dotted class names resolved as ``BackendSpec.array_type_names``
    are; ``device_module`` says whether ``oplib_core.<name>`` is one."""

    name: str
    key: str
    type_names: tuple[str, ...]
    device_module: bool


class DeferredPlugin(Record):
    """An entry point loaded on first use of one of its ``backends`` or of the operators it
    defines (``ops``, qualified names). ``files``: the ``(path, st_mtime_ns)`` of its
    package's modules when it was recorded; ``environment``: the ``(name, value)`` of each
    variable it declares it reads (hook ``oplib_environment``; None: unset)."""

    name: str
    value: str
    files: tuple[tuple[str, int], ...]
    backends: tuple[DeferredBackend, ...]
    ops: tuple[str, ...] = ()
    environment: tuple[tuple[str, str | None], ...] = ()


def enabled() -> bool:
    """``OPLIB_LAZY_BACKENDS`` (default on)."""
    return switched_on(ENV)


def _environment() -> list[tuple[str, str]]:
    # What oplib reads at load time (disabled plugins, overrides, the private-use name...)
    # decides what a plugin registers and who wins a conflict.
    return sorted((k, v) for k, v in os.environ.items() if k.startswith("OPLIB_"))


def _kind(env: list[tuple[str, str]]) -> str:
    # one file per environment: runs that alternate settings do not overwrite each other's
    return f"{_KIND}-{checksum(repr(env).encode())[-4:].hex()}"


def declared_environment(
    hooks: Iterable[Callable[[], Any]],
) -> tuple[tuple[str, str | None], ...] | None:
    """The variables a plugin's ``oplib_environment`` hooks name, with their values now;
    None when a hook raises or answers other than names (the plugin then never waits:
    what it registers could depend on anything)."""
    names: set[str] = set()
    for hook in hooks:
        try:
            answer = hook()
            if isinstance(answer, str) or not all(isinstance(n, str) for n in answer):
                return None
            names.update(answer)
        except Exception:
            return None
    return tuple((n, os.environ.get(n)) for n in sorted(names))


def _unchanged(files: tuple[tuple[str, int], ...]) -> bool:
    for path, mtime in files:
        try:
            if os.stat(path).st_mtime_ns != mtime:
                return False
        except OSError:
            return False
    return True


def read(core_version: str) -> dict[str, DeferredPlugin] | None:
    """The plugins to defer, by entry point name; None when there is no valid record (load
    everything, then :func:`write` what that showed)."""
    env = _environment()
    data = read_cache(_kind(env), core_version)
    try:
        if data is None or data["format"] != _FORMAT or data["env"] != env:
            return None
        found = {}
        for name, value, files, backends, ops, environment in data["plugins"]:
            files = tuple((str(p), int(m)) for p, m in files)
            environment = tuple((str(n), v) for n, v in environment)
            if not _unchanged(files) or any(os.environ.get(n) != v for n, v in environment):
                return None
            found[name] = DeferredPlugin(
                name,
                value,
                files,
                tuple(DeferredBackend(*b) for b in backends),
                tuple(str(q) for q in ops),
                environment,
            )
        return found
    except (KeyError, TypeError, ValueError):
        return None  # not what this version writes


def package_files(module: Any) -> tuple[tuple[str, int], ...]:
    """The imported modules of ``module``'s top-level package, with their modification
    times (an edit to any of them may change what the plugin registers)."""
    top = module.__name__.partition(".")[0]
    files = []
    for name, mod in list(sys.modules.items()):
        if name != top and not name.startswith(f"{top}."):
            continue
        path = getattr(mod, "__file__", None)
        if path:
            try:
                files.append((path, os.stat(path).st_mtime_ns))
            except OSError:
                continue
    return tuple(sorted(files))


def write(core_version: str, plugins: list[DeferredPlugin]) -> None:
    """Record ``plugins`` for the next start-ups (see the module doc)."""
    env = _environment()
    write_cache(
        _kind(env),
        core_version,
        {
            "format": _FORMAT,
            "env": env,
            "plugins": [
                (
                    p.name,
                    p.value,
                    p.files,
                    [tuple(b._asdict().values()) for b in p.backends],
                    p.ops,
                    p.environment,
                )
                for p in plugins
            ],
        },
    )
