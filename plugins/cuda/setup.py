"""How oplib-cuda is built: its version and its pins on the other oplib distributions come
from ``oplib_plugin_build.py`` (one file for every plugin, linked into this folder; its
docstring says where they come from); this file names what oplib-cuda needs.
"""

from __future__ import annotations

import runpy
from pathlib import Path

HERE = Path(__file__).resolve().parent
#: the oplib distributions it needs, each in the series of its own version
OPLIB = ["oplib-core", "oplib-cpu"]
OTHERS = ["numpy>=1.24"]

# the checkout's own file (where git keeps no links, the link here is only its path), else
# the copy an sdist or a vendor's copy of the template carries
HELPER = next(p for p in (HERE.parent, HERE) if (p / "oplib_plugin_build.py").is_file())
VERSION, REQUIRES = runpy.run_path(str(HELPER / "oplib_plugin_build.py"))["versions"](
    HERE, OPLIB, OTHERS
)

if __name__ == "__main__":  # (run under another name, it only tells VERSION and REQUIRES)
    from setuptools import setup

    setup(version=VERSION, install_requires=REQUIRES)
