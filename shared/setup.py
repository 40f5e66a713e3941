"""The compiled kernels of the edge loop (edgedrift._kernels, see edgedrift.kernels); everything else is in
pyproject.toml. Built from source at install time, as liblinear-official is, so that a deployed edge and
the evaluator run the same arithmetic: an install without a C compiler fails here rather than running
the numpy reference code, which rounds differently."""

import sys

import numpy
from setuptools import Extension, setup

# No contraction into fused multiply-adds: the kernels round like the numpy expressions they replace.
flags = [] if sys.platform == "win32" else ["-O2", "-ffp-contract=off"]

setup(
    ext_modules=[
        Extension(
            "edgedrift._kernels",
            ["edgedrift/_kernels.c"],
            include_dirs=[numpy.get_include()],
            extra_compile_args=flags,
        )
    ]
)
