"""What ``specdec init`` writes, as text: the suite's test files, a suite file for one engine
and its models, ``conftest.py``, ``baselines/``, ``SPECDEC.md``. The workflows come from
:mod:`pytest_specdec.cli.workflows`.

The test files import the built-in suite's tests (``pytest_specdec/suites/test_*.py``), so a
repository runs the tests of the pytest-specdec it installed, and this repository's
``suites/test_*.py`` are the same files (tests/test_init.py compares them).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources

from pytest_specdec import __version__
from pytest_specdec.core.configs import ConfigError, preset_configs

ENGINES = ("llamacpp", "sglang", "vllm")
# The nightly set per engine, before the configs whose draft model is not given are left out:
# presets a released engine runs (SGLang's ddtree-* need a build with DDTree).
NIGHTLY = {
    "llamacpp": ("baseline", "ngram", "draft-d16"),
    "sglang": ("baseline", "ngram", "standalone-d16", "dflash-b16", "eagle3"),
    "vllm": ("baseline", "ngram", "dflash-b16", "eagle3"),
}
ROLE = re.compile(r"[A-Za-z0-9_-]+")


@dataclass(frozen=True)
class Layout:
    """What the user asked ``specdec init`` for."""

    engine: str = "llamacpp"
    model: str | None = None
    drafts: Mapping[str, str] = field(default_factory=dict)  # role -> path or hub id
    runner_labels: tuple[str, ...] = ("self-hosted", "linux", "gpu")
    configs: tuple[str, ...] = ()  # the nightly set; empty: nightly_configs()
    version: str = __version__

    def nightly_configs(self) -> tuple[str, ...]:
        """The given configs, else the engine's nightly presets whose draft role is given."""
        if self.configs:
            return self.configs
        roles = draft_roles(self.engine)
        return tuple(
            name for name in NIGHTLY[self.engine]
            if not any(name in users for role, users in roles.items() if role not in self.drafts)
        )  # fmt: skip


def draft_roles(engine: str) -> dict[str, list[str]]:
    """The draft-model roles the engine's presets use, each with the presets that use it."""
    roles: dict[str, list[str]] = {}
    for cfg in preset_configs():
        if cfg.engine == engine and cfg.draft:
            roles.setdefault(cfg.draft, []).append(cfg.name)
    return roles


def check_configs(engine: str, names: Sequence[str]) -> None:
    """The nightly set names presets of the engine (the workflows' matrix)."""
    known = sorted(c.name for c in preset_configs() if c.engine == engine)
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ConfigError(
            f"--configs {','.join(names)}: {', '.join(unknown)} is no {engine} preset; "
            f"give presets of {engine}: {', '.join(known)}"
        )


def parse_draft(value: str) -> tuple[str, str]:
    """``--draft-model [ROLE=]PATH`` as (role, path); the role defaults to ``draft``."""
    role, sep, path = value.partition("=")
    if sep and not role:
        raise ConfigError(f"--draft-model {value!r}: the role before '=' is empty; give "
                          "ROLE=PATH (e.g. dflash=/models/d) or the path alone")  # fmt: skip
    if not sep or "/" in role or not ROLE.fullmatch(role):
        role, path = "draft", value
    if not path:
        raise ConfigError(f"--draft-model {value!r}: give [ROLE=]PATH, e.g. dflash=/models/d")
    return role, path


def suite_tests() -> dict[str, str]:
    """``suites/test_*.py``: one file per test module of the built-in suite, importing it."""
    folder = resources.files("pytest_specdec") / "suites"
    names = sorted(p.name for p in folder.iterdir() if re.fullmatch(r"test_\w+\.py", p.name))
    return {f"suites/{name}": test_file(name.removesuffix(".py")) for name in names}


def test_file(module: str) -> str:
    return f'''"""The tests of pytest_specdec/suites/{module}.py, from the installed pytest-specdec.

`pytest suites` runs them from this folder (`pytest --pyargs pytest_specdec.suites` runs the
same tests without it), so they follow the installed version; its docstring says what they
measure. Tests of your own go beside this file. Written by `specdec init`.
"""

from pytest_specdec.suites.{module} import *  # noqa: F403
'''


def toml_string(value: str) -> str:
    """A TOML basic string (JSON's escapes are TOML's)."""
    return json.dumps(value, ensure_ascii=False)


ENGINE_TABLES = {
    "llamacpp": (
        '# binary = "/path/to/llama-server"  # else $SPECDEC_LLAMA_SERVER, then PATH, then\n'
        "#                                   # the cache of pytest-specdec's ./scripts/setup\n"
        "# One slot and a 4k context: one request at a time, as the suite measures.\n"
        'extra_args = ["-np", "1", "-c", "4096"]\n'
        "startup_timeout_s = 120\n"
    ),
    "sglang": (
        '# python = "/opt/sglang/bin/python"  # an interpreter that imports sglang; else\n'
        "#                                    # $SPECDEC_SGLANG_PYTHON, then pytest's own\n"
        '# api = "native"                     # /generate: accept length per request\n'
        'extra_args = ["--mem-fraction-static", "0.8"]\n'
        "startup_timeout_s = 900\n"
    ),
    "vllm": (
        '# binary = "/opt/vllm/bin/vllm"  # else `vllm` on PATH\n'
        "extra_args = []\n"
        "startup_timeout_s = 900\n"
    ),
}
EXAMPLE_MODEL = {"llamacpp": "/path/to/target.gguf", "sglang": "org/target", "vllm": "org/target"}


def suite_file(layout: Layout) -> str:
    engine = layout.engine
    roles = draft_roles(engine)
    models = [f"[models.{engine}]"]
    if layout.model:
        models.append(f"target = {toml_string(layout.model)}")
    else:
        models.append(
            f"# target = {toml_string(EXAMPLE_MODEL[engine])}  # or pass --specdec-model PATH"
        )
    if layout.drafts:
        inner = ", ".join(f"{r} = {toml_string(p)}" for r, p in sorted(layout.drafts.items()))
        models.append(f"drafts = {{ {inner} }}")
    for role, users in sorted(roles.items()):
        if role not in layout.drafts:
            example = EXAMPLE_MODEL[engine].replace("target", role)
            models.append(
                f"# drafts = {{ {role} = {toml_string(example)} }}  # for {', '.join(users)}"
            )
    return f"""\
# The suite file of `pytest suites` (written by `specdec init`, pytest-specdec {layout.version}):
# the default engine and workload, the models, the engine's settings and configs of your own.
# Every --specdec-* option overrides it; `specdec configs list` lists the presets and the
# configs it adds. SPECDEC.md says how to run the suite.

[suite]
engine = {toml_string(engine)}  # the default of --specdec-engine
workload = "seed"  # the built-in prompts; or a JSONL file of {{"id": ..., "prompt": ...}} lines
# score = "decode"  # judge each request's decode tok/s (1 / TPOT) instead of its output tok/s
# ignore_eos = true  # every request decodes --specdec-max-tokens tokens
# concurrency = [1, 8, 32]  # load levels of suites/test_concurrency.py

# The target model and the draft models by role (a config's `draft = "ROLE"` picks one): a
# path (~ and $VARIABLES expand; a relative path is relative to this file) or a hub id.
{chr(10).join(models)}

[engines.{engine}]
{ENGINE_TABLES[engine]}
# A config of your own beside the presets (`specdec configs show NAME` prints a preset):
# [configs.my-config]
# engine = {toml_string(engine)}
# description = "What it speculates with."
# draft = "draft"  # the role of its draft model, if it has one
# args = ["--flag", "value"]  # the engine's flags that turn speculation on
"""


CONFTEST = '''"""pytest setup of this repository. pytest-specdec loads itself (its pytest11 entry
point); its hooks go here, e.g. (docs: pytest_specdec/hookspec.py):

    def pytest_specdec_hardware(config):
        return {"rack": "r7"}  # recorded with the results, part of every baseline key

    def pytest_specdec_engines():
        return {"inhouse": InHouseEngine}  # an engine adapter of your own
"""
'''

ENGINE_HOWTO = {
    "llamacpp": (
        "llama.cpp's `llama-server` is found on PATH, or\nwhere `$SPECDEC_LLAMA_SERVER` "
        "or `binary` in `[engines.llamacpp]` of the suite file\nnames it (pytest-specdec's "
        "repository builds a CPU one: `./scripts/setup --engine`)."
    ),
    "sglang": (
        "SGLang is imported by pytest's Python, or\nby the interpreter that "
        "`$SPECDEC_SGLANG_PYTHON` or `python` in `[engines.sglang]`\nnames."
    ),
    "vllm": "vLLM is the `vllm` command on PATH, or\nthe one `binary` in `[engines.vllm]` names.",
}


def readme(layout: Layout) -> str:
    """SPECDEC.md: how this repository runs the suite (the user's README is theirs)."""
    configs = ",".join(layout.nightly_configs())
    labels = json.dumps(list(layout.runner_labels))
    return f"""\
# Speculative decoding benchmarks (pytest-specdec)

Written by `specdec init` (pytest-specdec {layout.version}). The layout is pytest-specdec's own:

| path | what |
|---|---|
| `suites/test_*.py` | the suite's tests, imported from the installed pytest-specdec |
| `suites/specdec.toml` | the suite file: engine `{layout.engine}`, its models and settings |
| `conftest.py` | pytest setup; pytest-specdec's hooks go here |
| `baselines/` | stored baselines, one JSON file per hardware, engine, model and config |
| `.github/workflows/nightly-gpu.yml` | every night, each config against its baseline on a GPU \
runner; then one merged report and the dashboard |
| `.github/workflows/update-baselines.yml` | on request: measure, then a pull request with \
the new baselines |

The engine is not a Python dependency of pytest-specdec. {ENGINE_HOWTO[layout.engine]}
`specdec doctor` says what it finds.

```bash
pip install "pytest-specdec=={layout.version}"
# store baselines, then judge against them; `specdec configs list` lists the configs
pytest suites --spec-config {configs} --specdec-update-baselines
pytest suites --spec-config {configs}
```

Results go to `results/latest.json` (keep `results/` out of git); baselines go to
`baselines/`, to be committed. The workflows install pytest-specdec {layout.version} and run
on the runner labels {labels}, or those of the repository variable
`SPECDEC_GPU_RUNNER_LABELS`; the first lines of each say which variables it reads. Every
action is pinned to a commit, and each job's token holds only what that job needs.
"""
