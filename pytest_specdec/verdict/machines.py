"""Which machine ran a session, and which stored sessions a night is judged against.

A baseline is keyed by the hardware's model (GPU name, count, driver, power limit), so every
H200 shares one. Under load, though, a level's throughput follows the host's pace, and rented
GPUs of one model sit in hosts that differ: on three H200s `baseline` at 64 clients read
8,536-9,135 tok/s on two and 7,878-8,173 on the third with the same kernel speed
(docs/gpu-run.md, "A fourteenth H200"). Each stored session records its machine (a digest of
its GPUs' UUIDs); a night is judged against its own machine's sessions where enough of them are
stored (``--specdec-same-machine``), and says so, or says how many of the stored ran on it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

Session = TypeVar("Session", bound=Mapping[str, Any])

SAME_MACHINE = ("auto", "always", "never")  # --specdec-same-machine


def machine_of(results: Mapping[str, Any]) -> str | None:
    """Which machine a run measured on: a short digest of its GPUs' UUIDs (NVML), the same for
    every run on those GPUs and for no other machine of the same model (the hardware key says
    only the model). None without a GPU UUID: a CPU run, or NVML not read."""
    devices = (results.get("gpu") or {}).get("devices") or []
    uuids = sorted(str(d["uuid"]) for d in devices if isinstance(d, Mapping) and d.get("uuid"))
    return hashlib.sha256("|".join(uuids).encode()).hexdigest()[:12] if uuids else None


def machine_note(tonight: str | None, stored: Sequence[str | None]) -> str | None:
    """Whether tonight's machine ran the stored sessions, where both sides say (sessions stored
    before the field are not counted). Under load a level's throughput follows the host's pace,
    and on rented GPUs the host differs from one machine to the next: on three H200s the same
    settings read 8,536-9,135 tok/s at 64 clients on two of them and 7,878-8,173 on the third
    (docs/gpu-run.md, "A fourteenth H200"). None where there is nothing to say: tonight or every
    stored session unknown, or every known one on tonight's machine."""
    known = [m for m in stored if m]
    if tonight is None or not known:
        return None
    mine = sum(1 for m in known if m == tonight)
    others = len({m for m in known if m != tonight})
    if not others:
        return None
    where = f"{others} other machine{'s' * (others > 1)}"
    if mine:
        rest = len(known) - mine
        text = (f"tonight's machine ({tonight}) ran {mine} of the {_sessions(len(known))}; "
                f"the other {rest} ran on {where}")  # fmt: skip
    else:
        text = (f"tonight's machine ({tonight}) ran none of the {_sessions(len(known))}, which "
                f"ran on {where}: under load the host's pace differs between machines and moves "
                "throughput with the GPU's work unchanged (the GPU-work verdict does not follow "
                "it)")  # fmt: skip
    unknown = len(stored) - len(known)
    verb = "do not record their" if unknown > 1 else "does not record its"
    return text + (f"; {_sessions(unknown)} {verb} machine" if unknown else "")


def _sessions(n: int) -> str:
    return f"{n} stored session{'s' * (n != 1)}"


def machine_history(
    sessions: Sequence[Session], tonight: str | None, mode: str, least: int
) -> tuple[list[Session], str | None]:
    """The stored sessions a night is judged against, and the note that says which.

    ``never``: all of them (the note says how many ran on tonight's machine). ``always``: only
    tonight's machine's (none stored: an empty history, which judges nothing and says so).
    ``auto``: tonight's machine's where ``least`` of them (a final verdict's history) are
    stored and other machines' are too, else all. A night whose machine is unknown (a CPU run,
    NVML not read) is judged against all under every mode."""
    if mode not in SAME_MACHINE:
        raise ValueError(f"--specdec-same-machine {mode!r}: one of {', '.join(SAME_MACHINE)}")
    every = list(sessions)
    everything = machine_note(tonight, [s.get("machine") for s in every])
    if tonight is None or mode == "never":
        return every, everything
    mine = [s for s in every if s.get("machine") == tonight]
    if len(mine) == len(every):
        return every, None
    if mode == "auto" and len(mine) < least:
        return every, everything
    note = (f"judged against the {_sessions(len(mine))} of tonight's machine ({tonight}), of "
            f"{len(every)} (--specdec-same-machine {mode})")  # fmt: skip
    return mine, note
