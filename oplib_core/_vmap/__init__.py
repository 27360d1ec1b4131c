"""``oplib.vmap`` and batching rules (``register_vmap``): see docs/vmap.md.

Nothing here runs outside a vmap call: the interpreter is a dispatch mode pushed by
``vmap`` for the duration of the call (``_batched``: batched values, the mode and the rule
tables, which ``library.register_vmap`` fills), the core ops' rules (``_rules``) are made on
first use, ``grad`` inside a vmap is answered by ``_grad``, and ``_api`` is ``vmap`` itself.
This ``__init__`` imports nothing, so that ``library`` can import the rule table below
``autograd``, which ``_grad`` needs.
"""
