"""What people and dashboards read: the terminal table, per-config summaries, Markdown,
pytest-benchmark and JUnit exports, charts, and the merged report of many runners.

Reads results documents and verdicts; may import every layer below the driver
(:mod:`core`, :mod:`measure`, :mod:`gpu`, :mod:`engines`, :mod:`verdict`).
"""
