"""The registry: what every plugin registers, and how it is found.

- ``startup``: the dispatch table filled on first use, its lock and fork handling;
- ``handle``: the :class:`Handle` each registration returns, undoing exactly it;
- ``ownership``: who owns a registration, so conflicts never depend on discovery order;
- ``table``: the table of operators, the core op set built on first use;
- ``registry``: :class:`Registry` itself (definitions, kernels, fakes, formulas);
- ``waiting``: kernels kept for an operator not defined yet;
- ``lookup``: the op by any of its names (behind ``oplib.lookup``);
- ``backend_cache``: backend plugins loaded on first use of their backend.

Nothing is imported here: each importer names the module it needs, so that the lowest of
them (``startup``, ``handle``) stay cheap to import.
"""
