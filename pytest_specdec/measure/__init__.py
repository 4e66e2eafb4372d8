"""Measuring one engine over HTTP: the streaming client (and its HTTP/1.1 fast path), the
greedy-output comparison behind the lossless check, the roofline share of a decode rate and
the statistics of a concurrency level (``levels``).

May import :mod:`pytest_specdec.core` only.
"""
