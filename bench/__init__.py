"""pgkb's benchmarks: one tool, ``python -m bench <scenario> [options]`` (``python -m bench list``).

The scenarios and the module each runs are in :mod:`bench.scenarios`; ``bench/README.md``
documents them with the commands behind the figures the docs cite."""
