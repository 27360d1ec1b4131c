"""oplib's CUDA backend on cupy. Importing this package never imports cupy: cupy loads
the first time a CUDA array is made, a CUDA kernel runs or availability is asked."""
