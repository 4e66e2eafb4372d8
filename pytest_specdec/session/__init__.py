"""Running a suite: resolve configs, boot one engine per config, warm up, measure, sweep
concurrency, take the lossless reference and judge — orchestrated by ``runner.Runner``,
whose steps live in ``boot`` (start or attach to a server), ``measurement`` (one request, one
run, warmup), ``sweep`` and ``reference``; ``options`` holds what a run is asked to do.

Knows nothing of pytest; both faces (the plugin and the CLI) drive it. May import every
layer below it.
"""
