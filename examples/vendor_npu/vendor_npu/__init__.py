"""Example vendor package: the private-use device becomes ``npu``, with one extra op."""
