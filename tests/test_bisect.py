"""``specdec bisect``: the candidates file, the search, resume, errors (unit, with a measurer
whose sessions are drawn from a noise model and judged by the real verdict engine)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from pytest_specdec.bisect.candidates import BisectError, Candidate, endpoints, load_candidates
from pytest_specdec.bisect.run import FOUND, NONE, UNDECIDED, Search, bisect
from pytest_specdec.bisect.search import BAD, GOOD, SKIP, bounds, next_index, suspects
from pytest_specdec.bisect.statefile import load_steps, save_steps
from pytest_specdec.bisect.step import NOT_PLACED, BootFailed, StepRecord, looks_for, step_plan
from pytest_specdec.cli.main import main
from pytest_specdec.verdict.judge import Judgement, judge_reference
from pytest_specdec.verdict.sessions import suite_session_logs
from pytest_specdec.verdict.stats import VerdictPolicy


class Noisy:
    """Sessions of log speed ``speeds[i]`` + N(0, 2%) session effect + N(0, 2%) per run."""

    def __init__(self, speeds: Sequence[float], seed: int = 1, dead: Sequence[int] = ()):
        self.speeds, self.rng, self.dead = speeds, np.random.default_rng(seed), set(dead)
        self.configs: dict[str, dict[str, object]] = {}
        self.started: list[int] = []

    def start_step(self, index: int, names: Sequence[str]) -> None:
        self.started.append(index)
        self.configs = {n: {"name": n, "runs": []} for n in names}

    def session(self, name: str) -> float:
        if int(name[1:]) in self.dead:
            raise BootFailed(f"engine exited with code 1\n--- engine log (tail) ---\n{name}: bad")
        runs: list[dict[str, object]] = self.configs[name]["runs"]  # type: ignore[assignment]
        effect = self.rng.normal(0, 0.02)
        for x in self.speeds[int(name[1:])] + effect + self.rng.normal(0, 0.02, 3):
            runs.append({"phase": "measure", "prompt": "p", "session": 1 + len(runs) // 3,
                         "tok_per_s": 100 * math.exp(x)})  # fmt: skip
        return 2.0

    def judge(self, name: str, good: str, policy: VerdictPolicy) -> Judgement:
        doc = {"workload": {"prompts": ["p"]}}
        return judge_reference(doc, self.configs[name], self.configs[good], policy)

    def session_logs(self, name: str) -> list[float]:
        return suite_session_logs(self.configs[name], ["p"])

    def end_step(self) -> None:
        self.configs = {}


def cands(n: int) -> list[Candidate]:
    return [Candidate(f"c{i}", i, server="/bin/true") for i in range(n)]


def speeds(n: int, first_bad: int | None, drop: float = 0.4) -> list[float]:
    return [math.log1p(-drop) if first_bad is not None and i >= first_bad else 0.0
            for i in range(n)]  # fmt: skip


PLAN = step_plan(VerdictPolicy(min_delta=0.1), 6)


def test_names_the_first_bad_candidate() -> None:
    for first in (1, 4, 7):
        steps: list[StepRecord] = []
        done = bisect(Search(cands(8), 0, 7), Noisy(speeds(8, first)), PLAN, steps, lambda s: None)
        assert done.status == FOUND and done.first_bad == f"c{first}", done.reason
        assert done.verdict is not None and done.verdict["ratio"] < 0.7
        assert len(steps) <= 4  # log2(8) + at most one confirming step


def test_no_slow_candidate_says_none() -> None:
    steps: list[StepRecord] = []
    done = bisect(Search(cands(8), 0, 7), Noisy(speeds(8, None)), PLAN, steps, lambda s: None)
    assert done.status == NONE and done.first_bad is None
    assert len(steps) == 1 and "does not regress" in done.reason


def test_a_candidate_that_does_not_boot_is_skipped_and_a_neighbour_tried() -> None:
    steps: list[StepRecord] = []
    m = Noisy(speeds(8, 5), dead=[3])
    done = bisect(Search(cands(8), 0, 7), m, PLAN, steps, lambda s: None)
    assert done.first_bad == "c5"
    skipped = [c for s in steps for c in s.checks if c.mark == SKIP and c.role == "candidate"]
    assert [c.name for c in skipped] == ["c3"] and "c3: bad" in str(skipped[0].detail)


def test_a_candidate_between_the_two_sides_is_retried_once_then_named_a_suspect() -> None:
    """c3 runs at the speed halfway along the step (two changes, not one): it is unlike
    either side, so it is not placed, not even by its two-point error at the last look; it
    gets one more step once nothing else is left, and then it is a suspect."""
    sp = speeds(8, 4)
    sp[3] = math.log1p(-0.4) / 2
    steps: list[StepRecord] = []
    done = bisect(Search(cands(8), 0, 7), Noisy(sp), PLAN, steps, lambda s: None)
    tried = [s.check("candidate") for s in steps]
    c3 = [c for c in tried if c is not None and c.name == "c3"]
    assert [c.outcome for c in c3] == [NOT_PLACED, NOT_PLACED]
    where = c3[0].verdict["placement"]  # type: ignore[index]
    assert 0.3 < where["position"] < 0.7 and where["off_p"] < 0.01 and not where["by_nearest"]
    assert done.status == UNDECIDED and done.suspects == ["c3", "c4"], done.reason


def test_the_bad_endpoint_is_judged_fine_only_at_the_per_look_alpha() -> None:
    plan = step_plan(VerdictPolicy(min_delta=0.025), 32)
    assert plan.endpoint_policy.alpha == plan.policy.alpha < 0.003
    assert plan.endpoint_policy.ci_level == pytest.approx(1 - 2 * plan.policy.alpha)
    assert plan.policy.ci_level == 0.90  # the candidate's CI, as reported, is the usual one


def test_an_interrupted_bisect_resumes_with_the_same_answer(tmp_path: Path) -> None:
    state = tmp_path / "state.json"
    fingerprint = {"candidates": 8}

    class Killed(Exception):
        pass

    def save(steps: list[StepRecord]) -> None:
        save_steps(state, fingerprint, steps, "CPU")
        if len(steps) == 1:
            raise Killed

    with pytest.raises(Killed):
        bisect(Search(cands(8), 0, 7), Noisy(speeds(8, 6)), PLAN, [], save)
    kept = load_steps(state, fingerprint)
    assert len(kept) == 1
    m = Noisy(speeds(8, 6), seed=2)
    done = bisect(Search(cands(8), 0, 7), m, PLAN, kept, save)
    assert done.first_bad == "c6" and m.started[0] == 2  # step 1 was not measured again
    with pytest.raises(BisectError, match="belongs to another bisect"):
        load_steps(state, {"candidates": 9})


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("[]", "a JSON list, not an object"),
        ('"hello"', "a JSON str, not an object"),
        ('{"schema": 1, "fingerprint": ["a"], "steps": []}', "'fingerprint' is a list"),
        ('{"schema": 1, "fingerprint": {}, "steps": "s"}', "'steps' must be a list of objects"),
        ('{"schema": 1, "fingerprint": {}, "steps": [1]}', "'steps' must be a list of objects"),
    ],
)
def test_a_state_file_of_another_shape_is_named_with_the_fix(
    tmp_path: Path, text: str, problem: str
) -> None:
    state = tmp_path / "state.json"
    state.write_text(text)
    with pytest.raises(BisectError, match="remove it to start the bisect afresh") as info:
        load_steps(state, {"candidates": 8})
    assert str(state) in str(info.value) and problem in str(info.value)


def test_search_picks_the_middle_then_its_neighbour() -> None:
    assert next_index(bounds(0, 8, {})) == 4
    assert next_index(bounds(0, 8, {4: SKIP})) == 3
    b = bounds(0, 8, {4: BAD, 1: GOOD, 2: SKIP, 3: SKIP})
    assert next_index(b) is None and suspects(b) == [2, 3, 4]
    assert looks_for(8) == (2, 3, 4, 6, 8) and looks_for(2) == (2,)
    with pytest.raises(BisectError, match="--max-sessions 1"):
        looks_for(1)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "no candidates \\(the file is empty\\)"),
        ('[[candidate]]\nname = "a"\nserver = "/x"\n', "only one candidate \\(a\\)"),
        ('[[candidate]]\nname = "a"\nserver = "/x"\n[[candidate]]\nname = "b"\n',
         "candidate #2 \\(b\\): no server: give server = "),
        ('[[candidate]]\nname = "a"\nserver = "/x"\n[[candidate]]\nname = "a"\nserver = "/y"\n',
         "both named 'a'"),
        ('[[candidate]]\nname = "a b"\nserver = "/x"\n', "name = 'a b'"),
        ('[[candidate]]\nname = "a"\nserver = "/x"\nargs = "-t 1"\n', "args = '-t 1' must be"),
    ],
)  # fmt: skip
def test_bad_candidate_files(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "c.toml"
    path.write_text(text)
    with pytest.raises(BisectError, match=message):
        load_candidates(path)


def test_endpoints() -> None:
    assert endpoints(cands(4), None, None) == (0, 3)
    assert endpoints(cands(4), "c1", "c2") == (1, 2)
    with pytest.raises(BisectError, match="--good 'x' is not a candidate; choose one of c0"):
        endpoints(cands(4), "x", None)
    with pytest.raises(BisectError, match="must come before --bad c1"):
        endpoints(cands(4), "c2", "c1")


def test_cli_errors_name_the_value_and_the_fix(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    empty = tmp_path / "empty.toml"
    empty.write_text("")
    args = ["bisect", "--spec-config", "baseline", "--out-dir", str(tmp_path / "o")]
    assert main([*args, "--candidates", str(empty)]) == 2
    err = capsys.readouterr().err
    assert "specdec bisect: error:" in err and "add one [[candidate]] table" in err
    refs = tmp_path / "refs.toml"
    refs.write_text('[[candidate]]\nname = "a"\nref = "1"\n[[candidate]]\nname = "b"\nref = "2"\n')
    assert main([*args, "--candidates", str(refs)]) == 2
    assert "pass --build-cmd CMD" in capsys.readouterr().err
