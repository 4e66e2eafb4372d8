"""The baseline store and the judge on synthetic results documents (no engine)."""

from __future__ import annotations

import hashlib
import json
import math
import os
import random
import threading
from pathlib import Path
from typing import Any

import pytest

from pytest_specdec.verdict.baselines import (
    BaselineError,
    append_session,
    baseline_path,
    key_for,
    key_mismatch,
    load_baseline,
)
from pytest_specdec.verdict.gate import adjust, failures, not_gating
from pytest_specdec.verdict.judge import MISMATCH, NO_BASELINE, judge_baseline, judge_reference
from pytest_specdec.verdict.machines import machine_history, machine_note, machine_of
from pytest_specdec.verdict.sessions import empty_prompts, prompt_runs, update_baseline, with_score
from pytest_specdec.verdict.stats import Outcome, VerdictPolicy

PROMPTS = ["code", "prose"]
POLICY = VerdictPolicy()


def results_doc(
    speeds: dict[str, dict[str, float]], *, sessions: int = 1, runs: int = 5, seed: int = 0,
    noise: float = 0.01, config_sha: str = "abc", started: str = "2026-11-29T00:00:00+00:00",
) -> dict[str, Any]:  # fmt: skip
    """A results document with ``runs`` runs per prompt per session around given tok/s."""
    rng = random.Random(seed)
    configs = []
    for name, per_prompt in speeds.items():
        run_list = []
        for session in range(1, sessions + 1):
            shift = math.exp(rng.gauss(0, noise))
            for prompt, tps in per_prompt.items():
                for i in range(runs):
                    value = tps * shift * math.exp(rng.gauss(0, noise))
                    run_list.append(
                        {"config": name, "prompt": prompt, "run": i, "phase": "measure",
                         "session": session,
                         "error": None, "tok_per_s": value, "accept_length": 2.0}
                    )  # fmt: skip
        configs.append(
            {"name": name, "engine": "llamacpp", "engine_version": "v1",
             "config": {"sha256": config_sha},
             "models": {"target": {"id": "m.gguf", "sha256": "f00"}},
             "runs": run_list, "extra": {"engine_args": ["-t", "2"]}}
        )  # fmt: skip
    return {
        "started_at": started, "host": {"cpu_model": "Test CPU", "cpu_count": 2}, "gpu": None,
        "options": {"max_tokens": 64}, "workload": {"sha256": "w1", "prompts": PROMPTS},
        "configs": configs,
    }  # fmt: skip


def test_no_baseline_says_how_to_make_one(tmp_path: Path) -> None:
    doc = results_doc({"base": {"code": 100, "prose": 80}})
    judgement = judge_baseline(doc, doc["configs"][0], tmp_path, POLICY)
    assert judgement.status == NO_BASELINE
    assert "run with --specdec-update-baselines" in judgement.message
    assert judgement.suite is None and judgement.outcome == "NO-BASELINE"


def test_history_then_regression_then_unchanged(tmp_path: Path) -> None:
    for night in range(6):
        doc = results_doc({"base": {"code": 100, "prose": 80}}, seed=night, started=f"n{night}")
        line = update_baseline(doc, doc["configs"][0], tmp_path)
        assert f"{night} → {night + 1} sessions" in line
    same = results_doc({"base": {"code": 100, "prose": 80}}, seed=99, started="n99")
    judged = judge_baseline(same, same["configs"][0], tmp_path, POLICY)
    assert judged.suite is not None and judged.suite.method == "prediction-interval"
    assert judged.suite.outcome in (Outcome.UNCHANGED, Outcome.INCONCLUSIVE)
    slow = results_doc({"base": {"code": 80, "prose": 64}}, seed=98, started="n98")
    judged = judge_baseline(slow, slow["configs"][0], tmp_path, POLICY)
    assert judged.suite is not None and judged.suite.outcome is Outcome.REGRESSED
    assert 0.78 < judged.suite.ratio < 0.82
    assert failures([judged], ["regressed"]) == [f"base: {judged.message}"]
    # The same accept lengths, 20% slower: the message names the kernel side as the cause.
    assert judged.message.startswith(judged.suite.explanation)
    assert judged.cause == "kernel" and "cause: kernel side" in judged.message
    # Six sessions: a final verdict, so it gates whatever --specdec-provisional says.
    assert not judged.suite.provisional and failures([judged], ["regressed"], False)
    assert not_gating([judged], ["regressed"]) == []
    assert judged.accept["code"]["change"] == pytest.approx(0.0)


def test_provisional_regression_gates_by_default_and_can_be_reported_only(
    tmp_path: Path,
) -> None:
    doc = results_doc({"base": {"code": 100, "prose": 80}}, seed=1, started="n1")
    update_baseline(doc, doc["configs"][0], tmp_path)  # one session: provisional verdicts
    slow = results_doc({"base": {"code": 80, "prose": 64}}, seed=2, started="n2")
    judged = judge_baseline(slow, slow["configs"][0], tmp_path, POLICY)
    assert judged.suite is not None and judged.suite.provisional
    assert judged.suite.outcome is Outcome.REGRESSED
    assert failures([judged], ["regressed"]) == [f"base: {judged.message}"]
    assert failures([judged], ["regressed"], provisional_gates=False) == []
    assert not_gating([judged], ["regressed"]) == [
        f"base: {judged.message} — reported, not gating (--specdec-provisional report)"
    ]


def test_sessions_are_appended_one_entry_each(tmp_path: Path) -> None:
    doc = results_doc({"base": {"code": 100, "prose": 80}}, sessions=3)
    update_baseline(doc, doc["configs"][0], tmp_path)
    stored = load_baseline(baseline_path(tmp_path, key_for(doc, doc["configs"][0])))
    assert stored is not None and [s["session"] for s in stored.sessions] == [1, 2, 3]
    update_baseline(doc, doc["configs"][0], tmp_path)  # the same sessions again: no duplicates
    assert len(load_baseline(stored.path).sessions) == 3  # type: ignore[union-attr]


def test_an_updated_baseline_keeps_its_permissions_and_a_new_one_follows_the_umask(
    tmp_path: Path,
) -> None:
    """The store writes a temp file and renames it over the baseline: the file must not come
    out private (mkstemp's 0600) where a team's runners and people share the folder."""
    doc = results_doc({"base": {"code": 100, "prose": 80}})
    old = os.umask(0o027)
    try:
        update_baseline(doc, doc["configs"][0], tmp_path)
    finally:
        os.umask(old)
    path = baseline_path(tmp_path, key_for(doc, doc["configs"][0]))
    assert path.stat().st_mode & 0o777 == 0o640
    path.chmod(0o664)
    night = results_doc({"base": {"code": 100, "prose": 80}}, started="2026-11-30T00:00:00+00:00")
    update_baseline(night, night["configs"][0], tmp_path)
    assert path.stat().st_mode & 0o777 == 0o664
    assert len(load_baseline(path).sessions) == 2  # type: ignore[union-attr]


def test_key_mismatch_is_refused_naming_fields(tmp_path: Path) -> None:
    doc = results_doc({"base": {"code": 100, "prose": 80}})
    update_baseline(doc, doc["configs"][0], tmp_path)
    other = results_doc({"base": {"code": 100, "prose": 80}}, config_sha="changed")
    judged = judge_baseline(other, other["configs"][0], tmp_path, POLICY)
    assert judged.status == MISMATCH
    assert "config_sha256: 'abc' → 'changed'" in judged.message
    assert "--specdec-allow-mismatch" in judged.message
    forced = judge_baseline(other, other["configs"][0], tmp_path, POLICY, allow_mismatch=True)
    assert forced.suite is not None and any("FORCED" in n for n in forced.notes)
    with pytest.raises(BaselineError, match="has another key"):
        update_baseline(other, other["configs"][0], tmp_path)


def test_how_the_requests_were_made_is_part_of_the_key(tmp_path: Path) -> None:
    """Decoding past the answer's end, or prompts rendered by the harness, measure something
    else than the stored sessions did: a mismatch naming it. The defaults add nothing to the
    key, so baselines stored before these choices existed still match."""
    doc = results_doc({"base": {"code": 100, "prose": 80}})
    assert key_for(doc, doc["configs"][0])["protocol"] is None
    update_baseline(doc, doc["configs"][0], tmp_path)
    rendered = results_doc({"base": {"code": 100, "prose": 80}})
    rendered["options"]["ignore_eos"] = True
    rendered["configs"][0]["extra"]["prompt_rendering"] = {"kind": "chat-template", "how": "t"}
    key = key_for(rendered, rendered["configs"][0])
    assert key["protocol"] == {"ignore_eos": True, "prompt_rendering": "chat-template"}
    judged = judge_baseline(rendered, rendered["configs"][0], tmp_path, POLICY)
    assert judged.status == MISMATCH
    assert "protocol: None → {'ignore_eos': True, 'prompt_rendering': 'chat-template'}" in (
        judged.message
    )
    chat = results_doc({"base": {"code": 100, "prose": 80}})
    chat["configs"][0]["extra"]["prompt_rendering"] = {"kind": "chat-endpoint", "how": "c"}
    assert judge_baseline(chat, chat["configs"][0], tmp_path, POLICY).status != MISMATCH


def test_a_decode_score_reads_tpot_and_keys_its_baseline_apart(tmp_path: Path) -> None:
    """Judged on decode tok/s, a run counts as 1 / TPOT (a one-token output has none and is
    left out, named); the score joins the key, so e2e and decode sessions never mix."""
    doc = results_doc({"base": {"code": 100, "prose": 80}}, runs=2)
    runs = doc["configs"][0]["runs"]
    for run, tpot in zip(runs, (0.01, 0.02, None, 0.025), strict=True):
        run["tpot_s"] = tpot
    assert prompt_runs(doc["configs"][0], PROMPTS, score="decode") == {
        "code": [pytest.approx(100.0), pytest.approx(50.0)],
        "prose": [pytest.approx(40.0)],
    }
    one_token = {"code": [], "prose": [40.0]}
    assert "with a TPOT (two output tokens or more) for code" in str(
        empty_prompts(one_token, "decode")
    )
    assert empty_prompts(one_token) == "no successful measured runs for code"
    decode = with_score(doc, "decode")
    assert key_for(decode, decode["configs"][0])["protocol"] == {"score": "decode"}
    assert doc["options"].get("score") is None  # a copy: the document itself is untouched
    with pytest.raises(ValueError, match="score 'fast': choose one of e2e, decode"):
        with_score(doc, "fast")
    for run in runs:
        run["tpot_s"] = 0.01
    update_baseline(decode, decode["configs"][0], tmp_path)
    judged = judge_baseline(doc, doc["configs"][0], tmp_path, POLICY)
    assert judged.status == MISMATCH and "protocol: {'score': 'decode'} → None" in judged.message


def test_engine_version_is_tracked_not_refused(tmp_path: Path) -> None:
    doc = results_doc({"base": {"code": 100, "prose": 80}})
    update_baseline(doc, doc["configs"][0], tmp_path)
    doc["configs"][0]["engine_version"] = "v2"
    judged = judge_baseline(doc, doc["configs"][0], tmp_path, POLICY)
    assert judged.status != MISMATCH and "engine version v1 → v2" in judged.notes


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", "is not valid JSON"),
        ('{"schema": 99, "key": {}, "sessions": []}',
         r"schema 99 is not 1 \(left untouched\): written by a newer pytest-specdec: upgrade it$"),
        ('{"schema": 0, "key": {}, "sessions": []}',
         "schema 0 is not 1 .*: move the file aside to start a new history$"),
        ('{"schema": 1, "key": {}, "sessions": [{"prompts": {"a": {"n": 1}}}]}', "lacks mean_log"),
        ("[]", "expected a JSON object"),
        ('{"schema": 1, "key": {}, "sessions": [{"prompts": {}, "suite": {"n": 3, '
         '"mean_log": 4.6}}]}', r"sessions\[0\]\.suite lacks sd_log, runs .*restore the file"),
        ('{"schema": 1, "key": {}, "sessions": [{"prompts": {}, "suite": "4.6"}]}',
         r"sessions\[0\]\.suite lacks n, mean_log, sd_log, runs \(got '4\.6'\)"),
        ('{"schema": 1, "key": {}, "sessions": []}'.encode("utf-16"),
         "is not UTF-8 text .*left untouched: restore it"),
    ],
)  # fmt: skip
def test_corrupt_baseline_is_an_error_and_left_untouched(
    tmp_path: Path, content: str | bytes, message: str
) -> None:
    """A damaged baseline (bad JSON, not UTF-8, another schema, a damaged cell) is refused,
    naming the file and how to fix it, and is never overwritten. The advice for another schema
    never sends the file back through the update that refuses it."""
    doc = results_doc({"base": {"code": 100, "prose": 80}})
    path = baseline_path(tmp_path, key_for(doc, doc["configs"][0]))
    path.parent.mkdir(parents=True)
    data = content if isinstance(content, bytes) else content.encode()
    path.write_bytes(data)
    with pytest.raises(BaselineError, match=message) as info:
        judge_baseline(doc, doc["configs"][0], tmp_path, POLICY)
    assert str(path) in str(info.value) and "--specdec-update-baselines" not in str(info.value)
    with pytest.raises(BaselineError):
        update_baseline(doc, doc["configs"][0], tmp_path)
    assert path.read_bytes() == data


def test_sessions_started_in_the_same_second_are_both_kept_and_a_rerun_is_not(
    tmp_path: Path,
) -> None:
    """Two jobs that start the same config in the same second are two sessions: the first keeps
    the id a results file gives again (start, config, session number: what history and the
    dashboard match), the second one with its host and measured values too. Storing either
    results file again keeps one of each."""
    jobs = [results_doc({"base": {"code": 100 * f, "prose": 80 * f}}, seed=i)
            for i, f in enumerate((1.0, 0.8))]  # fmt: skip
    for i, doc in enumerate(jobs):
        doc["host"]["hostname"] = f"runner-{i}"
    lines = [update_baseline(doc, doc["configs"][0], tmp_path) for doc in jobs]
    assert "0 → 1 sessions" in lines[0] and "1 → 2 sessions" in lines[1]
    path = baseline_path(tmp_path, key_for(jobs[0], jobs[0]["configs"][0]))
    stored = json.loads(path.read_text())
    assert [s["host"] for s in stored["sessions"]] == ["runner-0", "runner-1"]
    plain = hashlib.sha256(f"{jobs[0]['started_at']}|base|1".encode()).hexdigest()[:12]
    assert stored["sessions"][0]["id"] == plain != stored["sessions"][1]["id"]
    for doc in jobs:
        assert "2 → 2 sessions" in update_baseline(doc, doc["configs"][0], tmp_path)
    third = results_doc({"base": {"code": 90, "prose": 70}}, seed=7)  # the same plain id
    assert "2 → 3 sessions" in update_baseline(third, third["configs"][0], tmp_path)
    assert "3 → 3 sessions" in update_baseline(third, third["configs"][0], tmp_path)


def test_configs_whose_names_share_a_file_name_are_refused_never_merged(tmp_path: Path) -> None:
    """``draft_d4`` and ``draft.d4`` (or two names of no ASCII letter) share a file name, which
    every stored baseline keeps as it always had. The second config to store is refused,
    naming both, forced or not: one history never holds two configs' sessions."""
    for pair in (("draft_d4", "draft.d4"), ("ドラフト", "草稿")):
        doc = results_doc({n: {"code": 100, "prose": 80} for n in pair})
        first, second = doc["configs"]
        assert "0 → 1 sessions" in update_baseline(doc, first, tmp_path)
        path = baseline_path(tmp_path, key_for(doc, first))
        assert path == baseline_path(tmp_path, key_for(doc, second))
        before = path.read_bytes()
        said = (
            rf"holds config {pair[0]!r}, and config {pair[1]!r} has the same file name .*: rename"
        )
        for forced in (False, True):
            with pytest.raises(BaselineError, match=said):
                update_baseline(doc, second, tmp_path, allow_mismatch=forced)
        assert path.read_bytes() == before
    doc = results_doc({"draft-d16": {"code": 100, "prose": 80}})
    path = baseline_path(tmp_path, key_for(doc, doc["configs"][0]))
    assert path == tmp_path / "cpu-test-cpu-x2" / "llamacpp" / "draft-d16--m-gguf.json"


def test_a_forced_session_keeps_the_files_key_and_records_its_own(tmp_path: Path) -> None:
    """--specdec-allow-mismatch appends a session measured under another key without
    relabelling the history: the file keeps its key, the session records its own key and the
    mismatch, and the next night on the original setup is not refused."""
    doc = results_doc({"base": {"code": 100, "prose": 80}})
    update_baseline(doc, doc["configs"][0], tmp_path)
    path = baseline_path(tmp_path, key_for(doc, doc["configs"][0]))
    original = load_baseline(path).key  # type: ignore[union-attr]
    other = results_doc({"base": {"code": 100, "prose": 80}}, config_sha="changed", seed=1)
    with pytest.raises(BaselineError, match="has another key"):
        update_baseline(other, other["configs"][0], tmp_path)
    update_baseline(other, other["configs"][0], tmp_path, allow_mismatch=True)
    stored = load_baseline(path)
    assert stored is not None and stored.key == original and len(stored.sessions) == 2
    assert stored.sessions[1]["forced"] == {
        "key": key_for(other, other["configs"][0]),
        "mismatch": ["config_sha256: 'abc' → 'changed'"],
    }
    night = results_doc({"base": {"code": 100, "prose": 80}}, seed=2, started="n2")
    assert "2 → 3 sessions" in update_baseline(night, night["configs"][0], tmp_path)


def test_failed_runs_never_enter_a_baseline(tmp_path: Path) -> None:
    doc = results_doc({"base": {"code": 100, "prose": 80}})
    doc["configs"][0]["runs"][0].update(error="HTTP 500", tok_per_s=None)
    with pytest.raises(BaselineError, match="1 failed run"):
        update_baseline(doc, doc["configs"][0], tmp_path)
    assert not list(tmp_path.rglob("*.json"))


def test_concurrent_writers_keep_every_session(tmp_path: Path) -> None:
    doc = results_doc({"base": {"code": 100, "prose": 80}})
    key = key_for(doc, doc["configs"][0])
    path = baseline_path(tmp_path, key)
    errors: list[BaseException] = []

    def add(i: int) -> None:
        try:
            append_session(path, key, {"id": f"s{i}", "prompts": {}})
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=add, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert sorted(s["id"] for s in json.loads(path.read_text())["sessions"]) == sorted(
        f"s{i}" for i in range(16)
    )


@pytest.mark.parametrize(
    ("target", "error"),
    [
        ("tempfile.mkstemp", OSError(30, "Read-only file system")),
        ("os.fsync", OSError(28, "No space left on device")),
    ],
)
def test_unwritable_store_keeps_the_previous_baseline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, target: str, error: OSError
) -> None:
    doc = results_doc({"base": {"code": 100, "prose": 80}})
    update_baseline(doc, doc["configs"][0], tmp_path)
    path = baseline_path(tmp_path, key_for(doc, doc["configs"][0]))
    before = path.read_bytes()

    def fail(*args: object, **kwargs: object) -> None:
        raise error

    monkeypatch.setattr(target, fail)
    again = results_doc({"base": {"code": 100, "prose": 80}}, started="later")
    with pytest.raises(BaselineError, match="previous version is intact") as info:
        update_baseline(again, again["configs"][0], tmp_path)
    assert error.strerror in str(info.value)
    monkeypatch.undo()
    assert path.read_bytes() == before
    assert [p.name for p in path.parent.iterdir() if p.suffix == ".tmp"] == []


def test_reference_ab_single_and_multi_session() -> None:
    one = results_doc({"dflash": {"code": 100, "prose": 80}, "ddtree": {"code": 130, "prose": 70}})
    by = {c["name"]: c for c in one["configs"]}
    judged = judge_reference(one, by["ddtree"], by["dflash"], POLICY)
    assert judged.suite is not None and judged.suite.provisional
    assert any("one server session per side" in n for n in judged.notes)
    assert judged.prompts["code"].outcome is Outcome.IMPROVED
    assert judged.prompts["prose"].outcome is Outcome.REGRESSED
    many = results_doc(
        {"dflash": {"code": 100, "prose": 80}, "ddtree": {"code": 130, "prose": 70}}, sessions=3
    )
    by = {c["name"]: c for c in many["configs"]}
    judged = judge_reference(many, by["ddtree"], by["dflash"], POLICY)
    assert judged.suite is not None and not judged.suite.provisional
    assert judged.suite.n_new == 3 and judged.suite.n_ref == 3  # sessions are the unit
    assert judged.suite.ratio == pytest.approx(math.sqrt(1.3 * 70 / 80), rel=0.03)
    assert not any("booted beside its own" in n for n in judged.notes)


def test_a_config_stopped_early_is_judged_against_the_reference_sessions_beside_its_own() -> None:
    """ddtree stopped after two sessions (adaptive, or its budget) while dflash ran on to four
    for another config, its last two 30% slower (the host changed): ddtree's A/B is the one
    of its own rounds, as its stopping look judged it, and says so."""
    doc = results_doc(
        {"dflash": {"code": 100, "prose": 80}, "ddtree": {"code": 130, "prose": 70}}, sessions=4
    )
    by = {c["name"]: c for c in doc["configs"]}
    by["ddtree"]["runs"] = [r for r in by["ddtree"]["runs"] if r["session"] <= 2]
    for run in by["dflash"]["runs"]:
        run["tok_per_s"] *= 0.7 if run["session"] > 2 else 1.0
    judged = judge_reference(doc, by["ddtree"], by["dflash"], POLICY)
    assert judged.suite is not None and (judged.suite.n_new, judged.suite.n_ref) == (2, 2)
    assert judged.suite.ratio == pytest.approx(math.sqrt(1.3 * 70 / 80), rel=0.03)
    assert judged.acceptance is not None
    assert (
        "judged against dflash's sessions 1-2, booted beside its own; dflash ran on to "
        "session 4 for other configs" in judged.notes
    )
    assert [r["session"] for r in by["dflash"]["runs"]].count(4) == 10  # the record is kept


def test_holm_across_configs(tmp_path: Path) -> None:
    for night in range(6):
        doc = results_doc(
            {"a": {"code": 100, "prose": 80}, "b": {"code": 50, "prose": 40}},
            seed=night,
            started=f"n{night}",
        )
        for cfg in doc["configs"]:
            update_baseline(doc, cfg, tmp_path)
    slow = results_doc(
        {"a": {"code": 80, "prose": 64}, "b": {"code": 50, "prose": 40}}, seed=7, started="x"
    )
    judged = adjust([judge_baseline(slow, c, tmp_path, POLICY) for c in slow["configs"]], POLICY)
    assert [j.suite.p_adjusted is not None for j in judged] == [True, True]  # type: ignore[union-attr]
    assert judged[0].outcome == "REGRESSED" and judged[1].outcome != "REGRESSED"


def test_key_mismatch_lists_only_identity_fields() -> None:
    a = {"engine": "llamacpp", "config": "x", "engine_version": "1"}
    assert key_mismatch(a, {**a, "engine_version": "2"}) == []
    assert key_mismatch(a, {**a, "engine": "vllm"}) == ["engine: 'llamacpp' → 'vllm'"]


def _night(uuid: str, seed: int, speed: float = 100) -> dict[str, Any]:
    """A night's results of config ``base`` measured on the GPU ``uuid``."""
    doc = results_doc({"base": {"code": speed, "prose": speed * 0.8}}, seed=seed,
                      started=f"n{seed}")  # fmt: skip
    doc["gpu"] = {"devices": [{"name": "NVIDIA H200", "uuid": uuid, "driver_version": "1"}]}
    return doc


def test_each_stored_session_records_its_machine_and_a_night_elsewhere_says_so(
    tmp_path: Path,
) -> None:
    """A stored session keeps a digest of its GPUs' UUIDs; a night judged against sessions of
    other machines says how many of them ran on its own (under load the host's pace differs
    between machines of one model), in the judgement's notes. A CPU run records none."""

    assert machine_of(results_doc({"base": {"code": 1.0}})) is None
    assert machine_of(_night("GPU-a", 0)) == machine_of(_night("GPU-a", 1)) != machine_of(
        _night("GPU-b", 0))  # fmt: skip
    for seed, uuid in enumerate(["GPU-a", "GPU-a", "GPU-a", "GPU-b", "GPU-b"]):
        doc = _night(uuid, seed)
        update_baseline(doc, doc["configs"][0], tmp_path)
    (path,) = tmp_path.rglob("base--*.json")
    stored = [s["machine"] for s in json.loads(path.read_text())["sessions"]]
    assert stored == [machine_of(_night("GPU-a", 0))] * 3 + [machine_of(_night("GPU-b", 0))] * 2
    elsewhere = _night("GPU-c", 9)
    notes = judge_baseline(elsewhere, elsewhere["configs"][0], tmp_path, POLICY).notes
    mine = machine_of(elsewhere)
    assert (f"tonight's machine ({mine}) ran none of the 5 stored sessions, which ran on 2 other "
            "machines: under load the host's pace differs") in " | ".join(notes)  # fmt: skip
    home = _night("GPU-a", 8)
    notes = judge_baseline(home, home["configs"][0], tmp_path, POLICY, same_machine="never").notes
    assert (f"tonight's machine ({machine_of(home)}) ran 3 of the 5 stored sessions; the other 2 "
            "ran on 1 other machine") in notes  # fmt: skip
    # auto: three of tonight's machine are fewer than a final verdict's five, so all five judge
    judged = judge_baseline(home, home["configs"][0], tmp_path, POLICY)
    assert judged.suite is not None and judged.suite.n_ref == 5
    # always: only tonight's machine's three (provisional: under five)
    judged = judge_baseline(home, home["configs"][0], tmp_path, POLICY, same_machine="always")
    assert judged.suite is not None and judged.suite.provisional
    assert (f"judged against the 3 stored sessions of tonight's machine ({machine_of(home)}), of "
            "5 (--specdec-same-machine always)") in judged.notes  # fmt: skip
    assert judged.against == "baseline (3 sessions)"
    assert machine_note(mine, [mine, None]) is None  # every known one is tonight's
    assert machine_note(mine, ["x", None, None]) == (
        f"tonight's machine ({mine}) ran none of the 1 stored session, which ran on 1 other "
        "machine: under load the host's pace differs between machines and moves throughput "
        "with the GPU's work unchanged (the GPU-work verdict does not follow it); 2 stored "
        "sessions do not record their machine")  # fmt: skip
    assert machine_note(None, ["x"]) is None and machine_note(mine, [None]) is None


def test_a_night_is_judged_against_its_own_machines_sessions_once_five_are_stored(
    tmp_path: Path,
) -> None:
    """``--specdec-same-machine auto`` (the default): with five sessions of tonight's machine
    stored beside others, only those five judge it, and the note says so; ``never`` keeps every
    session; a machine unknown tonight (a CPU run) is judged against all; a bad mode is named."""

    # five nights on a fast machine, three on one whose host paces everything 10% slower
    for seed in range(8):
        doc = _night("GPU-a", seed) if seed < 5 else _night("GPU-b", seed, 90)
        update_baseline(doc, doc["configs"][0], tmp_path)
    (path,) = tmp_path.rglob("base--*.json")
    baseline = load_baseline(path)
    assert baseline is not None
    home = _night("GPU-a", 9)
    mine = machine_of(home)
    own, note = machine_history(baseline.sessions, mine, "auto", 5)
    assert len(own) == 5 and {s["machine"] for s in own} == {mine}
    assert note == (f"judged against the 5 stored sessions of tonight's machine ({mine}), of 8 "
                    "(--specdec-same-machine auto)")  # fmt: skip
    judged = judge_baseline(home, home["configs"][0], tmp_path, POLICY)
    assert judged.suite is not None and not judged.suite.provisional
    assert judged.suite.n_ref == 5 and note in judged.notes
    every, _ = machine_history(baseline.sessions, mine, "never", 5)
    assert len(every) == 8
    unknown, cpu_note = machine_history(baseline.sessions, None, "always", 5)
    assert len(unknown) == 8 and cpu_note is None
    with pytest.raises(ValueError, match="--specdec-same-machine 'sometimes': one of auto"):
        machine_history(baseline.sessions, mine, "sometimes", 5)
    # always, on a machine with nothing stored: no baseline to judge, said so, nothing raised
    new = _night("GPU-z", 10)
    judged = judge_baseline(new, new["configs"][0], tmp_path, POLICY, same_machine="always")
    assert judged.status == NO_BASELINE and judged.suite is None
    assert judged.message.startswith(
        f"no stored session of tonight's machine ({machine_of(new)}) among the 8 in {path} "
        "(--specdec-same-machine always)")  # fmt: skip
    # one of each: the counts read in the singular
    assert machine_note(mine, [mine, "x"]) == (
        f"tonight's machine ({mine}) ran 1 of the 2 stored sessions; the other 1 ran on 1 other "
        "machine")  # fmt: skip
    assert machine_note(mine, ["x", None]).endswith(  # type: ignore[union-attr]
        "; 1 stored session does not record its machine"
    )


def test_a_short_history_borrows_the_spread_of_the_configs_stored_beside_it(
    tmp_path: Path,
) -> None:
    """One stored session of a config says nothing of how sessions spread, and Welch on its
    runs takes another session's 4% wobble for a regression. The suite score and each prompt
    borrow the spread of a config stored beside it with six sessions (same hardware, engine,
    model, workload): 4% is within it, 20% is not; the explanation names the lender, which is
    never the config itself in another file."""

    def night(name: str, seed: int, shift: float) -> dict[str, Any]:
        return results_doc({name: {"code": 100 * shift, "prose": 80 * shift}}, seed=seed,
                           noise=0.002, started=f"n{seed}", config_sha=name)  # fmt: skip

    for seed, shift in enumerate([1.0, 1.04, 0.97, 1.02, 0.96, 1.01]):
        doc = night("plain", seed, shift)
        update_baseline(doc, doc["configs"][0], tmp_path)
    first = night("spec", 10, 1.0)
    update_baseline(first, first["configs"][0], tmp_path)
    (plain,) = tmp_path.rglob("plain--*.json")  # a lender whose suite cell overflows lends nothing
    broken = json.loads(plain.read_text())
    broken["key"]["config"], broken["sessions"][0]["suite"]["n"] = "broken", math.inf
    (plain.parent / "broken--m-gguf.json").write_text(json.dumps(broken))

    wobble = night("spec", 11, 0.96)
    judged = judge_baseline(wobble, wobble["configs"][0], tmp_path, POLICY)
    assert judged.suite is not None and judged.suite.method == "borrowed-spread"
    assert judged.suite.provisional and judged.suite.spread_source == "plain (6 sessions)"
    verdicts = [judged.suite, *judged.prompts.values()]
    assert all(v.outcome is not Outcome.REGRESSED for v in verdicts), judged.message
    assert "borrowed from plain (6 sessions)" in judged.suite.explanation
    # alone (no config beside it), the same night is the false alarm
    alone = tmp_path / "alone"
    update_baseline(first, first["configs"][0], alone)
    by_runs = judge_baseline(wobble, wobble["configs"][0], alone, POLICY)
    assert by_runs.suite is not None and by_runs.suite.method == "welch-provisional"
    assert by_runs.suite.outcome is Outcome.REGRESSED
    slow = night("spec", 12, 0.8)
    judged = judge_baseline(slow, slow["configs"][0], tmp_path, POLICY)
    assert judged.suite is not None and judged.suite.outcome is Outcome.REGRESSED
    # the config itself in another file (the same model under another file name) never lends
    renamed = night("spec", 14, 1.0)
    renamed["configs"][0]["models"]["target"]["id"] = "m-copy.gguf"
    for seed in range(6):
        update_baseline({**renamed, "started_at": f"r{seed}"}, renamed["configs"][0], tmp_path)
    assert len([f for f in tmp_path.rglob("spec--*.json") if "alone" not in f.parts]) == 2
    judged = judge_baseline(wobble, wobble["configs"][0], tmp_path, POLICY)
    assert judged.suite is not None and judged.suite.spread_source == "plain (6 sessions)"
    # the lender itself has a long enough history: judged on its own
    again = night("plain", 13, 1.0)
    own = judge_baseline(again, again["configs"][0], tmp_path, POLICY)
    assert own.suite is not None and own.suite.method == "prediction-interval"


def test_lenders_keep_the_sessions_of_tonights_machine(tmp_path: Path) -> None:
    """A lender's sessions are those ``--specdec-same-machine`` keeps for tonight's machine, as
    the judged history's are: with five of tonight's machine stored beside three of another
    (10% slower), ``auto`` lends the five's spread and ``never`` all eight's."""

    def night(name: str, uuid: str, seed: int, speed: float) -> dict[str, Any]:
        doc = results_doc({name: {"code": speed, "prose": speed * 0.8}}, seed=seed,
                          noise=0.004, started=f"n{seed}", config_sha=name)  # fmt: skip
        doc["gpu"] = {"devices": [{"name": "NVIDIA H200", "uuid": uuid, "driver_version": "1"}]}
        return doc

    for seed in range(8):
        doc = night("plain", "GPU-a", seed, 100) if seed < 5 else night("plain", "GPU-b", seed, 90)
        update_baseline(doc, doc["configs"][0], tmp_path)
    first = night("spec", "GPU-a", 10, 120)
    update_baseline(first, first["configs"][0], tmp_path)
    tonight = night("spec", "GPU-a", 11, 120)
    spreads = {}
    for mode in ("auto", "never"):
        suite = judge_baseline(tonight, tonight["configs"][0], tmp_path, POLICY,
                               same_machine=mode).suite  # fmt: skip
        assert suite is not None and suite.method == "borrowed-spread"
        spreads[mode] = (suite.spread_source, suite.between_cv)
    assert (
        spreads["auto"][0] == "plain (5 sessions)" and spreads["never"][0] == "plain (8 sessions)"
    )
    assert spreads["auto"][1] < 0.01 < spreads["never"][1]
