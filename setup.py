"""Build of the optional compiled cores (everything else is in pyproject.toml).

``embedlog.segment._ccodec`` (the codec), ``embedlog.compaction._ckeymap`` (the cleaner's
key digests and key map) and ``embedlog._clane`` (the producer's fast lane) are compiled from C
with the machine's compiler when there is one;
``optional=True`` lets the install go on without it (for example with no compiler, or
``CC=false``), and embedlog then runs its pure-Python (numpy) reference code.

The codec is one module built from the C files of ``src/embedlog/segment/_ccodec_src/``
(one part each, listed in its ``ccodec.h``); that header is in ``depends``, so an edit to it
rebuilds the module, and setuptools puts it in the sdist with the sources.
"""

from setuptools import Extension, setup

CODEC = "src/embedlog/segment/_ccodec_src"
CODEC_PARTS = ["decode", "records", "encode", "arrow_sink", "scans", "module"]

setup(
    ext_modules=[
        Extension(
            "embedlog.segment._ccodec",
            sources=[f"{CODEC}/{part}.c" for part in CODEC_PARTS],
            depends=[f"{CODEC}/ccodec.h"],
            extra_compile_args=["-O2", "-std=c99"],
            optional=True,
        ),
        Extension(
            "embedlog.compaction._ckeymap",
            sources=["src/embedlog/compaction/_ckeymap.c"],
            extra_compile_args=["-O2", "-std=c99"],
            optional=True,
        ),
        Extension(
            "embedlog._clane",
            sources=["src/embedlog/_clane.c"],
            extra_compile_args=["-O2", "-std=c99"],
            optional=True,
        ),
    ]
)
