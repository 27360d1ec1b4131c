"""oplib's JAX backend (``jax`` device) on ``jax.Array``. Importing this package never
imports jax: jax loads the first time a JAX array is made, a JAX kernel runs or availability
is asked. JAX's 64-bit mode is left as the user set it."""
