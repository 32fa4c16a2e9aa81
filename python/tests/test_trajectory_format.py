"""Reading trajectory documents: fields, versions, extras, numpy arrays and JSONL files.

The documents here are built in the test from two model calls, the way the
exporter lays them out (prompt tokens masked 0, each completion masked 1,
logprobs per token and 0 off the completions), so the checks are on the
reader: what it keeps, what it refuses and what ``to_numpy`` hands a
trainer. The same reader on documents the real binaries produce is in
test_trajectories_live.py.
"""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from support import FIRST, SECOND, document

import rollpoint
from rollpoint import (
    ProtocolError,
    RollpointError,
    Trajectory,
    TrajectoryNotTrainable,
    UnsupportedVersion,
)


def test_a_document_reads_field_for_field() -> None:
    t = Trajectory.from_dict(document())
    assert (t.v, t.rollout, t.attempt, t.trainable, t.reward, t.passed) == (
        1,
        "r-1",
        2,
        True,
        1.0,
        True,
    )
    assert t.not_trainable is None
    assert [c.call_id for c in t.calls] == ["call-0", "call-1"]
    assert t.calls[1].prompt_ids == tuple(SECOND["prompt"])
    assert t.calls[0].logprobs == (-0.5, -0.25)
    assert t.calls[0].latency_ms == 12
    assert t.metrics.completion_tokens == 3
    assert t.segments[0].first_call == 0
    assert t.extra == {}
    assert Trajectory.from_json(json.dumps(document())) == t


def test_to_numpy_gives_int64_tokens_int8_mask_float32_logprobs() -> None:
    t = Trajectory.from_dict(document())
    (seg,) = t.to_numpy()
    assert seg.tokens.dtype == np.int64
    assert seg.loss_mask.dtype == np.int8
    assert seg.logprobs is not None
    assert seg.logprobs.dtype == np.float32
    assert seg.tokens.tolist() == [1, 2, 3, 4, 5, 6, 7, 8]
    assert seg.loss_mask.tolist() == [0, 0, 0, 1, 1, 0, 0, 1]
    # The masked tokens are exactly the completions, with their logprobs.
    assert seg.tokens[seg.loss_mask == 1].tolist() == FIRST["completion"] + SECOND["completion"]
    np.testing.assert_allclose(
        seg.logprobs[seg.loss_mask == 1], FIRST["logprobs"] + SECOND["logprobs"]
    )
    assert not seg.logprobs[seg.loss_mask == 0].any()


def test_logprobs_may_be_absent_but_never_misaligned() -> None:
    doc = document()
    doc["calls"][0]["logprobs"] = None
    doc["segments"][0]["logprobs"] = None
    t = Trajectory.from_dict(doc)
    assert t.calls[0].logprobs is None
    assert t.segments[0].logprobs is None
    (seg,) = t.to_numpy()
    assert seg.logprobs is None
    assert seg.tokens.tolist() == [1, 2, 3, 4, 5, 6, 7, 8]
    doc["calls"][1]["logprobs"] = [-1.0, -2.0]
    with pytest.raises(ProtocolError, match=r"calls\[1\]\.logprobs"):
        Trajectory.from_dict(doc)
    doc = document()
    doc["segments"][0]["logprobs"] = [0.0]
    with pytest.raises(ProtocolError, match=r"segments\[0\]\.logprobs"):
        Trajectory.from_dict(doc)


def test_unknown_fields_are_kept_and_an_unknown_version_is_refused_by_name() -> None:
    doc = document(sampler={"temperature": 0.7})
    doc["calls"][0]["cached_tokens"] = 3
    doc["metrics"]["gpu_ms"] = 9
    t = Trajectory.from_dict(doc)
    assert t.extra == {"sampler": {"temperature": 0.7}}
    assert t.calls[0].extra == {"cached_tokens": 3}
    assert t.metrics.extra == {"gpu_ms": 9}

    with pytest.raises(UnsupportedVersion) as e:
        Trajectory.from_dict(document(v=2))
    assert e.value.version == 2
    assert e.value.document == "trajectory"
    assert "v=2" in str(e.value)
    no_v = document()
    del no_v["v"]
    with pytest.raises(UnsupportedVersion):
        Trajectory.from_dict(no_v)


@pytest.mark.parametrize(
    ("change", "where"),
    [
        (lambda d: d["calls"][1].update(prompt_ids=[1, "2"]), "trajectory.calls[1].prompt_ids[1]"),
        (lambda d: d["calls"][0].update(completion_ids=[True]), "completion_ids[0]"),
        (lambda d: d["segments"][0].update(loss_mask=[0, 1]), "trajectory.segments[0].loss_mask"),
        (lambda d: d["segments"][0]["loss_mask"].__setitem__(0, 2), "loss_mask"),
        (lambda d: d["metrics"].pop("turns"), "trajectory.metrics.turns"),
        (lambda d: d.update(attempt="2"), "trajectory.attempt"),
        (lambda d: d.update(trainable=False), "trajectory.not_trainable"),
    ],
)
def test_malformed_documents_name_the_field(change: Any, where: str) -> None:
    doc = copy.deepcopy(document())
    change(doc)
    with pytest.raises(ProtocolError) as e:
        Trajectory.from_dict(doc)
    assert where in str(e.value)


def test_an_untrainable_trajectory_is_refused_by_to_numpy_unless_allowed() -> None:
    doc = document(
        trainable=False,
        not_trainable={
            "reason": "token_break",
            "call_id": "call-1",
            "message": "the prompt rewrote token 4",
        },
        token_breaks=[{"call_index": 1, "call_id": "call-1", "position": 4}],
    )
    t = Trajectory.from_dict(doc)
    assert t.not_trainable is not None
    assert t.not_trainable.reason in rollpoint.trajectory.NOT_TRAINABLE_REASONS
    assert t.token_breaks[0].position == 4
    with pytest.raises(TrajectoryNotTrainable) as e:
        t.to_numpy()
    assert (e.value.reason, e.value.call_id, e.value.rollout) == ("token_break", "call-1", "r-1")
    assert len(t.to_numpy(allow_untrainable=True)) == 1


def test_to_numpy_without_numpy_says_how_to_get_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "numpy", None)
    with pytest.raises(RollpointError, match=r"rollpoint\[numpy\]"):
        Trajectory.from_dict(document()).to_numpy()


def test_read_trajectories_reads_each_line_and_names_a_bad_one(tmp_path: Path) -> None:
    f = tmp_path / "t.jsonl"
    docs = [document(rollout=f"r-{i}") for i in range(3)]
    f.write_text("".join(json.dumps(d) + "\n" for d in docs) + "\n")
    got = rollpoint.read_trajectories(f)
    assert [t.rollout for t in got] == ["r-0", "r-1", "r-2"]
    assert list(rollpoint.iter_trajectories(f)) == got

    f.write_text(json.dumps(docs[0]) + "\n" + json.dumps(document(v=7)) + "\n")
    with pytest.raises(UnsupportedVersion, match=r"t\.jsonl:2"):
        rollpoint.read_trajectories(f)
    f.write_text(json.dumps(docs[0]) + "\n{torn")
    with pytest.raises(ProtocolError, match=r"t\.jsonl:2: not JSON"):
        rollpoint.read_trajectories(f)
