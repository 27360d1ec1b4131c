"""The backend's name: the one line a vendor's copy of this template changes.

``NAME = "privateuse1"`` takes the private-use slot, as torch's ``PrivateUse1``: one name per
process, which users give it with ``oplib.rename_privateuse1_backend("npu")`` (or
``OPLIB_PRIVATEUSE1_NAME=npu``). A copy that sets ``NAME = "myaccel"`` is a backend of its
own name instead, next to any other: everything below follows from ``NAME``, and so do the
device module (``oplib.myaccel``, ``set_device("myaccel:1")``), the errors that name the
device, the generated ``Tensor.myaccel()`` and ``Tensor.is_myaccel``, the operators
``myaccel::rand``/``myaccel::randn`` and the device-count variable ``OPLIB_MYACCEL_DEVICES``
(see ``docs/writing-a-backend.md``, "Renaming the template").
"""

from __future__ import annotations

from oplib_core.backend_registration import privateuse1_backend_name

__all__ = ["DEVICES_ENV", "KEY", "NAME", "NAMESPACE", "SLOT", "backend_name"]

NAME: str = "privateuse1"

SLOT: bool = NAME == "privateuse1"
"""Whether this backend is the private-use slot (renamed by users) or has a name of its own."""

KEY = "PrivateUse1" if SLOT else NAME.capitalize()
"""The dispatch key its kernels are registered under (torch's for the slot)."""

NAMESPACE = "privateuse" if SLOT else NAME
"""The namespace of the template's own operators (``privateuse::rand``)."""

DEVICES_ENV = f"OPLIB_{NAME.upper()}_DEVICES"
"""The environment variable giving the number of devices (default 2)."""


def backend_name() -> str:
    """The device type users write: the slot's current name (``privateuse1`` until renamed),
    else ``NAME``."""
    return privateuse1_backend_name() if SLOT else NAME
