"""Unit tests for prompt suites: built-in data, the JSONL loader, its errors and the hash."""

from __future__ import annotations

import ast
import hashlib
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from pytest_specdec.core import workloads
from pytest_specdec.core.workloads import (
    Message,
    Prompt,
    Workload,
    WorkloadError,
    builtin_names,
    load_workload,
    suggest_id,
)

SEED_SHA256 = "46f87fc84e56a332b1fa4768b264e23ac7aa135e705857a48077e2e546ea4b04"
SEED_IDS = ("fibonacci", "quicksort", "arithmetic", "json_parse", "haiku")
SPECBENCH = {
    "multi_turn": "mt_",
    "translation": "tr_",
    "summarization": "sum_",
    "qa": "qa_",
    "math": "math_",
    "rag": "rag_",
}
SAFE_ID = re.compile(r"[a-z0-9_]+")


def write(tmp_path: Path, *lines: str, name: str = "prompts.jsonl") -> Path:
    path = tmp_path / name
    path.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    return path


def row(**fields: object) -> str:
    return json.dumps(fields)


# --- built-in workloads ----------------------------------------------------------------------


def test_builtin_names() -> None:
    assert builtin_names() == sorted(["seed", "specbench", "all", *SPECBENCH])


@pytest.mark.parametrize("name", builtin_names())
def test_builtin_loads_with_safe_unique_ids(name: str) -> None:
    workload = load_workload(name)
    assert workload.name == name
    assert workload.source == f"builtin:{name}"
    assert len(workload.prompts) >= 5
    assert len(set(workload.ids)) == len(workload.ids)
    for prompt in workload.prompts:
        assert SAFE_ID.fullmatch(prompt.id), prompt.id
        assert prompt.messages[-1].role == "user"
        assert all(m.content.strip() for m in prompt.messages)
        assert prompt.max_tokens is None or prompt.max_tokens > 0


def test_seed_ids_and_categories_are_exact() -> None:
    seed = load_workload("seed")
    assert seed.ids == SEED_IDS
    assert [p.category for p in seed.prompts] == [
        "code",
        "explanatory",
        "short_factual",
        "complex_code",
        "creative",
    ]
    assert all(len(p.messages) == 1 for p in seed.prompts)


def test_specbench_has_six_categories_of_at_least_five() -> None:
    specbench = load_workload("specbench")
    assert specbench.categories == tuple(SPECBENCH)
    for category, prefix in SPECBENCH.items():
        members = [p for p in specbench.prompts if p.category == category]
        assert len(members) >= 5, category
        assert all(p.id.startswith(prefix) for p in members), [p.id for p in members]
        assert load_workload(category).prompts == tuple(members)


def test_all_is_seed_then_specbench() -> None:
    everything = load_workload("all")
    assert everything.prompts == load_workload("seed").prompts + load_workload("specbench").prompts
    assert everything.source == "builtin:all"


def test_multi_turn_prompts_carry_a_prior_exchange() -> None:
    for prompt in load_workload("multi_turn").prompts:
        roles = [m.role for m in prompt.messages]
        assert roles[:3] == ["user", "assistant", "user"], prompt.id


@pytest.mark.parametrize("name", ["summarization", "rag"])
def test_passage_prompts_carry_a_few_hundred_words(name: str) -> None:
    for prompt in load_workload(name).prompts:
        words = len(prompt.messages[-1].content.split())
        assert words >= 250, (prompt.id, words)


def test_rag_prompts_number_their_documents() -> None:
    for prompt in load_workload("rag").prompts:
        content = prompt.messages[-1].content
        assert "[1]" in content and "[2]" in content and "Question:" in content, prompt.id


def test_builtin_files_are_valid_jsonl_one_object_per_line() -> None:
    folder = Path(workloads.__file__).parents[1] / "prompts"
    files = sorted(folder.glob("*.jsonl"))
    assert {f.stem for f in files} == {"seed", *SPECBENCH}
    for path in files:
        lines = path.read_text(encoding="utf-8").splitlines()
        assert all(isinstance(json.loads(line), dict) for line in lines), path


# --- hash ------------------------------------------------------------------------------------


def test_seed_hash_is_pinned() -> None:
    assert load_workload("seed").sha256 == SEED_SHA256


def test_hash_is_sha256_of_canonical_json() -> None:
    seed = load_workload("seed")
    rows = [p.to_dict() for p in seed.prompts]
    canonical = json.dumps(rows, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    assert seed.sha256 == hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def test_hash_ignores_name_and_source_and_survives_a_file_round_trip(tmp_path: Path) -> None:
    seed = load_workload("seed")
    lines = [json.dumps(p.to_dict(), ensure_ascii=False) for p in seed.prompts]
    copy = load_workload(str(write(tmp_path, *lines, name="copy.jsonl")))
    assert copy.name == "copy"
    assert copy.source == str((tmp_path / "copy.jsonl").resolve())
    assert copy.prompts == seed.prompts
    assert copy.sha256 == SEED_SHA256


def _first(prompt: Prompt) -> Message:
    return prompt.messages[0]


@pytest.mark.parametrize(
    "change",
    [
        lambda p: Prompt(p.id, p.category, (Message("user", _first(p).content + " "),)),
        lambda p: Prompt(p.id + "_2", p.category, p.messages),
        lambda p: Prompt(p.id, "other", p.messages),
        lambda p: Prompt(p.id, p.category, p.messages, max_tokens=512),
        lambda p: Prompt(p.id, p.category, (Message("system", "Be brief."), *p.messages)),
    ],
    ids=["content", "id", "category", "max_tokens", "messages"],
)
def test_changing_any_prompt_field_changes_the_hash(change: Callable[[Prompt], Prompt]) -> None:
    seed = load_workload("seed")
    changed = (change(seed.prompts[0]), *seed.prompts[1:])
    assert Workload("seed", changed, seed.source).sha256 != SEED_SHA256


def test_reordering_prompts_changes_the_hash() -> None:
    seed = load_workload("seed")
    assert Workload("seed", seed.prompts[::-1], seed.source).sha256 != SEED_SHA256


# --- rendering -------------------------------------------------------------------------------


def test_text_renders_turns_and_ends_with_the_assistant_cue() -> None:
    prompt = Prompt(
        "chat",
        "multi_turn",
        (Message("system", "Be kind."), Message("user", "Hi"), Message("assistant", "Hello!")),
    )
    prompt = Prompt(prompt.id, prompt.category, (*prompt.messages, Message("user", "Bye")))
    assert prompt.text() == "System: Be kind.\nUser: Hi\nAssistant: Hello!\nUser: Bye\nAssistant:"
    assert load_workload("seed").prompts[0].text().startswith("User: Write a Python module")


def test_to_dict_is_plain_json() -> None:
    prompt = Prompt("a", "qa", (Message("user", "Why?"),), max_tokens=64)
    assert prompt.to_dict() == {
        "id": "a",
        "category": "qa",
        "messages": [{"role": "user", "content": "Why?"}],
        "max_tokens": 64,
    }


# --- user JSONL files ------------------------------------------------------------------------


def test_user_file_with_both_formats(tmp_path: Path) -> None:
    turns = [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Name a prime."},
        {"role": "assistant", "content": "7"},
        {"role": "user", "content": "Another?"},
    ]
    path = write(
        tmp_path,
        row(id="one", category="code", prompt="Write a loop."),
        "",
        row(id="two", messages=turns, max_tokens=128),
    )
    workload = load_workload(str(path))
    one, two = workload.prompts
    assert one == Prompt("one", "code", (Message("user", "Write a loop."),))
    assert two.category == workloads.DEFAULT_CATEGORY
    assert two.max_tokens == 128
    assert [m.to_dict() for m in two.messages] == turns


def test_user_file_with_byte_order_mark(tmp_path: Path) -> None:
    path = tmp_path / "bom.jsonl"
    path.write_text("\ufeff" + row(id="a", prompt="x") + "\n", encoding="utf-8")
    assert load_workload(str(path)).ids == ("a",)


MSG = [{"role": "user", "content": "x"}]
LINE_ERRORS = [
    ('{"id": "a", "prompt": "x"', "invalid JSON", "one complete JSON object per line"),
    ('["a", "x"]', "expected a JSON object, got list", "write e.g."),
    (row(prompt="x"), "missing field 'id'", 'add "id"'),
    (row(id="", prompt="x"), "field 'id' value '' is not a non-empty string", "non-empty"),
    (row(id=3, prompt="x"), "field 'id' value 3 is not a non-empty string", "non-empty"),
    (row(id="Fib-1", prompt="x"), "field 'id' value 'Fib-1'", 'use "id": "fib_1"'),
    (row(id="caf\u00e9 au lait", prompt="x"), "may only contain", 'use "id": "cafe_au_lait"'),
    (row(id="a"), "exactly one of the fields 'prompt' and 'messages'", '"prompt": "..."'),
    (row(id="a", prompt="x", messages=MSG), "exactly one of", '"messages": [...]'),
    (row(id="a", prompt="  "), "field 'prompt' value '  ' is not a non-empty", "non-empty"),
    (row(id="a", category="", prompt="x"), "field 'category' value ''", "non-empty"),
    (row(id="a", messages=[]), "field 'messages' value [] is not a non-empty list", '"role"'),
    (row(id="a", messages="hi"), "field 'messages' value 'hi'", '"messages": [{'),
    (row(id="a", messages=["hi"]), "field 'messages[0]'", 'write each turn as {"role"'),
    (row(id="a", messages=[{"role": "user"}]), "field 'messages[0]'", "each turn as"),
    (row(id="a", messages=[{"role": "bot", "content": "x"}]), "'bot' is not a chat role", "user"),
    (
        row(id="a", messages=[*MSG, {"role": "system", "content": "s"}, *MSG]),
        "field 'messages[1].role' is 'system' but not the first turn",
        "move the system message to the start",
    ),
    (
        row(id="a", messages=[*MSG, {"role": "assistant", "content": "y"}]),
        "the last of 'messages' has role 'assistant'",
        "end 'messages' with a user turn",
    ),
    (row(id="a", messages=[{"role": "user", "content": ""}]), "'messages[0].content'", "text"),
    (row(id="a", prompt="x", max_tokens=0), "field 'max_tokens' value 0", "such as 512"),
    (row(id="a", prompt="x", max_tokens="512"), "field 'max_tokens' value '512'", "null"),
    (row(id="a", prompt="x", max_tokens=True), "field 'max_tokens' value True", "512"),
    (
        row(id="a", prompt="x", max_token=9),
        "unknown field 'max_token'",
        "rename it to 'max_tokens'",
    ),
    (row(id="a", prompt="x", weight=2), "unknown field 'weight'", "use only id, category"),
]


@pytest.mark.parametrize(("line", "problem", "fix"), LINE_ERRORS)
def test_bad_line_names_file_line_field_and_fix(
    tmp_path: Path, line: str, problem: str, fix: str
) -> None:
    path = write(tmp_path, row(id="ok", prompt="fine"), "", line)
    with pytest.raises(WorkloadError) as info:
        load_workload(str(path))
    message = str(info.value)
    assert message.startswith(f"{path.resolve()}:3: ")
    assert problem in message
    assert "; fix: " in message
    assert fix in message.split("; fix: ", 1)[1]


def test_duplicate_id_names_both_lines(tmp_path: Path) -> None:
    path = write(
        tmp_path, row(id="a", prompt="x"), row(id="b", prompt="y"), row(id="a", prompt="z")
    )
    with pytest.raises(WorkloadError, match=r":3: duplicate id 'a' \(first used on line 1\)"):
        load_workload(str(path))


@pytest.mark.parametrize("content", ["", "\n\n  \n"])
def test_empty_file(tmp_path: Path, content: str) -> None:
    path = tmp_path / "empty.jsonl"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(WorkloadError) as info:
        load_workload(str(path))
    assert str(info.value).startswith(f"{path.resolve()}: no prompts")
    assert "fix: add one JSON object per line" in str(info.value)


def test_missing_file_names_the_path_and_the_builtins(tmp_path: Path) -> None:
    missing = tmp_path / "nope.jsonl"
    with pytest.raises(WorkloadError) as info:
        load_workload(str(missing))
    message = str(info.value)
    assert f"{missing} does not exist" in message
    assert "fix: use one of all, math" in message and "path to a .jsonl file" in message


def test_directory_is_not_a_workload(tmp_path: Path) -> None:
    with pytest.raises(WorkloadError, match="is a directory, not a file"):
        load_workload(str(tmp_path))


def test_misspelled_builtin_suggests_the_name() -> None:
    with pytest.raises(WorkloadError, match="did you mean 'seed'"):
        load_workload("sede")


def test_undecodable_file(tmp_path: Path) -> None:
    path = tmp_path / "latin1.jsonl"
    path.write_bytes(b'{"id": "a", "prompt": "caf\xe9"}\n')
    with pytest.raises(WorkloadError, match=r"latin1\.jsonl: cannot read .* save it as UTF-8"):
        load_workload(str(path))


def test_workload_error_is_a_value_error() -> None:
    assert issubclass(WorkloadError, ValueError)
    with pytest.raises(ValueError):
        load_workload("")


# --- comma lists and select() ----------------------------------------------------------------


def test_comma_list_concatenates_in_order() -> None:
    combined = load_workload(" seed , math ")
    assert combined.name == "seed,math"
    assert combined.source == "builtin:seed,builtin:math"
    assert combined.prompts == load_workload("seed").prompts + load_workload("math").prompts


def test_comma_list_mixes_builtins_and_files(tmp_path: Path) -> None:
    path = write(tmp_path, row(id="mine", prompt="x"))
    combined = load_workload(f"qa,{path}")
    assert combined.ids[-1] == "mine"
    assert combined.source == f"builtin:qa,{path.resolve()}"


def test_comma_list_with_overlap_names_the_duplicate() -> None:
    with pytest.raises(WorkloadError, match="prompt id 'fibonacci' appears in both builtin:seed"):
        load_workload("seed,all")


@pytest.mark.parametrize("spec", ["seed,", ",seed", "seed,,qa"])
def test_comma_list_with_empty_item(spec: str) -> None:
    with pytest.raises(WorkloadError, match="has an empty item"):
        load_workload(spec)


def test_comma_list_with_unknown_name() -> None:
    with pytest.raises(WorkloadError, match="workload 'nosuch' is not a built-in name"):
        load_workload("seed,nosuch")


def test_select_keeps_suite_order_and_changes_the_hash() -> None:
    seed = load_workload("seed")
    subset = seed.select(["haiku", "fibonacci"])
    assert subset.ids == ("fibonacci", "haiku")
    assert (subset.name, subset.source) == (seed.name, seed.source)
    assert subset.sha256 != seed.sha256
    assert seed.select("haiku, fibonacci") == subset
    assert seed.select(list(SEED_IDS)).sha256 == SEED_SHA256


def test_select_unknown_id_lists_the_valid_ids() -> None:
    with pytest.raises(WorkloadError) as info:
        load_workload("seed").select(["fibonacci", "fib"])
    assert "unknown prompt id(s) 'fib' in workload 'seed'" in str(info.value)
    assert "fibonacci, quicksort, arithmetic, json_parse, haiku" in str(info.value)


def test_select_nothing() -> None:
    with pytest.raises(WorkloadError, match="no prompt ids given"):
        load_workload("seed").select([])


# --- construction and helpers ----------------------------------------------------------------


def test_prompt_rejects_unsafe_id_and_no_messages() -> None:
    with pytest.raises(WorkloadError, match="fix: use 'my_prompt'"):
        Prompt("My Prompt", "qa", (Message("user", "x"),))
    with pytest.raises(WorkloadError, match="has no messages"):
        Prompt("a", "qa", ())


@pytest.mark.parametrize(
    ("raw", "fixed"),
    [("Fib-1", "fib_1"), ("  a  b ", "a_b"), ("Über.Größe", "uber_groe"), ("!!!", "prompt")],
)
def test_suggest_id(raw: str, fixed: str) -> None:
    assert suggest_id(raw) == fixed
    assert SAFE_ID.fullmatch(suggest_id(raw))


def test_module_imports_only_the_standard_library() -> None:
    tree = ast.parse(Path(workloads.__file__).read_text(encoding="utf-8"))
    names = {
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    }
    names |= {node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    roots = {name.split(".")[0] for name in names}
    assert roots <= set(sys.stdlib_module_names), roots - set(sys.stdlib_module_names)
