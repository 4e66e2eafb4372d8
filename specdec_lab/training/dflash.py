"""Train a DFLASH drafter for a target by distillation from the target itself.

Used by ``scripts/make-dflash-drafter``. The memory-bound target is made from a seed and has no
training set of its own, and needs none: the data are the target's own greedy continuations of
prompts of the suite's kinds (code, explanation, arithmetic, JSON, verse), generated on the
GPU, and the target's hidden states along them.

What is trained is what SGLang 0.5.17 serves (``sglang/srt/models/dflash.py`` and
``speculative/dflash_worker_v2.py``), step for step:

* the context: the outputs of the target layers ``target_layer_ids`` (SGLang captures the
  residual stream at the input of layer L + 1), concatenated in layer order, through ``fc``
  and ``hidden_norm``; every draft layer projects it to keys and values as it is (no input
  norm), with its key norm and rotary position, one entry per committed token;
* the block: ``block_size`` tokens at positions ``n .. n + block_size - 1`` after ``n``
  committed tokens: the target's last token (the bonus, position ``n``), then the mask token;
  embedded with the target's embedding;
* Qwen3-style layers (per-head query/key RMS norm, SiLU MLP, pre-norm residuals) whose
  attention sees every context entry and the whole block in both directions;
* the final norm and the target's LM head; block positions 1 .. block_size - 1 are the
  drafted tokens.

The objective is DFlash's block objective: cross-entropy against the target's greedy tokens at
every drafted position, weighted by ``exp(-(k - 1) / gamma)`` for the k-th drafted token (an
early miss ends the accepted run, so early positions matter most), over many anchors per
sequence at once: one forward pass holds every anchor's block, each masked to the context
before its anchor and to its own block.

Accept length by step: a verify step at anchor ``n`` accepts the drafted tokens up to the
first one that differs from the target's greedy token, plus the target's own token, as
SGLang's greedy verification does; its mean over the anchors is written beside the loss,
every ``--eval-every`` steps, on two sets never trained on:

* held-out continuations of prompts about other things than the training prompts (every
  fourth task, topic, number, object and subject is kept out of training). The weights kept
  are those of the best evaluation here: a drafter that memorises its training sequences
  scores ever higher on prompts like them and ever lower on new ones;
* the continuations of the suite's own prompts (``--eval-workload``, default ``seed``): what
  the server will draft for, reported and never used to choose anything.

A final check recomputes some anchors the way the server does (context keys and values first,
then the block on its own) and records how far the two paths differ.

Output beside the target: ``NAME.dflash-b16-distilled-seed1.hf/`` (``config.json``,
``model.safetensors`` in float16, ``specdec-model.json``: recipe, seed, steps, the compute
dtype (bfloat16 autocast on a GPU, float32 on a CPU), loss, accept length by step, timings and
sha256). A folder whose recipe matches is kept as it is.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import random
import re
import shutil
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from specdec_lab.drafters import layout
from specdec_lab.formats import folder

GENERATOR = "pytest-specdec make-dflash-drafter 4"
PROMPTS = Path(__file__).resolve().parents[2] / "pytest_specdec" / "prompts"  # the suite's

# --- prompts of the suite's kinds -----------------------------------------------------------

_TOPICS = [
    "binary search", "a hash map", "a linked list", "merge sort", "a priority queue",
    "dynamic programming", "recursion", "a trie", "breadth-first search", "Dijkstra's algorithm",
    "garbage collection", "TCP congestion control", "DNS resolution", "public-key cryptography",
    "a B-tree", "virtual memory", "the CAP theorem", "consistent hashing", "a bloom filter",
    "gradient descent", "photosynthesis", "plate tectonics", "the water cycle", "inflation",
    "compound interest", "the immune system", "black holes", "vaccines", "supply and demand",
    "the French Revolution", "climate change", "electric motors", "a compiler", "unicode",
    "floating-point numbers", "regular expressions", "database indexes", "a mutex", "caching",
    "heap sort", "insertion sort", "radix sort", "a stack", "a queue", "a red-black tree",
    "an AVL tree", "a skip list", "union-find", "topological sorting", "depth-first search",
    "the A* search algorithm", "minimum spanning trees", "the Bellman-Ford algorithm",
    "memoization", "backtracking", "greedy algorithms", "big-O notation", "amortized analysis",
    "the halting problem", "NP-completeness", "a finite state machine", "lambda calculus",
    "closures", "type inference", "generics", "object-oriented design", "functional programming",
    "immutability", "exceptions", "coroutines", "threads and processes", "deadlock", "a semaphore",
    "the event loop", "memory leaks", "reference counting", "stack overflow", "pointers",
    "endianness", "two's complement", "bitwise operations", "CPU caches", "branch prediction",
    "pipelining in processors", "SIMD instructions", "GPU programming",
    "an operating system kernel", "system calls", "file systems", "RAID", "containers",
    "virtual machines", "load balancing", "HTTP caching", "REST APIs", "WebSockets", "OAuth",
    "password hashing", "TLS certificates", "SQL injection", "cross-site scripting",
    "rate limiting", "message queues", "eventual consistency", "the Raft consensus algorithm",
    "database transactions", "normalization in databases", "sharding", "MapReduce",
    "version control", "continuous integration", "unit testing", "code review", "refactoring",
    "semantic versioning", "linear regression", "overfitting", "neural networks",
    "backpropagation", "the attention mechanism", "decision trees", "k-means clustering",
    "cross-validation", "Bayes' theorem", "the central limit theorem", "standard deviation",
    "correlation and causation", "prime numbers", "modular arithmetic", "logarithms",
    "derivatives", "integrals", "matrices", "complex numbers", "probability",
    "the Pythagorean theorem", "entropy in information theory", "Huffman coding",
    "error-correcting codes", "the Fourier transform", "sampling and aliasing", "gravity",
    "electricity", "magnetism", "the speed of light", "quantum entanglement", "radioactive decay",
    "the periodic table", "chemical bonds", "DNA replication", "evolution by natural selection",
    "the nervous system", "the heart", "sleep", "antibiotics", "earthquakes", "volcanoes",
    "ocean tides", "the seasons", "rainbows", "the greenhouse effect", "tornadoes",
    "the carbon cycle", "coral reefs", "bees", "the Roman Empire", "the printing press",
    "the Industrial Revolution", "the Silk Road", "democracy", "taxes", "interest rates",
    "stock markets", "a central bank", "insurance", "opportunity cost", "globalization",
    "cryptocurrency", "budgeting", "elections",
]  # fmt: skip
_TASKS = [
    "reverses the words of a sentence", "checks whether a string is a palindrome",
    "counts word frequencies in a text file", "merges two sorted lists",
    "parses a CSV line with quoted fields", "computes the greatest common divisor",
    "finds the longest common prefix of a list of strings", "flattens a nested list",
    "converts Roman numerals to integers", "validates an email address",
    "computes prime numbers with a sieve", "implements an LRU cache",
    "rotates a matrix by 90 degrees", "formats a number with thousands separators",
    "computes the median of a stream", "deduplicates a list while keeping order",
    "serializes a binary tree", "evaluates an arithmetic expression", "run-length encodes a string",
    "finds all anagrams in a word list", "checks whether brackets are balanced",
    "computes the edit distance of two strings", "groups records by a key",
    "parses a simple key-value settings format", "validates a document against a simple schema",
    "tokenizes an arithmetic expression", "computes the nth triangular number",
    "converts a date string to ISO format", "finds the k most frequent words",
    "sorts a list of records by two keys", "computes a running average",
    "finds duplicate files by their content", "converts Celsius to Fahrenheit and back",
    "counts the vowels in a string", "capitalizes the first letter of every word",
    "checks whether a year is a leap year", "computes the factorial of a number",
    "generates all permutations of a list", "generates all subsets of a set",
    "finds the maximum subarray sum", "implements binary search on a sorted array",
    "implements a stack with a minimum operation", "implements a circular buffer",
    "implements a simple rate limiter", "retries a failing call with exponential backoff",
    "downloads a web page and counts its links", "renames files in a folder by a pattern",
    "computes the checksum of a file", "splits a large file into chunks",
    "merges overlapping intervals", "finds the shortest path in a grid", "solves a sudoku puzzle",
    "plays tic-tac-toe against the user", "simulates a bank account with deposits and withdrawals",
    "parses command-line flags", "reads environment variables with defaults",
    "pretty-prints a table of data", "converts a number to its English words",
    "converts between number bases", "computes the distance between two coordinates",
    "finds the closest pair of points", "checks whether two strings are anagrams",
    "compresses whitespace in a text", "wraps text to a given width",
    "extracts all URLs from a text", "masks credit card numbers in a log",
    "generates a random password", "counts the lines of code in a project",
    "finds the most common element of a list", "transposes a matrix", "multiplies two matrices",
    "computes the determinant of a matrix", "computes simple statistics for a list of numbers",
    "normalizes a list of scores", "builds a histogram of values",
    "detects a cycle in a linked list", "reverses a linked list",
    "finds the middle of a linked list", "checks whether a binary tree is balanced",
    "computes the depth of a binary tree", "prints a binary tree level by level",
    "finds the lowest common ancestor in a tree", "implements a min-heap",
    "schedules tasks by priority", "simulates a queue at a bank",
    "converts a list of pairs into a dictionary", "inverts a dictionary",
    "diffs two lists of strings", "finds words that rhyme in a list",
    "counts the words in each sentence", "splits a text into sentences",
    "highlights search terms in a text", "implements a simple template engine",
    "validates a phone number", "parses a URL into its parts", "builds a query string",
    "encodes and decodes base64", "implements the Caesar cipher",
    "implements a simple hash function", "checks whether a number is prime",
    "adds up the digits of a number", "finds perfect numbers below a limit",
    "draws a text progress bar", "converts seconds into hours, minutes and seconds",
    "computes the day of the week for a date", "counts business days between two dates",
    "parses a log file and reports errors per hour", "watches a folder for new files",
    "caches the results of an expensive function", "measures how long a function takes",
    "reads a configuration file in INI format", "writes records to a CSV file",
    "converts Markdown headings to HTML", "strips HTML tags from a text",
    "implements a to-do list in memory", "implements an undo stack",
    "simulates rolling two dice many times", "shuffles a deck of cards",
    "computes compound interest over years", "computes a loan payment schedule",
    "converts currencies with a rate table", "finds the longest increasing subsequence",
    "solves the knapsack problem", "counts the ways to climb stairs",
    "generates Pascal's triangle", "computes the power set size",
    "finds the missing number in a range", "checks whether a graph is bipartite",
    "counts the islands in a grid", "implements a simple state machine for a traffic light",
    "matches a glob pattern",
]  # fmt: skip
_LANGUAGES = ["Python", "JavaScript", "Go", "Rust", "C", "TypeScript", "Java", "C++", "Kotlin",
              "Swift"]  # fmt: skip
_THINGS = [
    "a library book", "a weather station reading", "a customer order", "a flight booking",
    "a music album", "a bank transaction", "a recipe", "a student record", "a product review",
    "a server log entry", "a calendar event", "a chess game", "a hotel room", "a job posting",
    "a parcel delivery", "a football match",
    "a movie", "a car", "a restaurant", "a city", "a country", "a planet", "a smartphone",
    "a laptop", "a patient visit", "a train timetable", "a shopping cart", "a sports team",
    "a museum exhibit", "a pet", "a house for sale", "a video game", "a podcast episode",
    "a concert", "a university course", "an employee", "a company", "a software release",
    "a bug report", "a pull request", "a user account", "a sensor reading", "a tweet",
    "a blog post", "a news article", "a photograph", "a conference talk", "a board game",
    "a gym workout", "a meal plan", "a garden plant", "a bicycle", "a rental car",
    "a train ticket", "an invoice", "a tax return", "a medical prescription", "a TV series",
    "a mountain hike", "a wine", "a coffee order", "a birthday party",
]  # fmt: skip
_SUBJECTS = [
    "the sea", "autumn leaves", "a city at night", "mountains", "an old clock", "the moon",
    "rain on a window", "a lighthouse", "first snow", "a train journey", "a garden", "silence",
    "a desert", "a cat asleep", "the first day of spring", "a forgotten letter", "a river",
    "a thunderstorm", "an empty station", "morning coffee",
    "the ocean at dawn", "falling snow", "a busy market", "a quiet library", "an old tree",
    "a child's kite", "the stars", "a summer evening", "a fox in the snow", "a harbour",
    "a bridge", "a candle", "a clock tower", "a field of wheat", "a lost glove", "a violin",
    "a kitchen in the morning", "a bus stop in the rain", "a grandmother's hands", "the wind",
    "a crow", "a mirror", "a paper boat", "an abandoned house", "a bicycle ride", "a winter night",
    "a sunflower", "a robot", "a city park", "the last day of school", "a hospital at night",
    "a fishing boat", "a snail", "a waterfall", "an airport", "a childhood friend", "a full moon",
    "a storm at sea", "a beehive", "a map", "a broken umbrella", "fireflies", "a mountain lake",
    "an orchard", "the desert at night", "a tea kettle", "a bakery",
    "an old photograph", "migrating geese",
]  # fmt: skip
# kind -> (template, the choices of each slot, requirement clauses, most clauses per prompt):
# a prompt is one combination of the slots, then up to that many distinct clauses in a drawn
# order, so that prompts run from one short line to a paragraph of requirements, as the suite's
# own prompts do
_CODE_CLAUSES = [
    "Annotate all parameters with types and document each function.",
    "Raise a clear error for invalid input.",
    "Include unit tests for the edge cases.",
    "Discuss its complexity once the code is done.", "Use only the standard library.",
    "Comment each step.", "Show example usage at the end.",
    "Compare it with a simpler but slower approach.", "Make it handle very large inputs.",
    "Keep the code short and readable.", "Recommend one variant for real projects, with reasons.",
    "Write it both iteratively and recursively, and check that the two agree.",
    "Describe the algorithm in one paragraph before the code.",
    "Handle empty input and unicode text.", "Include a small benchmark.",
    "Explain each design decision after the code.",
    "Point to the exact position of any malformed input.",
    "Return the results as a named tuple.",
]  # fmt: skip
_EXPLAIN_CLAUSES = [
    "Use prose rather than lists.", "Start with a short history.",
    "Trace one concrete example from start to finish.", "Say when it fails and why.",
    "Compare it with an alternative.", "Give its costs and its benefits.",
    "Use an analogy from everyday life.", "End with three review questions.",
    "Keep it under two hundred words.", "Define every technical term you use.",
    "Describe a common misconception and correct it.", "Give two real-world applications.",
    "Explain why it matters in practice.", "Include a short summary at the end.",
]  # fmt: skip
_JSON_CLAUSES = [
    "Then explain each field.", "Then write a Python dataclass for it.",
    "Show how to validate it.", "Give a second example.", "List its edge cases.",
    "Write a JSON schema for it.", "Show the same data as YAML.",
    "Write a Python function that parses it and raises a custom error for malformed input.",
    "Use realistic values.", "Say which fields are optional and why.",
]  # fmt: skip
_VERSE_CLAUSES = [
    "Give it a title.", "Then describe, in prose, why you picked its images.",
    "Keep to a strict syllable count.", "Let one small detail change in every stanza.",
    "End on a surprising image.", "Use the present tense.",
    "Then write a second version in a different mood.", "Follow it through the four seasons.",
]  # fmt: skip
TEMPLATES: dict[str, tuple[str, dict[str, list[str]], list[str], int]] = {
    "code": ("{ask} a {lang} {unit} that {task}.", {
        "ask": ["Write", "Implement", "Create", "Build"], "lang": _LANGUAGES,
        "unit": ["function", "module", "class", "script", "command-line program", "library"],
        "task": _TASKS,
    }, _CODE_CLAUSES, 4),
    "explanation": ("Explain {topic} to {who}.", {
        "topic": _TOPICS,
        "who": ["a student", "a new programmer", "a curious child", "an engineer", "a manager",
                "a teacher", "a programmer new to the idea"],
    }, _EXPLAIN_CLAUSES, 4),
    "arithmetic": ("What is {a} {op} {b}?", {
        "a": [str(n) for n in range(11, 1000)], "b": [str(n) for n in range(11, 100)],
        "op": ["multiplied by", "plus", "minus", "divided by"],
    }, ["Show each step of the computation.",
        "Answer with the number and a brief justification.",
        "Check the answer another way.", "Round the result to two decimal places.",
        "Explain the method for a child.", "Give the answer first, then the working."], 2),
    "json": ("Give a JSON object describing {thing} with {n} fields{shape}.", {
        "thing": _THINGS, "n": ["3", "4", "5", "6", "7", "8"],
        "shape": ["", " and one nested object", " and one list"],
    }, _JSON_CLAUSES, 3),
    "verse": ("Write {form} about {subject}{mood}.", {
        "form": ["a haiku", "a short poem", "four rhyming lines", "a limerick", "a sonnet",
                 "a free-verse poem", "an ode", "a sequence of three haiku"],
        "subject": _SUBJECTS,
        "mood": ["", " in a joyful tone", " in a melancholy tone", " for children",
                 " in the second person", " in the style of a folk song", " that rhymes",
                 " as a dialogue"],
    }, _VERSE_CLAUSES, 3),
}  # fmt: skip
KINDS = tuple(TEMPLATES)


# the slot of each kind that says what a prompt is about: every HELD_OUT_EVERY-th of its choices
# is kept out of training, so that held-out prompts are about things never trained on
CONTENT_SLOT = {"code": "task", "explanation": "topic", "arithmetic": "a", "json": "thing",
                "verse": "subject"}  # fmt: skip
HELD_OUT_EVERY = 4
SPLITS = ("train", "held-out")


def _slots(kind: str, split: str) -> dict[str, list[str]]:
    """The slot choices of ``kind`` that prompts of ``split`` draw from."""
    _, slots, _, _ = TEMPLATES[kind]
    content = slots[CONTENT_SLOT[kind]]
    held = split == "held-out"
    kept = [c for i, c in enumerate(content) if (i % HELD_OUT_EVERY == HELD_OUT_EVERY - 1) == held]
    return {**slots, CONTENT_SLOT[kind]: kept}


def capacity(kind: str, split: str = "train") -> int:
    """How many distinct prompts ``kind`` has in ``split``."""
    _, _, clauses, most = TEMPLATES[kind]
    orders = sum(math.perm(len(clauses), k) for k in range(most + 1))
    return math.prod(len(choices) for choices in _slots(kind, split).values()) * orders


def prompt_of(kind: str, rng: random.Random, split: str = "train") -> str:
    """One prompt of ``kind`` in ``split``, drawn from ``rng``."""
    template, _, clauses, most = TEMPLATES[kind]
    slots = _slots(kind, split)
    text = template.format(**{name: rng.choice(choices) for name, choices in slots.items()})
    return " ".join([text, *rng.sample(clauses, rng.randint(0, most))])


def prompts(
    seed: int, count: int, exclude: Iterable[str] = (), split: str = "train"
) -> list[tuple[str, str]]:
    """``count`` distinct (kind, prompt) pairs of ``split``, the kinds in turn; none of
    ``exclude`` nor sharing five words in a row with one. The held-out split's prompts are
    about other things than the training's."""
    per_kind_most = min(capacity(k, split) for k in KINDS) // 2  # rejection draws stay quick
    most = per_kind_most * len(KINDS)
    if -(-count // len(KINDS)) > per_kind_most:
        raise SystemExit(
            f"make-dflash-drafter: --prompts {count} is more than these templates draw from "
            f"comfortably; give --prompts {most} or fewer"
        )
    rng = random.Random(f"{seed}/{split}")
    seen = set(exclude)
    kept_out = set().union(*(word_runs(text) for text in seen if text))
    out: list[tuple[str, str]] = []
    while len(out) < count:
        kind = KINDS[len(out) % len(KINDS)]
        text = prompt_of(kind, rng, split)
        if text not in seen and not word_runs(text) & kept_out:
            seen.add(text)
            out.append((kind, text))
    return out


def word_runs(text: str, n: int = 5) -> set[tuple[str, ...]]:
    """The runs of ``n`` words in ``text`` (lower case, letters and digits): a drawn prompt
    that shares one with an excluded text (the suite's own prompts) is drawn again."""
    words = re.findall(r"[a-z0-9]+", text.lower())
    return {tuple(words[i : i + n]) for i in range(len(words) - n + 1)}


# --- the recipe -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Recipe:
    seed: int = 1
    prompts: int = 16384
    gen_tokens: int = 160
    gen_batch: int = 512
    layers: int = 3
    ffn: int = 1536
    target_layer_ids: tuple[int, ...] = (1, 8, 14, 20, 27)
    block_size: int = 16
    mask_token_id: int = 0
    steps: int = 9000
    batch: int = 32
    anchors: int = 16
    lr: float = 8e-4
    warmup: int = 200
    gamma: float = 7.0
    eval_every: int = 250
    eval_sequences: int = 64
    eval_workload: str = "seed"  # the suite's prompts the accept length is also measured on
    generator: str = GENERATOR

    def check(self) -> None:
        for name in ("prompts", "gen_batch", "layers", "ffn", "steps", "batch"):
            if getattr(self, name) < 1:
                raise SystemExit(f"make-dflash-drafter: --{name.replace('_', '-')} must be >= 1")
        if self.gen_tokens < 2:
            raise SystemExit(
                f"make-dflash-drafter: --gen-tokens {self.gen_tokens}: give 2 or more (a drafted "
                "token needs one after it to be checked against)"
            )
        if self.block_size < 2:
            raise SystemExit(f"make-dflash-drafter: --block-size {self.block_size}: give 2 or more")
        if not 1 < self.eval_sequences < self.prompts:
            raise SystemExit(
                f"make-dflash-drafter: --eval-sequences {self.eval_sequences} must be between 2 "
                f"(half choose the weights kept, half report) and --prompts - 1 "
                f"({self.prompts - 1})"
            )
        if self.eval_workload:
            workload_prompts(self.eval_workload)  # names the workloads there are


# --- the drafter, in plain torch ------------------------------------------------------------


def compute_dtype(device_type: str) -> str:
    """The dtype the drafter's forward passes compute in, in training and evaluation (the
    weights and the optimizer are float32 either way): bfloat16 autocast on a GPU, the
    recipe's; float32 on a CPU, where bfloat16 is fast only with native support (AVX512-BF16,
    AMX) and otherwise falls back to torch's reference GEMM (the tests' 40-step recipe trained
    in 1082 s there on a 2-core AMD EPYC without it, in 98 s in float32: docs/dflash-drafter.md).
    Recorded in the sidecar (``training.compute_dtype``)."""
    return "float32" if device_type == "cpu" else "bfloat16"


def autocast(torch: Any, device_type: str) -> Any:
    """The context the drafter's forward passes run in on ``device_type`` (``compute_dtype``)."""
    if compute_dtype(device_type) == "float32":
        return contextlib.nullcontext()
    return torch.autocast(device_type, dtype=torch.bfloat16)


def build_modules(torch: Any) -> Any:
    """The drafter's modules (torch is imported by the caller: the module imports without it)."""
    nn, F = torch.nn, torch.nn.functional

    class RMSNorm(nn.Module):  # type: ignore[misc, name-defined]
        def __init__(self, dim: int, eps: float) -> None:
            super().__init__()
            self.weight = nn.Parameter(torch.ones(dim))
            self.eps = eps

        def forward(self, x: Any) -> Any:
            x32 = x.float()
            x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
            return x32.to(x.dtype) * self.weight.to(x.dtype)

    def rope(x: Any, pos: Any, theta: float) -> Any:
        """Rotary embedding, NeoX layout (halves), x: [..., T, heads, d], pos: [..., T]."""
        d = x.shape[-1]
        inv = 1.0 / (theta ** (torch.arange(0, d, 2, device=x.device, dtype=torch.float32) / d))
        ang = pos.float()[..., None] * inv  # [..., T, d/2]
        cos, sin = ang.cos()[..., None, :], ang.sin()[..., None, :]
        x1, x2 = x.float()[..., : d // 2], x.float()[..., d // 2 :]
        return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), -1).to(x.dtype)

    class Attention(nn.Module):  # type: ignore[misc, name-defined]
        def __init__(self, hidden: int, heads: int, kv: int, head_dim: int, eps: float) -> None:
            super().__init__()
            self.heads, self.kv, self.head_dim = heads, kv, head_dim
            self.q_proj = nn.Linear(hidden, heads * head_dim, bias=False)
            self.k_proj = nn.Linear(hidden, kv * head_dim, bias=False)
            self.v_proj = nn.Linear(hidden, kv * head_dim, bias=False)
            self.o_proj = nn.Linear(heads * head_dim, hidden, bias=False)
            self.q_norm = RMSNorm(head_dim, eps)
            self.k_norm = RMSNorm(head_dim, eps)

        def context_kv(self, ctx: Any, pos: Any, theta: float) -> tuple[Any, Any]:
            """Keys and values of context entries, as the server materializes them."""
            shape = (*ctx.shape[:-1], self.kv, self.head_dim)
            k = rope(self.k_norm(self.k_proj(ctx).view(shape)), pos, theta)
            return k, self.v_proj(ctx).view(shape)

        def forward(self, x: Any, pos: Any, ctx_k: Any, ctx_v: Any, mask: Any, theta: float) -> Any:
            """x: [B, Q, H] block entries; ctx_k/v: [B, T, kv, d]; mask: [B, Q, T + Q] bool."""
            b, q_len, _ = x.shape
            q = self.q_norm(self.q_proj(x).view(b, q_len, self.heads, self.head_dim))
            k, v = self.context_kv(x, pos, theta)
            q = rope(q, pos, theta)
            keys = torch.cat((ctx_k, k), 1).transpose(1, 2)  # [B, kv, T + Q, d]
            values = torch.cat((ctx_v, v), 1).transpose(1, 2)
            group = self.heads // self.kv
            keys = keys.repeat_interleave(group, 1)
            values = values.repeat_interleave(group, 1)
            out = F.scaled_dot_product_attention(
                q.transpose(1, 2), keys, values, attn_mask=mask[:, None], scale=self.head_dim**-0.5
            )
            return self.o_proj(out.transpose(1, 2).reshape(b, q_len, -1))

    class MLP(nn.Module):  # type: ignore[misc, name-defined]
        def __init__(self, hidden: int, ffn: int) -> None:
            super().__init__()
            self.gate_proj = nn.Linear(hidden, ffn, bias=False)
            self.up_proj = nn.Linear(hidden, ffn, bias=False)
            self.down_proj = nn.Linear(ffn, hidden, bias=False)

        def forward(self, x: Any) -> Any:
            return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))

    class Layer(nn.Module):  # type: ignore[misc, name-defined]
        def __init__(self, config: dict[str, Any]) -> None:
            super().__init__()
            hidden, eps = config["hidden_size"], float(config["rms_norm_eps"])
            self.input_layernorm = RMSNorm(hidden, eps)
            self.self_attn = Attention(
                hidden, config["num_attention_heads"], config["num_key_value_heads"],
                config["head_dim"], eps,
            )  # fmt: skip
            self.post_attention_layernorm = RMSNorm(hidden, eps)
            self.mlp = MLP(hidden, config["intermediate_size"])

    class Drafter(nn.Module):  # type: ignore[misc, name-defined]
        """DFlashDraftModel's weights and forward; the embedding and head are the target's."""

        def __init__(self, config: dict[str, Any]) -> None:
            super().__init__()
            hidden, eps = config["hidden_size"], float(config["rms_norm_eps"])
            ids = config["dflash_config"]["target_layer_ids"]
            self.theta = rope_theta(config)
            self.fc = nn.Linear(len(ids) * hidden, hidden, bias=False)
            self.hidden_norm = RMSNorm(hidden, eps)
            self.layers = nn.ModuleList(Layer(config) for _ in range(config["num_hidden_layers"]))
            self.norm = RMSNorm(hidden, eps)

        def forward(self, feats: Any, ctx_pos: Any, block: Any, block_pos: Any, mask: Any) -> Any:
            """Hidden states of block entries [B, Q, H] over context features [B, T, K*H]."""
            ctx = self.hidden_norm(self.fc(feats.to(self.fc.weight.dtype)))
            h = block
            for layer in self.layers:
                attn = layer.self_attn
                ctx_k, ctx_v = attn.context_kv(ctx, ctx_pos, self.theta)
                h = h + attn(layer.input_layernorm(h), block_pos, ctx_k, ctx_v, mask, self.theta)
                h = h + layer.mlp(layer.post_attention_layernorm(h))
            return self.norm(h)

        def draft_one(self, feats: Any, block: Any, n: int) -> Any:
            """One block the server's way: the n context entries' keys and values first (as
            materialized in its cache), then the block alone attending to them and to itself.
            feats: [n, K*H], block: [S, H]; returns [S, H]."""
            ctx = self.hidden_norm(self.fc(feats[:n].to(self.fc.weight.dtype)))
            ctx_pos = torch.arange(n, device=feats.device)
            pos = torch.arange(n, n + block.shape[0], device=feats.device)
            everything = torch.ones(1, block.shape[0], n + block.shape[0], dtype=torch.bool,
                                    device=feats.device)  # fmt: skip
            h = block[None]
            for layer in self.layers:
                attn = layer.self_attn
                ctx_k, ctx_v = attn.context_kv(ctx[None], ctx_pos[None], self.theta)
                h = h + attn(
                    layer.input_layernorm(h), pos[None], ctx_k, ctx_v, everything, self.theta
                )
                h = h + layer.mlp(layer.post_attention_layernorm(h))
            return self.norm(h)[0]

    return Drafter


def rope_theta(config: dict[str, Any]) -> float:
    params = config.get("rope_parameters") or {}
    return float(config.get("rope_theta") or params.get("rope_theta") or 10000.0)


# --- data: the target's greedy continuations and hidden states ------------------------------


@dataclass
class Data:
    tokens: Any  # [N, T] long, right-padded
    feats: Any  # [N, T, K*H] target dtype
    lengths: Any  # [N]
    prompt_lengths: Any  # [N]
    seconds: float = 0.0


def load_target(path: Path, device: str, dtype: Any) -> tuple[Any, Any]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(path))
    model = AutoModelForCausalLM.from_pretrained(str(path), dtype=dtype).to(device)
    model.eval()
    return model, tokenizer


def target_lookup(torch: Any, model: Any) -> tuple[Any, Any]:
    """What the drafter borrows from the target: its embedding (ids -> float32 vectors) and
    its LM head's weight."""
    embed_w = model.get_input_embeddings().weight.detach()

    def embed(ids: Any) -> Any:
        return torch.nn.functional.embedding(ids, embed_w).float()

    return embed, model.get_output_embeddings().weight.detach()


def render(tokenizer: Any, text: str) -> list[int]:
    ids = tokenizer.apply_chat_template(
        [{"role": "user", "content": text}], add_generation_prompt=True, tokenize=True
    )
    if isinstance(ids, dict) or hasattr(ids, "input_ids"):  # a BatchEncoding
        ids = ids["input_ids"]
    return [int(i) for i in ids]


def _captured(hidden_states: Sequence[Any], layer_ids: Sequence[int]) -> Any:
    import torch

    return torch.cat([hidden_states[i + 1] for i in layer_ids], -1)


def generate(torch: Any, model: Any, rendered: list[list[int]], recipe: Recipe, log: Any) -> Data:
    """Greedy continuations of ``gen_tokens`` tokens (past any end of text, as the suite's
    fixed-length requests), and the captured hidden states of every token fed to the target."""
    device = next(model.parameters()).device
    width = max(map(len, rendered)) + recipe.gen_tokens
    n = len(rendered)
    kh = len(recipe.target_layer_ids) * model.config.hidden_size
    tokens = torch.zeros(n, width, dtype=torch.long, device=device)
    feats = torch.zeros(n, width, kh, dtype=model.dtype, device=device)
    lengths = torch.zeros(n, dtype=torch.long, device=device)
    prompt_lengths = torch.tensor([len(r) for r in rendered], device=device)
    # batches of prompts of about the same length: a batch is padded to its longest prompt
    order = sorted(range(n), key=lambda i: len(rendered[i]))
    start = time.monotonic()
    for first in range(0, n, recipe.gen_batch):
        index = order[first : first + recipe.gen_batch]
        rows = [rendered[i] for i in index]
        at = torch.tensor(index, device=device)
        b, longest = len(rows), max(map(len, rows))
        ids = torch.zeros(b, longest, dtype=torch.long, device=device)
        mask = torch.zeros(b, longest, dtype=torch.long, device=device)
        for i, r in enumerate(rows):  # left padding: every row's last token is in the last column
            ids[i, longest - len(r) :] = torch.tensor(r, device=device)
            mask[i, longest - len(r) :] = 1
        pos = (mask.cumsum(-1) - 1).clamp(min=0)
        with torch.no_grad():
            out = model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=True,
                        output_hidden_states=True, logits_to_keep=1)  # fmt: skip
            cap = _captured(out.hidden_states, recipe.target_layer_ids)
            for i, r in enumerate(rows):
                tokens[index[i], : len(r)] = ids[i, longest - len(r) :]
                feats[index[i], : len(r)] = cap[i, longest - len(r) :]
            nxt = out.logits[:, -1].argmax(-1)
            past, last = out.past_key_values, pos[:, -1]
            lens = torch.tensor([len(r) for r in rows], device=device)
            for step in range(recipe.gen_tokens):
                tokens[at, lens + step] = nxt
                if step == recipe.gen_tokens - 1:
                    break
                mask = torch.cat((mask, torch.ones(b, 1, dtype=mask.dtype, device=device)), 1)
                last = last + 1
                out = model(
                    input_ids=nxt[:, None], attention_mask=mask, position_ids=last[:, None],
                    past_key_values=past, use_cache=True, output_hidden_states=True,
                )  # fmt: skip
                feats[at, lens + step] = _captured(out.hidden_states, recipe.target_layer_ids)[:, 0]
                past, nxt = out.past_key_values, out.logits[:, -1].argmax(-1)
        lengths[at] = lens + recipe.gen_tokens
        log(f"generated {min(first + b, n)}/{n} continuations ({time.monotonic() - start:.0f} s)")
    return Data(tokens, feats, lengths, prompt_lengths, time.monotonic() - start)


# --- training ---------------------------------------------------------------------------------


def block_inputs(
    torch: Any, data: Data, rows: Any, anchors: Any, recipe: Recipe, embed: Any
) -> tuple[Any, Any, Any, Any, Any]:
    """Block embeddings, positions, attention mask, labels and label weights for ``anchors``
    ([B, A] positions of the bonus token in each row)."""
    s = recipe.block_size
    b, a = anchors.shape
    device = anchors.device
    offs = torch.arange(s, device=device)
    pos = (anchors[:, :, None] + offs).reshape(b, a * s)  # [B, A*S]
    ids = torch.full((b, a, s), recipe.mask_token_id, dtype=torch.long, device=device)
    ids[:, :, 0] = data.tokens[rows].gather(1, anchors)
    block = embed(ids.reshape(b, a * s))
    t = data.tokens.shape[1]
    ctx_ok = torch.arange(t, device=device)[None, None, :] < anchors[:, :, None]  # [B, A, T]
    ctx_ok = ctx_ok[:, :, None, :].expand(b, a, s, t).reshape(b, a * s, t)
    same = torch.eye(a, dtype=torch.bool, device=device)[:, None, :, None]
    same = same.expand(a, s, a, s).reshape(a * s, a * s)[None].expand(b, -1, -1)
    mask = torch.cat((ctx_ok, same), -1)
    label_pos = (anchors[:, :, None] + offs[1:]).clamp(max=t - 1)  # [B, A, S-1]
    labels = data.tokens[rows][torch.arange(b, device=device)[:, None, None], label_pos]
    valid = (anchors[:, :, None] + offs[1:]) < data.lengths[rows][:, None, None]
    weights = torch.exp(-(offs[1:].float() - 1) / recipe.gamma)[None, None] * valid
    return block, pos, mask, labels, weights


def draft_logits(drafter: Any, data: Data, rows: Any, inputs: tuple[Any, ...], head: Any) -> Any:
    import torch

    block, pos, mask, _, _ = inputs
    t = data.tokens.shape[1]
    ctx_pos = torch.arange(t, device=block.device)[None].expand(len(rows), t)
    h = drafter(data.feats[rows], ctx_pos, block, pos, mask)
    b, q, hidden = h.shape
    s = inputs[3].shape[2] + 1
    h = h.view(b, q // s, s, hidden)[:, :, 1:]
    return h @ head.t().to(h.dtype)


def sample_anchors(torch: Any, data: Data, rows: Any, count: int, gen: Any) -> Any:
    """Anchors in the generated part of each row, with at least one token after them."""
    low = data.prompt_lengths[rows]
    high = data.lengths[rows] - 1
    u = torch.rand(len(rows), count, generator=gen, device=low.device)
    return low[:, None] + (u * (high - low)[:, None]).long()


def anchor_runs(
    torch: Any, drafter: Any, data: Data, rows: Any, recipe: Recipe, embed: Any, head: Any
) -> Any:
    """[R, gen_tokens - 1] for ``rows``: the drafted tokens accepted at an anchor on each
    position of the continuation, up to the first that differs from the target's greedy
    token (what SGLang's greedy verification accepts there)."""
    at = torch.arange(recipe.gen_tokens - 1, device=data.tokens.device)
    runs = []
    with torch.no_grad():
        for i in range(0, len(rows), 4):
            chunk = rows[i : i + 4]
            anchors = data.prompt_lengths[chunk][:, None] + at[None]
            inputs = block_inputs(torch, data, chunk, anchors, recipe, embed)
            with autocast(torch, data.tokens.device.type):
                logits = draft_logits(drafter, data, chunk, inputs, head)
            hit = (logits.argmax(-1) == inputs[3]) & (inputs[4] > 0)
            runs.append(hit.long().cumprod(-1).sum(-1))  # 1 while every earlier one was accepted
    return torch.cat(runs).cpu()


def served_walk(
    run_at: Callable[[int], int], length: int, block_size: int
) -> tuple[int, int, list[int]]:
    """The server's greedy walk over one continuation of ``length`` tokens: draft at the
    first generated token, accept ``run_at(anchor)`` drafted tokens plus the target's own, draft
    again after them. Returns (tokens, verify steps, steps that accepted drafted position k)."""
    at, tokens, steps, reached = 0, 0, 0, [0] * (block_size - 1)
    while at < length:
        run = run_at(at)
        tokens, steps, at = tokens + run + 1, steps + 1, at + run + 1
        for k in range(run):
            reached[k] += 1
    return tokens, steps, reached


def walk_summary(walks: Sequence[tuple[int, int, list[int]]]) -> dict[str, Any]:
    """Accept length as the suite reports it (the geometric mean over continuations of tokens
    per verify step), each continuation's, and the acceptance by drafted position over all
    verify steps."""
    by_row = [w[0] / w[1] for w in walks if w[1]]
    steps = sum(w[1] for w in walks)
    reached = [sum(w[2][k] for w in walks) for k in range(len(walks[0][2]))] if walks else []
    return {
        "accept_length": math.exp(sum(map(math.log, by_row)) / len(by_row)) if by_row else 1.0,
        "by_continuation": [round(a, 3) for a in by_row],
        "acceptance_by_position": [round(r / max(1, steps), 4) for r in reached],
    }


def each_prompt(names: Iterable[str], figures: dict[str, Any]) -> str:
    """``walk_summary``'s accept length per continuation, named: "fibonacci 3.28, ..."."""
    return ", ".join(
        f"{name} {a:.2f}" for name, a in zip(names, figures["by_continuation"], strict=True)
    )


def evaluate(
    torch: Any, drafter: Any, data: Data, rows: Any, recipe: Recipe, embed: Any, head: Any
) -> dict[str, Any]:
    """Accept length on ``rows`` as the server gets it: each continuation walked the server's
    way (``served_walk``), then summarised as the suite reports it (``walk_summary``). Beside
    it, the mean over every anchor of the continuation: a position where the drafter does well
    counts once there, however few verify steps the server spends on it."""
    runs = anchor_runs(torch, drafter, data, rows, recipe, embed, head).tolist()
    walks = [served_walk(r.__getitem__, len(r), recipe.block_size) for r in runs]
    every = [x for r in runs for x in r]
    mean_every = 1 + sum(every) / max(1, len(every))
    return {**walk_summary(walks), "every_anchor_accept_length": round(mean_every, 4)}


def train(
    torch: Any, drafter: Any, data: Data, recipe: Recipe, embed: Any, head: Any, log: Any,
    max_seconds: float | None, workload: Data | None = None,
) -> dict[str, Any]:  # fmt: skip
    """Train; every ``eval_every`` steps the accept length on the held-out continuations (of
    prompts about things never trained on) and, with ``workload``, on the continuations of
    the suite's own prompts (report only). The held-out rows are split in two: the weights
    kept are those of the evaluation with the best accept length on the first half (a small
    drafter on a few thousand sequences can memorise them, and then do worse on new text
    while its loss still drops), and the figure reported is the second half's, which chose
    nothing."""
    device = data.tokens.device
    n = data.tokens.shape[0]
    train_rows = n - recipe.eval_sequences
    choose = torch.arange(train_rows, train_rows + recipe.eval_sequences // 2, device=device)
    held = torch.arange(train_rows + recipe.eval_sequences // 2, n, device=device)
    gen = torch.Generator(device=device).manual_seed(recipe.seed)
    opt = torch.optim.AdamW(drafter.parameters(), lr=recipe.lr, betas=(0.9, 0.95),
                            weight_decay=0.0)  # fmt: skip

    def lr_at(step: int) -> float:
        if step < recipe.warmup:
            return recipe.lr * (step + 1) / recipe.warmup
        done = (step - recipe.warmup) / max(1, recipe.steps - recipe.warmup)
        return recipe.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * done)))

    loss_curve: list[list[float]] = []
    accept_curve: list[list[float]] = []
    workload_curve: list[list[float]] = []
    choose_curve: list[list[float]] = []
    # the kept weights (a copy on the device), the step and the measurements at that step
    kept: dict[str, Any] = {"step": -1, "accept": -1.0}

    def measure(at: int) -> str:
        chooser = evaluate(torch, drafter, data, choose, recipe, embed, head)["accept_length"]
        choose_curve.append([at, round(chooser, 4)])
        held_out = evaluate(torch, drafter, data, held, recipe, embed, head)
        accept_curve.append([at, round(held_out["accept_length"], 4)])
        said = f"held-out accept length {held_out['accept_length']:.2f}"
        on = None
        if workload is not None:
            rows = torch.arange(workload.tokens.shape[0], device=device)
            on = evaluate(torch, drafter, workload, rows, recipe, embed, head)
            workload_curve.append([at, round(on["accept_length"], 4)])
            said += f", on the {recipe.eval_workload} prompts {on['accept_length']:.2f}"
        if chooser > kept["accept"]:
            state = {k: v.detach().clone() for k, v in drafter.state_dict().items()}
            kept.update(step=at, accept=chooser, state=state,
                        final=held_out, final_workload=on)  # fmt: skip
        return said

    measure(0)
    start, steps_done, stopped_early = time.monotonic(), 0, False
    # the loss summed on the device (float64, as Python would add it): no sync at every step
    window, window_n = torch.zeros((), dtype=torch.float64, device=device), 0
    for step in range(recipe.steps):
        if max_seconds is not None and time.monotonic() - start > max_seconds:
            stopped_early = True
            log(f"stopped at step {step}: --max-minutes reached")
            break
        for group in opt.param_groups:
            group["lr"] = lr_at(step)
        rows = torch.randint(0, train_rows, (recipe.batch,), generator=gen, device=device)
        anchors = sample_anchors(torch, data, rows, recipe.anchors, gen)
        inputs = block_inputs(torch, data, rows, anchors, recipe, embed)
        with autocast(torch, device.type):
            logits = draft_logits(drafter, data, rows, inputs, head)
        ce = torch.nn.functional.cross_entropy(
            logits.float().flatten(0, 2), inputs[3].flatten(), reduction="none"
        ).view_as(inputs[4])
        loss = (ce * inputs[4]).sum() / inputs[4].sum().clamp(min=1e-6)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(drafter.parameters(), 1.0)
        opt.step()
        steps_done = step + 1
        window, window_n = window + loss.detach().double(), window_n + 1
        if steps_done % max(1, recipe.eval_every // 10) == 0 or steps_done == recipe.steps:
            loss_curve.append([steps_done, round(float(window) / window_n, 4)])
            window, window_n = torch.zeros_like(window), 0
        if steps_done % recipe.eval_every == 0 or steps_done == recipe.steps:
            said = measure(steps_done)
            log(f"step {steps_done}: loss {loss_curve[-1][1]:.3f}, {said} "
                f"({time.monotonic() - start:.0f} s)")  # fmt: skip
    if accept_curve[-1][0] != steps_done:  # stopped between evaluations
        measure(steps_done)
    drafter.load_state_dict(kept["state"])
    if kept["step"] != steps_done:
        log(f"kept the weights of step {kept['step']}: the best accept length on the held-out "
            f"rows that choose ({kept['accept']:.2f})")  # fmt: skip
    on_workload = {} if workload is None else {
        "workload_accept_length": workload_curve, "final_workload": kept["final_workload"],
    }  # fmt: skip
    return {
        "compute_dtype": compute_dtype(device.type),
        "steps_done": steps_done,
        "stopped_early": stopped_early,
        "seconds": round(time.monotonic() - start, 1),
        "loss": loss_curve,
        "accept_length": accept_curve,
        "choosing_accept_length": choose_curve,
        "kept_step": kept["step"],
        "final": kept["final"],
        **on_workload,
    }


def server_path_check(
    torch: Any, drafter: Any, data: Data, recipe: Recipe, embed: Any, head: Any
) -> dict[str, Any]:
    """The drafted tokens of a few held-out anchors, computed the training way and the way the
    server computes them: they must agree."""
    n = data.tokens.shape[0]
    rows = torch.arange(n - min(4, recipe.eval_sequences), n, device=data.tokens.device)
    anchors = data.prompt_lengths[rows][:, None] + torch.tensor([0, 3], device=rows.device)
    agree, worst = 0, 0.0
    with torch.no_grad():
        inputs = block_inputs(torch, data, rows, anchors, recipe, embed)
        batched = draft_logits(drafter, data, rows, inputs, head).float()
        s = recipe.block_size
        for i in range(len(rows)):
            for j in range(anchors.shape[1]):
                p = int(anchors[i, j])
                block = inputs[0][i, j * s : (j + 1) * s]
                h = drafter.draft_one(data.feats[rows[i]], block, p)[1:]
                one = (h @ head.t().to(h.dtype)).float()
                worst = max(worst, float((one - batched[i, j]).abs().max()))
                agree += int(torch.equal(one.argmax(-1), batched[i, j].argmax(-1)))
    return {"blocks": int(rows.numel() * anchors.shape[1]), "same_tokens": agree,
            "max_abs_logit_diff": round(worst, 6)}  # fmt: skip


# --- output -----------------------------------------------------------------------------------


def write_drafter(
    out: Path, drafter: Any, config: dict[str, Any], shapes: dict[str, tuple[int, ...]]
) -> str:
    """config.json and model.safetensors (float16), in the order and shapes SGLang reads."""
    import numpy as np

    state = {k: v.detach().float().cpu().numpy().astype(np.float16)
             for k, v in drafter.state_dict().items()}  # fmt: skip
    if {k: tuple(v.shape) for k, v in state.items()} != dict(shapes):
        raise SystemExit(
            "make-dflash-drafter: the trained weights do not have the names and shapes SGLang "
            f"reads: got {sorted(state)}, want {sorted(shapes)}"
        )
    return layout.write_weights(out, config, {name: state[name] for name in shapes})


def output_dir(target: Path, out_dir: Path | None, recipe: Recipe) -> Path:
    stem = target.name.removesuffix(".hf")
    name = f"{stem}.dflash-b{recipe.block_size}-distilled-seed{recipe.seed}.hf"
    return (out_dir or target.parent) / name


def target_identity(target: Path) -> dict[str, Any]:
    config = json.loads((target / "config.json").read_text(encoding="utf-8"))
    sidecar = target / folder.SIDECAR
    digest = json.loads(sidecar.read_text()).get("sha256") if sidecar.is_file() else None
    return {"name": target.name, "sha256": digest, "config": config}


def make(args: argparse.Namespace, recipe: Recipe, log: Any) -> Path:
    target: Path = args.target
    if not (target / "config.json").is_file():
        raise SystemExit(
            f"make-dflash-drafter: {target / 'config.json'} does not exist; give --target the "
            "Hugging Face folder of the target (make-memory-bound-models --format hf)"
        )
    recipe.check()
    identity = target_identity(target)
    target_config = identity["config"]
    config, shapes = layout.dflash(
        target_config, recipe.block_size, recipe.ffn, recipe.layers, list(recipe.target_layer_ids)
    )
    config["dflash_config"]["mask_token_id"] = recipe.mask_token_id
    out = output_dir(target, args.out, recipe)
    wanted = json.loads(json.dumps(
        {"recipe": asdict(recipe), "target": {k: identity[k] for k in ("name", "sha256")}}
    ))  # fmt: skip
    sidecar = out / folder.SIDECAR
    if sidecar.is_file() and not args.force:
        have = json.loads(sidecar.read_text(encoding="utf-8"))
        if {k: have.get(k) for k in wanted} == wanted:
            log(f"up to date: {out}")
            return out

    import torch

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(recipe.seed)
    if device == "cuda":
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True, warn_only=True)
    dtype = torch.float16 if device == "cuda" else torch.float32
    exclude = {json.loads(line).get("prompt") for line in _workload_lines()} - {None}
    # training prompts, then the held-out ones (the last rows): about other things
    drawn = prompts(recipe.seed, recipe.prompts - recipe.eval_sequences, exclude) + prompts(
        recipe.seed, recipe.eval_sequences, exclude, split="held-out"
    )
    began = time.monotonic()
    model, tokenizer = load_target(target, device, dtype)
    rendered = [render(tokenizer, text) for _, text in drawn]
    log(f"target loaded on {device} ({time.monotonic() - began:.0f} s); "
        f"{len(rendered)} prompts, {recipe.gen_tokens} tokens each")  # fmt: skip
    data = generate(torch, model, rendered, recipe, log)
    workload, texts = None, {}
    if recipe.eval_workload:
        texts = workload_prompts(recipe.eval_workload)
        workload = generate(torch, model, [render(tokenizer, t) for t in texts.values()], recipe,
                            log)  # fmt: skip
    embed, head = target_lookup(torch, model)
    del model
    if device == "cuda":
        torch.cuda.empty_cache()
    drafter = build_modules(torch)(config).to(device)
    for p in drafter.parameters():  # a trained layer's scale; norm gains of one
        if p.ndim > 1:
            torch.nn.init.normal_(p, std=0.02)
    result = train(torch, drafter, data, recipe, embed, head, log,
                   args.max_minutes * 60 if args.max_minutes else None, workload)  # fmt: skip
    check = server_path_check(torch, drafter, data, recipe, embed, head)
    if check["same_tokens"] != check["blocks"]:
        raise SystemExit(f"make-dflash-drafter: the server's path drafts other tokens: {check}")
    part = out.with_name(out.name + ".part")
    shutil.rmtree(part, ignore_errors=True)
    digest = write_drafter(part, drafter, config, shapes)
    kinds = {k: sum(1 for kind, _ in drawn if kind == k) for k in KINDS}
    folder.write_json(
        part / folder.SIDECAR,
        {
            **wanted,
            "sha256": digest,
            "params": sum(math.prod(s) for s in shapes.values()),
            "device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
            "torch": torch.__version__,
            "data": {
                "prompts_by_kind": kinds,
                "tokens": int((data.lengths - data.prompt_lengths).sum()),
                "generate_s": round(data.seconds, 1),
                "held_out_sequences": recipe.eval_sequences,
                "workload_sequences": 0 if workload is None else int(workload.tokens.shape[0]),
                "workload_prompts": list(texts),
            },
            "training": result,
            "server_path_check": check,
            "total_s": round(time.monotonic() - began, 1),
        },
    )
    if out.exists():
        shutil.rmtree(out)
    os.replace(part, out)
    on = result.get("final_workload")
    log(f"wrote {out}: held-out accept length {result['final']['accept_length']:.2f}"
        + (f", on the {recipe.eval_workload} prompts {on['accept_length']:.2f} "
           f"({each_prompt(texts, on)})" if on else "")
        + f", {result['steps_done']} steps, {time.monotonic() - began:.0f} s in all")  # fmt: skip
    return out


def _workload_lines() -> list[str]:
    """The suite's own prompts: the drafter is never trained on them."""
    return [line for f in sorted(PROMPTS.glob("*.jsonl"))
            for line in f.read_text(encoding="utf-8").splitlines() if line.strip()]  # fmt: skip


def workload_prompts(name: str) -> dict[str, str]:
    """The prompts of the suite's built-in workload ``name`` (single-turn ones), by id, in the
    workload's order."""
    path = PROMPTS / f"{name}.jsonl"
    if not path.is_file():
        names = ", ".join(sorted(f.stem for f in PROMPTS.glob("*.jsonl")))
        raise SystemExit(
            f"make-dflash-drafter: --eval-workload {name!r} is not a built-in workload; give "
            f"one of {names}, or '' to measure on held-out continuations only"
        )
    lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()
             if line.strip()]  # fmt: skip
    texts = {str(d.get("id", i)): str(d["prompt"]) for i, d in enumerate(lines) if d.get("prompt")}
    if not texts:
        raise SystemExit(f"make-dflash-drafter: --eval-workload {name!r} has no single-turn "
                         "prompts to continue; give seed")  # fmt: skip
    return texts


# --- the chart --------------------------------------------------------------------------------


def chart(sidecar: dict[str, Any]) -> str:
    """An SVG of the training loss and the accept length by step: on held-out continuations
    and, where measured, on the suite's own prompts."""
    training = sidecar["training"]
    workload = sidecar.get("recipe", {}).get("eval_workload") or "workload"
    accept = [("held-out continuations", training["accept_length"], "#d62728")]
    if training.get("workload_accept_length"):
        accept.append((f"the {workload} prompts", training["workload_accept_length"], "#2ca02c"))
    panels = [("training loss (weighted cross-entropy)",
               [("loss", training["loss"], "#1f77b4")]),
              ("accept length (tokens per verify step)", accept)]  # fmt: skip
    w, h, pad = 640, 220, 50
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{2 * h + 30}" '
             'font-family="sans-serif" font-size="12">',
             f'<rect width="{w}" height="{2 * h + 30}" fill="white"/>']  # fmt: skip
    last = max(float(training["steps_done"]), 1.0)
    for i, (title, series) in enumerate(panels):
        top = i * h + 20
        ys = [float(p[1]) for _, points, _ in series for p in points]
        lo, hi = min([*ys, 0.0]), max(ys) * 1.05 or 1.0
        x0, x1, y0, y1 = pad, w - 20, top + h - 40, top + 20

        def px(step: float, value: float) -> tuple[float, float]:
            return (x0 + (x1 - x0) * step / last, y0 - (y0 - y1) * (value - lo) / (hi - lo))  # noqa: B023

        parts += [
            f'<text x="{x0}" y="{top + 12}" font-weight="bold">{title}</text>',
            f'<line x1="{x0}" y1="{y0}" x2="{x1}" y2="{y0}" stroke="black"/>',
            f'<line x1="{x0}" y1="{y0}" x2="{x0}" y2="{y1}" stroke="black"/>',
            f'<text x="{x0 - 5}" y="{y0}" text-anchor="end">{lo:.2f}</text>',
            f'<text x="{x0 - 5}" y="{y1 + 4}" text-anchor="end">{hi:.2f}</text>',
            f'<text x="{x1}" y="{y0 + 15}" text-anchor="end">step {int(last)}</text>',
            f'<text x="{x0}" y="{y0 + 15}">0</text>',
        ]
        if i == 1 and training.get("kept_step") is not None:  # the step whose weights were kept
            kx = px(float(training["kept_step"]), lo)[0]
            parts.append(f'<line x1="{kx:.1f}" y1="{y0}" x2="{kx:.1f}" y2="{y1}" '
                         'stroke="grey" stroke-dasharray="4 3"/>')  # fmt: skip
        for j, (name, points, colour) in enumerate(series):
            coords = " ".join(f"{a:.1f},{b:.1f}" for a, b in (px(p[0], p[1]) for p in points))
            parts.append(
                f'<polyline fill="none" stroke="{colour}" stroke-width="2" points="{coords}"/>'
            )
            if len(series) > 1:
                parts.append(f'<text x="{x1}" y="{y1 + 14 * (j + 1)}" text-anchor="end" '
                             f'fill="{colour}">{name}</text>')  # fmt: skip
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


# --- command line -----------------------------------------------------------------------------


def _ids(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r}: give target layer ids as integers separated by commas, e.g. 1,8,14,20,27"
        ) from None


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["chart"]:
        if len(argv) != 3:
            raise SystemExit("usage: make-dflash-drafter chart SIDECAR.json OUT.svg")
        svg = chart(json.loads(Path(argv[1]).read_text(encoding="utf-8")))
        part = Path(argv[2] + ".part")
        part.write_text(svg, encoding="utf-8")
        os.replace(part, argv[2])
        return 0
    d = Recipe()
    p = argparse.ArgumentParser(prog="make-dflash-drafter", description=__doc__.split("\n")[0])
    p.add_argument("--target", type=Path, required=True, help="the target's Hugging Face folder")
    p.add_argument("--out", type=Path, help="folder for the drafter (default: the target's)")
    p.add_argument("--device", help="cuda or cpu (default: cuda where there is one)")
    p.add_argument("--force", action="store_true", help="train again even if up to date")
    p.add_argument("--max-minutes", type=float,
                   help="stop training after this long (recorded in the sidecar)")  # fmt: skip
    p.add_argument("--target-layer-ids", type=_ids, default=d.target_layer_ids,
                   help="target layers feeding the drafter (default %(default)s)")  # fmt: skip
    for name in ("seed", "prompts", "gen_tokens", "gen_batch", "layers", "ffn", "block_size",
                 "mask_token_id", "steps", "batch", "anchors", "warmup", "eval_every",
                 "eval_sequences"):  # fmt: skip
        p.add_argument(f"--{name.replace('_', '-')}", type=int, default=getattr(d, name),
                       help="default %(default)s")  # fmt: skip
    p.add_argument("--eval-workload", default=d.eval_workload,
                   help="built-in workload whose prompts the accept length is also measured "
                        "on, never trained on ('' for none; default %(default)s)")  # fmt: skip
    for name in ("lr", "gamma"):
        p.add_argument(
            f"--{name}", type=float, default=getattr(d, name), help="default %(default)s"
        )
    args = p.parse_args(argv)
    fields = {f for f in Recipe.__dataclass_fields__ if f != "generator"}
    recipe = Recipe(**{f: getattr(args, f) for f in fields})

    def log(message: str) -> None:
        print(f"[make-dflash-drafter] {message}", file=sys.stderr, flush=True)

    print(make(args, recipe, log))
    return 0


if __name__ == "__main__":
    sys.exit(main())
