"""The tests of pytest_specdec/suites/test_throughput.py, from the installed pytest-specdec.

`pytest suites` runs them from this folder (`pytest --pyargs pytest_specdec.suites` runs the
same tests without it), so they follow the installed version; its docstring says what they
measure. Tests of your own go beside this file. Written by `specdec init`.
"""

from pytest_specdec.suites.test_throughput import *  # noqa: F403
