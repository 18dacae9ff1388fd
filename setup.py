"""Build of the optional compiled cores (everything else is in pyproject.toml).

``embedlog.segment._ccodec`` (the codec), ``embedlog.compaction._ckeymap`` (the cleaner's
key digests and key map) and ``embedlog._clane`` (the producer's fast lane) are compiled from C
with the machine's compiler when there is one;
``optional=True`` lets the install go on without it (for example with no compiler, or
``CC=false``), and embedlog then runs its pure-Python (numpy) reference code.

The codec is one module built from the C files of ``src/embedlog/segment/_ccodec_src/``
(one part each, listed in its ``ccodec.h``); that header is in ``depends``, so an edit to it
rebuilds the module, and setuptools puts it in the sdist with the sources. The key map is
``_ckeymap.c``, which includes the cleaner's record walks (``_cclean.h``) and the codec's
one-pass record reader (``ccodec.h``): both are in its ``depends``.
"""

import glob
import os

from setuptools import Extension, setup

CODEC = "src/embedlog/segment/_ccodec_src"
# every C file of the folder is one part of the module (relative paths, as setuptools wants)
CODEC_PARTS = sorted(glob.glob(os.path.join(CODEC, "*.c")))

setup(
    ext_modules=[
        Extension(
            "embedlog.segment._ccodec",
            sources=CODEC_PARTS,
            depends=[f"{CODEC}/ccodec.h"],
            extra_compile_args=["-O2", "-std=c99"],
            optional=True,
        ),
        Extension(
            "embedlog.compaction._ckeymap",
            sources=["src/embedlog/compaction/_ckeymap.c"],
            depends=["src/embedlog/compaction/_cclean.h", f"{CODEC}/ccodec.h"],
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
