"""Native libraries are isolated from one another and are read before they run.

- Each library resolves its own symbols (``RTLD_LOCAL``): two libraries exporting a kernel
  of the same name each run their own (opened ``RTLD_GLOBAL``, the second library's kernel
  was the first one's, and its op answered 1.0 instead of 2.0).
- The ABI version and the entry symbol are read from the file: a library built for another
  ABI, or no oplib library at all, is refused without its constructor having run.
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import oplib_core as oplib

from helpers import c_compiler, compile_library, unique_ns

# The kernel is exported (not static) under one name in both libraries: with RTLD_GLOBAL the
# second library's reference to it binds to the first library's definition.
TWIN = r"""
#include "oplib.h"
__attribute__((visibility("default")))
int oplib_test_twin_kernel(const oplib_arg *a, int64_t n, DLTensor *o, int64_t no,
                           oplib_error *e) {
  ((double *)o[0].data)[0] = VALUE;
  return OPLIB_OK;
}
static int one(const oplib_arg *a, int64_t n, oplib_tensor_meta *o, int64_t no, oplib_error *e) {
  o[0].ndim = 1; o[0].dtype = a[0].v.tensor->dtype; o[0].shape[0] = 1;
  return OPLIB_OK;
}
OPLIB_LIBRARY_INIT(api) {
  void *c = api->ctx;
  if (api->define(c, "{ns}::which", "(Tensor x) -> Tensor")) return 1;
  if (api->register_shape_fn(c, "{ns}::which", one)) return 1;
  return api->impl(c, "{ns}::which", "cpu", oplib_test_twin_kernel) ? 1 : 0;
}
"""


def test_two_libraries_exporting_one_kernel_name_each_run_their_own(tmp_path):
    ops = {}
    for value in (1.0, 2.0):
        ns = unique_ns("twin")
        src = TWIN.replace("{ns}", ns).replace("VALUE", repr(value))
        oplib.ops.load_library(compile_library(src, tmp_path, name=f"twin{int(value)}"))
        ops[value] = getattr(oplib.ops, ns).which
    x = np.zeros(1)
    assert ops[1.0](x).tolist() == [1.0]
    assert ops[2.0](x).tolist() == [2.0]  # its own kernel, not the first library's
    assert ops[2.0](oplib.tensor(x)).tolist() == [2.0]  # (the dispatcher's path too)


# A constructor that leaves a mark: it runs when the library is opened.
CONSTRUCTOR = r"""
#include <stdint.h>
#include <stdio.h>
__attribute__((constructor)) static void mark(void) {
  FILE *f = fopen("{marker}", "w");
  if (f) fclose(f);
}
"""


def _library(tmp_path, name, body):
    marker = tmp_path / f"{name}.ran"
    src = CONSTRUCTOR.replace("{marker}", str(marker)) + body
    return compile_library(src, tmp_path, name=name), marker


@pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="the version is read from the ELF file"
)
def test_a_library_for_another_abi_is_refused_without_running_its_constructor(tmp_path):
    path, marker = _library(
        tmp_path,
        "abi7",
        """
        __attribute__((visibility("default")))
        const uint32_t oplib_library_abi_version = (7u << 16) | 3u;
        __attribute__((visibility("default"))) int oplib_library_init(const void *api) {
          return 0;
        }
        """,
    )
    with pytest.raises(
        oplib.LibraryLoadError,
        match=r"built for oplib ABI 7\.3, but this oplib implements ABI 1\.0",
    ) as e:
        oplib.ops.load_library(path)
    assert e.value.library == path
    assert not marker.exists(), "the library's constructor ran before its ABI was checked"
    assert path not in oplib.ops.loaded_libraries


@pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="the symbols are read from the ELF file"
)
@pytest.mark.parametrize(
    "body",
    [
        "int unrelated(void) { return 1; }",
        # the version is there but only as a hidden (unexported) symbol
        '__attribute__((visibility("hidden"))) const uint32_t oplib_library_abi_version = 65536;'
        '__attribute__((visibility("default"))) int oplib_library_init(const void *a) '
        "{ return 0; }",
        # the version is exported but the entry function is not
        '__attribute__((visibility("default"))) const uint32_t oplib_library_abi_version = 65536;'
        "static int oplib_library_init(const void *a) { return 0; }"
        "int (*keep)(const void *) = oplib_library_init;",
    ],
    ids=["no-symbols", "hidden-version", "static-init"],
)
def test_a_library_that_is_not_oplibs_is_refused_without_running_its_constructor(tmp_path, body):
    path, marker = _library(tmp_path, "plain", body)
    with pytest.raises(oplib.LibraryLoadError, match=r"not an oplib library.*OPLIB_LIBRARY_INIT"):
        oplib.ops.load_library(path)
    assert not marker.exists()


def test_a_good_library_runs_its_constructor_when_loaded(tmp_path):
    """The other side of the two tests above: the mark does appear once the checks pass."""
    ns = unique_ns("ctor")
    path, marker = _library(
        tmp_path,
        "good",
        f"""
        #include "oplib.h"
        OPLIB_LIBRARY_INIT(api) {{
          return api->define(api->ctx, "{ns}::f", "(Tensor x) -> Tensor") ? 1 : 0;
        }}
        """,
    )
    assert not marker.exists()
    oplib.ops.load_library(path)
    assert marker.exists() and path in oplib.ops.loaded_libraries
    assert f"{ns}::f" in [op.name() for op in oplib.registered_ops()]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the symbols are read from ELF")
@pytest.mark.parametrize("style", ["gnu", "sysv"])
@pytest.mark.parametrize("version", ["(1u << 16) | 9u", "(2u << 16)"], ids=["1.9", "2.0"])
def test_the_version_is_read_through_either_hash_table(tmp_path, style, version):
    """The symbol table's length comes from the hash table the linker wrote: DT_GNU_HASH
    (the default) or the older DT_HASH (``--hash-style=sysv``)."""
    cc = c_compiler()
    if cc is None:
        pytest.skip("no C compiler (cc/gcc) found: native-kernel tests need one; CI has gcc")
    ns = unique_ns("hash")
    src = tmp_path / "lib.c"
    src.write_text(
        "#include <stdint.h>\n"
        '__attribute__((visibility("default"))) const uint32_t oplib_library_abi_version = '
        f"{version};\n"
        "typedef struct { uint32_t major, minor; uint64_t size; void *ctx;"
        " int (*define)(void *, const char *, const char *); } api_t;\n"
        '__attribute__((visibility("default"))) int oplib_library_init(const api_t *api) {\n'
        f'  return api->define(api->ctx, "{ns}::f", "(Tensor x) -> Tensor");\n'
        "}\n"
    )
    path = str(tmp_path / f"{style}.so")
    flags = ["-shared", "-fPIC", f"-Wl,--hash-style={style}"]
    built = subprocess.run([cc, *flags, str(src), "-o", path], capture_output=True, text=True)
    if built.returncode != 0:
        pytest.skip(f"the linker does not take --hash-style={style}: {built.stderr[-200:]}")
    if version.startswith("(2u"):
        with pytest.raises(oplib.LibraryLoadError, match=r"built for oplib ABI 2\.0"):
            oplib.ops.load_library(path)
    else:  # a newer minor version of ABI 1 loads
        oplib.ops.load_library(path)
        assert f"{ns}::f" in [op.name() for op in oplib.registered_ops()]
