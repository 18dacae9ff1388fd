"""The reliability suite (issue 7): power-loss crash exploration, mutation check of the checker,
kill -9, corruption corpus, atheris fuzzing and decompression bombs, I/O error injection, bad
input and security, concurrency, and one regression test per core bug the suite found.

Long parts are marked ``slow`` (``EMBEDLOG_QUICK=1`` skips them locally; CI runs everything).
Knobs: ``EMBEDLOG_WORKERS`` (worker processes, default min(2, CPUs)), ``EMBEDLOG_FUZZ_SECONDS``
(per target, default 20), ``EMBEDLOG_KILLS`` (default 200), ``EMBEDLOG_CORRUPTION_TRIALS``
(default 5000), ``EMBEDLOG_TAIL_SECONDS`` (default 12).
"""
