"""Use the ``npu`` device that the vendor_npu package sets up (run after installing
oplib-core, oplib-cpu, oplib-privateuse and this package)::

    python examples/vendor_npu/use_npu.py
"""

import numpy as np

import oplib_core as oplib

oplib.generate_methods_for_privateuse1_backend()

print("devices:", oplib.npu.device_count(), "current:", oplib.npu.current_device())
x = oplib.tensor([-1.0, 0.0, 2.0], device="npu:1")
print(x, x.is_npu, x.device)

y = oplib.ops.vendor_npu.softplus(x)  # the vendor's npu kernel
z = (x * 2.0 + 1.0).exp()  # core ops on npu memory
expected = np.logaddexp(np.array([-1.0, 0.0, 2.0], dtype=np.float32), 0.0)
assert np.allclose(y.to("cpu").numpy(), expected), y
assert z.device == oplib.device("npu:1")

c = oplib.tensor([1.0, 2.0]).npu()  # Tensor.npu(): to the current npu device
print(c.device, c.is_npu, c.to("cpu"))

oplib.npu.manual_seed_all(0)
assert oplib.npu.initial_seed() == 0
a = oplib.tensor(oplib.ops.privateuse.rand([3], device="npu:0"))
oplib.npu.manual_seed_all(0)
b = oplib.tensor(oplib.ops.privateuse.rand([3], device="npu:0"))
assert (a.to("cpu").numpy() == b.to("cpu").numpy()).all()
print("npu OK")
