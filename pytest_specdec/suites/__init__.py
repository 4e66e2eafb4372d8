"""The built-in suite: the test files users run, and its suite file (``specdec.toml``).

``pytest --pyargs pytest_specdec.suites`` runs it from an installed package, in any folder;
``pytest suites`` runs it from a repository laid out by ``specdec init`` (this repository's is
one), whose ``suites/test_*.py`` import these tests. The one copy of the suite's test code.

May import every layer of the package (it is the top layer); nothing in the package imports it.
"""
