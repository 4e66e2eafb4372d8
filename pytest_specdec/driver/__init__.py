"""The driver: runs a suite. Resolve configs, boot one engine per config, warm up, measure, sweep
concurrency, take the lossless reference and judge — orchestrated by ``runner.Runner``. Its
steps live in ``boot`` (start or attach to a server), ``steps`` (warm up, one run, a prompt's
runs, stop, the results document), ``sweep`` and ``reference``; ``settings`` holds what a run
is asked to do (:class:`settings.RunSettings`). Order of import, top to bottom: runner,
sweep | reference, steps, boot, settings.

Knows nothing of pytest; both faces (the plugin and the CLI) drive it. May import every
layer below it.
"""
