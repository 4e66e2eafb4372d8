"""Running a suite: resolve configs, boot one engine per config, warm up, measure, sweep
concurrency, take the lossless reference and judge — orchestrated by ``runner.Runner``. Its
steps live in ``boot`` (start or attach to a server), ``steps`` (warm up, one run, a prompt's
runs, stop, the results document), ``sweep`` and ``reference``; ``options`` holds what a run
is asked to do. Order of import, top to bottom: runner, sweep | reference, steps, boot,
options.

Knows nothing of pytest; both faces (the plugin and the CLI) drive it. May import every
layer below it.
"""
