"""Hook specifications: the plugin author's manual.

A plugin is a module (or object) with functions marked ``@oplib_core.hookimpl`` whose names
are the hooks below, published through an entry point in group ``oplib``::

    [project.entry-points.oplib]
    acme = "acme_ops.plugin"

On first use of oplib (an op lookup, a registration, a device or backend query, or
``oplib.plugins.load()``), every plugin is loaded and the hooks run in phases over all
plugins: ``oplib_backends`` → ``oplib_define`` → ``oplib_impl`` →
``oplib_register_fake`` → ``oplib_register_autograd``. So a plugin may give kernels to ops
another plugin defines, whatever the install order. A plugin that fails to import, or whose
hook raises, is reported (``oplib plugins list``) and skipped; what its failing hook had
registered is rolled back, and every other plugin still loads.

The ``registrar`` passed to the registration hooks (annotate it with
``oplib_core.plugins.Registrar``) has the methods ``define``, ``impl``,
``register_kernel``, ``register_fake`` and ``register_autograd``, taking the same
arguments as the top-level functions of ``oplib_core`` (without ``lib=``). Everything
registered through it is credited to the plugin (``oplib ops show`` prints the plugin,
distribution, version and ``file:line``).

A plugin whose only hooks are ``oplib_backends``, ``oplib_define`` and ``oplib_impl`` (and
``oplib_environment``), and which registers only its backends, its own operators and
kernels under its backends' keys, is loaded on first use of one of those from the second
start-up on (``OPLIB_LAZY_BACKENDS=0``: always at once; see ``docs/writing-a-plugin.md``).
If what it registers depends on environment variables, name them in
``oplib_environment``.

Loading a plugin module must be cheap: do not import heavy array libraries (cupy, dask) at
module level; import them inside the callables of your ``BackendSpec`` and your kernels.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:
    from ._device import Device
    from ._dispatch import OpOverload
    from .backends import BackendSpec
    from .plugins import Registrar
    from .testing import SampleInput

PROJECT = "oplib"

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


@hookspec
def oplib_backends() -> list[BackendSpec]:
    """Return the device backends this plugin provides, as a list of ``BackendSpec``.

    Runs first. Each spec needs a ``name`` (the device type, e.g. ``"cuda"``) and a way to
    recognise its arrays (``array_types``, or ``array_type_names`` such as
    ``("cupy.ndarray",)`` so that the library is not imported until needed). Kernels other
    plugins registered for this device type earlier go live when the backend appears.
    A backend's name, dispatch key and array types belong to the distribution that declares
    it (its ``oplib`` entry point carries the backend's name); a plugin claiming another's
    fails alone, in any load order.
    """
    ...


@hookspec
def oplib_define(registrar: Registrar) -> None:
    """Define operators: ``registrar.define("acme::scaled_add", "(Tensor x, Tensor y, *,
    float alpha=1.0) -> Tensor", tags=(oplib_core.Tag.pointwise,))``.

    Defining an operator another plugin defines is a conflict settled by ownership, not by
    load order: the plugin whose entry point is named after the namespace keeps it, the
    other is rolled back and reported as failed, naming both origins (both, when neither
    owns the namespace).
    """


@hookspec
def oplib_impl(registrar: Registrar) -> None:
    """Register kernels: ``registrar.impl("acme::scaled_add", "cpu", fn)`` or
    ``registrar.register_kernel(op, ["cpu", "cuda"], fn)``.

    A kernel receives native arrays of its device (numpy for ``cpu``, cupy for ``cuda``),
    positional schema arguments positionally (defaults filled in) and keyword-only ones by
    keyword, and returns native arrays. A kernel for a device whose backend is not
    installed is kept and shown as waiting until that backend registers; likewise a
    kernel for an op no installed package defines (a namespace no defined op uses, named
    as a string) waits for the op and goes live when it is defined. A kernel slot
    belongs to the op's definer (for ``oplib::`` ops on a backend, to that backend's
    distribution): registering one somebody else owns fails this plugin, whatever the load
    order; ``allow_override=True`` over it needs the user's ``OPLIB_ALLOW_OVERRIDE``.
    """


@hookspec
def oplib_environment() -> Iterable[str]:
    """Return the names of the environment variables that what this plugin registers depends
    on, e.g. ``["ACME_PRECISION"]`` when ``oplib_define`` defines ``acme::fast_gemm`` only
    under ``ACME_PRECISION=low``.

    A plugin that may wait for first use (see the module doc) is not imported at a start-up
    that finds it recorded: oplib announces its backends and operators from what the last
    full load showed. It records the values these variables had then (unset included) and
    loads every plugin at once, recording again, at a start-up where one differs, so the
    table never shows operators from another setting. Variables named ``OPLIB_*`` need not
    be named: all of them are compared. Called once, after loading, when the record is
    written; it must not import anything heavy. A hook that raises, or returns a string or
    anything but names, keeps the plugin from waiting (it loads at every start-up).
    """
    ...


@hookspec
def oplib_register_fake(registrar: Registrar) -> None:
    """Register fake kernels: ``registrar.register_fake("acme::scaled_add", fn)``; ``fn``
    gets data-less arrays and returns data-less outputs (``oplib_core.empty_like`` ...)."""


@hookspec
def oplib_register_autograd(registrar: Registrar) -> None:
    """Register gradient formulas: ``registrar.register_autograd(op, backward,
    setup_context=setup_context)``, as ``oplib_core.register_autograd``."""


@hookspec
def oplib_sample_inputs(
    op: OpOverload, device: Device
) -> Iterable[SampleInput | tuple[tuple[Any, ...], dict[str, Any]]] | None:
    """Yield sample calls of ``op`` (an ``OpOverload``) on ``device`` (a ``Device``), for
    ``opcheck`` and ``oplib check``; return None for ops you know nothing about.

    Yield ``oplib_core.testing.SampleInput(args, kwargs, name=..., compare_values=True)``
    objects (or plain ``(args, kwargs)`` pairs) whose tensors live on ``device``; give
    floating inputs ``requires_grad=True`` to have autograd checked. Answers from all
    plugins are merged.
    """
