"""Build of the optional compiled cores (everything else is in pyproject.toml).

``embedlog.segment._ccodec`` (the codec) and ``embedlog.compaction._ckeymap`` (the cleaner's
key digests and key map) are compiled from C with the machine's compiler when there is one;
``optional=True`` lets the install go on without it (for example with no compiler, or
``CC=false``), and embedlog then runs its pure-Python (numpy) reference code.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "embedlog.segment._ccodec",
            sources=["src/embedlog/segment/_ccodec.c"],
            extra_compile_args=["-O2", "-std=c99"],
            optional=True,
        ),
        Extension(
            "embedlog.compaction._ckeymap",
            sources=["src/embedlog/compaction/_ckeymap.c"],
            extra_compile_args=["-O2", "-std=c99"],
            optional=True,
        ),
    ]
)
