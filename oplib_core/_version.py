"""The version of oplib-core (also the plugin API version plugins declare against).

It comes from the git tag at build time (setup.py, ``oplib_version``), which writes it to
``_version_built.py`` next to this file. ``FALLBACK_VERSION`` is the version of a build
without a ``v*`` tag to read (a shallow clone, a fork) and of a source tree that was never
built; setup.py reads it from this line.
"""

__all__ = ["FALLBACK_VERSION", "__version__"]

FALLBACK_VERSION = "0.1.0"

try:
    # (written by the build: absent from a tree no build has run in)
    from ._version_built import version as __version__  # type: ignore[import-not-found,unused-ignore]
except ImportError:  # a source tree on sys.path that no build has run in
    __version__ = FALLBACK_VERSION
