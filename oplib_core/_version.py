"""The version of oplib-core (also the plugin API version plugins declare against)."""

__version__ = "0.1.0"
