"""Build of the optional compiled codec core (everything else is in pyproject.toml).

``embedlog.segment._ccodec`` is compiled from C with the machine's compiler when there is one;
``optional=True`` lets the install go on without it (for example with no compiler, or
``CC=false``), and embedlog then runs its pure-Python codec.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "embedlog.segment._ccodec",
            sources=["src/embedlog/segment/_ccodec.c"],
            extra_compile_args=["-O2", "-std=c99"],
            optional=True,
        )
    ]
)
