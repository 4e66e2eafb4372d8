"""Repository-level pytest setup.

The plugin itself is loaded through its ``pytest11`` entry point (``pip install -e .``); this
file only keeps pytest away from folders that hold no tests.
"""

collect_ignore = ["bench", "results", "docs", "scripts", "build"]
