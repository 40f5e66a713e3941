"""The compiled kernels of the edge loop (edgedrift._kernels, see edgedrift.kernels); everything else is in
pyproject.toml. The extension is optional: built where a C compiler works, and where none does (a gateway
without build tools, CC=/bin/false) the package installs without it, says so in one line, and runs the
numpy reference code (``edgedrift --version`` names the path). EDGEDRIFT_REQUIRE_KERNELS=1 makes a failed
build an error (the wheel builds of cibuildwheel set it: a wheel must carry the kernels)."""

import os
import sys

import numpy
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

# No contraction into fused multiply-adds: the kernels round like the numpy expressions they replace.
flags = [] if sys.platform == "win32" else ["-O2", "-ffp-contract=off"]


class OptionalBuildExt(build_ext):
    """build_ext that installs without the kernels when they cannot be compiled, with one clear line."""

    failed = False

    def run(self) -> None:
        try:
            super().run()
        except Exception as exc:  # no compiler, a compiler that fails, missing Python headers, ...
            self._without_kernels(exc)

    def build_extension(self, ext: Extension) -> None:
        try:
            super().build_extension(ext)
        except Exception as exc:
            self._without_kernels(exc)

    def _without_kernels(self, exc: Exception) -> None:
        if os.environ.get("EDGEDRIFT_REQUIRE_KERNELS", "") not in ("", "0"):
            raise exc
        if self.failed:  # a consequence of the first failure (an editable install's copy, say)
            return
        self.failed = True
        reason = " ".join(str(exc).split()) or type(exc).__name__
        print(
            f"edgedrift-core: compiled kernels not built ({reason}); installing the numpy path (same "
            "results to rounding, slower per sample; a C compiler and a reinstall give the compiled path)",
            file=sys.stderr,
        )


setup(
    cmdclass={"build_ext": OptionalBuildExt},
    ext_modules=[
        Extension(
            "edgedrift._kernels",
            ["edgedrift/_kernels.c"],
            include_dirs=[numpy.get_include()],
            extra_compile_args=flags,
        )
    ],
)
