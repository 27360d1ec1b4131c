"""The Tensor: the class (``tensor``), its generated op methods (``methods``), indexing
(``indexing`` reads, ``setitem`` writes), views sharing a version counter (``views``),
pickling (``pickling``) and numpy's protocols (``numpy_interop``).

Nothing is imported here: each importer names the module it needs, so that reading the
lowest of them (``views``) does not load the class.
"""
