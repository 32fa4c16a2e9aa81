"""The clients against a real ``rollpoint serve`` stack (root).

Model script, gateway, owner, agent and coordinator run as separate
processes (the ``stack`` fixture). Rollouts are posted and awaited with both
clients, a checkpoint and a fork are taken over the coordinator while they
run, one rollout is cancelled, and each kind of refusal arrives as its typed
error with the server's code, message and field.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import sqlite3
import threading
import time
from collections.abc import Callable
from typing import TypeVar

import pytest
from playwright.sync_api import sync_playwright
from support import LIMIT_S, TOKEN, ServeStack, counting_task, native_task

from rollpoint import (
    AsyncClient,
    BadRequest,
    Client,
    Conflict,
    NotFound,
    ResultTimeout,
    RolloutResult,
    RolloutStatus,
    TransportError,
    Unauthorized,
)

E = TypeVar("E", bound=BaseException)


def tag(name: str) -> str:
    return f"{name}{os.getpid() % 100000}"


def wait_running(agent: Client, ids: list[str]) -> None:
    """Until every rollout in ``ids`` runs, then half a second more."""
    end = time.monotonic() + LIMIT_S
    while True:
        states = {s.rollout: s.state for s in agent.list()}
        if all(states.get(i) == "running" for i in ids):
            break
        assert time.monotonic() < end, f"never all running: {states}"
        time.sleep(0.1)
    time.sleep(0.5)


def assert_passed(r: RolloutResult, rid: str, attempt: int) -> None:
    assert r.rollout == rid, r
    assert r.status == "verified", r
    assert r.verdict is not None, r
    assert r.verdict.passed, r.verdict
    assert r.passed is True
    assert r.reward == 1.0, r
    assert r.attempt == attempt, r
    assert r.launches, "a result carries its launch log"
    assert r.timings.ended_at_ms >= r.timings.started_at_ms


def test_rollouts_submitted_checkpointed_forked_and_awaited(stack: ServeStack) -> None:
    agent = Client(stack.agent, token_file=stack.token_file)
    coord = Client(stack.coordinator, token=TOKEN)
    t = tag("sv")
    counting = [f"{t}-c{i}" for i in range(3)]
    native = f"{t}-n"
    refs = [agent.submit(counting_task(i)) for i in counting]
    refs.append(agent.submit(native_task(native, stack.bins.worker)))
    ids = [*counting, native]
    assert [r.id for r in refs] == ids
    assert all(r.attempt == 0 for r in refs), refs
    assert all(r.state in ("queued", "running") for r in refs), refs
    assert refs[0].key == counting[0]

    # Before it is done, `get` is the status.
    early = agent.get(counting[0])
    assert isinstance(early, RolloutStatus), early
    assert early.in_flight
    listed = {s.rollout: s for s in agent.list()}
    assert set(ids) <= set(listed), listed

    wait_running(agent, ids)
    ck = coord.checkpoint()
    assert set(ids) <= set(ck.scope), ck
    assert ck.restarts == (), ck
    # Every rollout in scope has an agent record and a resources record.
    assert ck.record_count("agent") == len(ck.scope), ck
    assert ck.record_count("resources") == len(ck.scope), ck
    assert ck.record_count("model") is not None, ck
    assert ck.timings.total_ms >= ck.timings.prepare_ms
    assert (stack.run / "checkpoints" / ck.id / "checkpoint.json").is_file()

    st = coord.status()
    assert st.latest == ck.id, st
    assert not st.busy
    assert sorted(p.kind for p in st.peers) == ["agent", "model", "resources"], st
    assert all(p.error is None for p in st.peers), st

    # A counting rollout forked: its branch runs on the agent from the
    # checkpoint's copy of its file and passes like the source.
    fork = coord.fork(ck.id, counting[0], n=1)
    assert fork.branches == (f"{counting[0]}~1",), fork
    assert fork.source == counting[0], fork
    assert fork.checkpoint == ck.id

    # Half the results awaited with the blocking client, half with asyncio.
    for rid in ids[:2]:
        assert_passed(agent.result(rid, timeout=LIMIT_S), rid, 0)

    async def rest() -> list[RolloutResult]:
        async with AsyncClient(stack.agent, token=TOKEN) as a:
            return await asyncio.gather(*(a.result(i, timeout=LIMIT_S) for i in ids[2:]))

    for rid, r in zip(ids[2:], asyncio.run(rest()), strict=True):
        assert_passed(r, rid, 0)
    branch = agent.result(fork.branches[0], timeout=LIMIT_S)
    assert_passed(branch, fork.branches[0], 1)
    assert branch.task_id == counting[0]

    done = agent.get(native)
    assert isinstance(done, RolloutResult), done
    assert done.status == "verified"
    assert {s.rollout: s.state for s in agent.list()}[native] == "done"


def test_a_cancelled_rollout_returns_its_result_once(stack: ServeStack) -> None:
    agent = Client(stack.agent, token=TOKEN)
    rid = tag("cx")
    agent.submit(counting_task(rid, lines=400))
    wait_running(agent, [rid])
    with pytest.raises(ResultTimeout) as timeout:
        agent.result(rid, timeout=0.5)
    assert isinstance(timeout.value.last, RolloutStatus)
    assert timeout.value.last.state == "running"
    assert isinstance(timeout.value, TimeoutError)

    r = agent.cancel(rid)
    assert r.rollout == rid
    assert r.status == "cancelled", r
    with pytest.raises(Conflict) as again:
        agent.cancel(rid)
    assert again.value.status == 409
    assert again.value.code == "conflict"
    assert rid in again.value.message
    got = agent.get(rid)
    assert isinstance(got, RolloutResult)
    assert got.status == "cancelled"


def test_the_coordinator_pauses_the_fleet_for_a_weight_update(stack: ServeStack) -> None:
    agent = Client(stack.agent, token=TOKEN)
    coord = Client(stack.coordinator, token=TOKEN)
    rid = tag("fl")
    agent.submit(counting_task(rid, lines=400))
    wait_running(agent, [rid])
    paused = coord.pause_for_update("abort")
    assert paused.paused, paused
    assert paused.calls == "abort", paused
    assert paused.parked >= 1, paused
    assert paused.going_on == (), paused
    again = coord.pause_for_update()
    assert again.paused, "a second pause is the same pause"
    resumed = coord.continue_after_update("7")
    assert not resumed.paused, resumed
    assert resumed.version == "7", resumed
    assert agent.cancel(rid).status == "cancelled"


def refused(cls: type[E], call: Callable[[], object]) -> E:
    """The error of class ``cls`` that ``call`` raises."""
    with pytest.raises(cls) as info:
        call()
    return info.value


def test_refusals_are_typed_with_the_servers_code_message_and_field(stack: ServeStack) -> None:
    agent = Client(stack.agent, token=TOKEN)
    coord = Client(stack.coordinator, token=TOKEN)
    nope = tag("nope")
    for call in (agent.get, agent.result, agent.cancel):
        missing = refused(NotFound, lambda: call(nope))  # noqa: B023
        assert missing.status == 404
        assert missing.code == "not_found"
        assert nope in missing.message

    bad = counting_task(tag("bad"))
    del bad["adapter"]
    err = refused(BadRequest, lambda: agent.submit(bad))
    assert err.code == "bad_request"
    assert err.field == "task.adapter", err
    odd = counting_task(tag("odd"))
    odd["colour"] = "red"
    err = refused(BadRequest, lambda: agent.submit(odd))
    assert err.field == "task.colour"
    assert "unknown field" in err.message
    err = refused(BadRequest, lambda: agent.submit(b"not json"))
    assert err.field == "task"
    with pytest.raises(ValueError, match="poll_ms"):
        agent.result(nope, poll_ms=600_001)

    dup = tag("dup")
    agent.submit(counting_task(dup, lines=1, tick="0"))
    taken = refused(Conflict, lambda: agent.submit(counting_task(dup, lines=1, tick="0")))
    assert taken.code == "conflict"
    assert dup in taken.message
    assert agent.result(dup, timeout=LIMIT_S).status == "verified"

    assert refused(BadRequest, lambda: coord.checkpoint(id="../x")).field == "id"
    assert refused(BadRequest, lambda: coord.fork("ck-none", "r", n=0)).field == "n"
    assert refused(NotFound, lambda: coord.restore(id="ck-never-taken")).code == "not_found"
    assert refused(NotFound, lambda: coord.fork("ck-never-taken", "r", n=1)).status == 404

    for call_refused in (
        Client(stack.agent, token="wrong").list,
        Client(stack.agent).list,
        Client(stack.coordinator, token="wrong").status,
        Client(stack.coordinator, token="wrong").checkpoint,
    ):
        denied = refused(Unauthorized, call_refused)
        assert denied.status == 401
        assert denied.code == "unauthorized"

    async def typed_async() -> None:
        async with AsyncClient(stack.agent, token="wrong") as a:
            with pytest.raises(Unauthorized):
                await a.list()
        async with AsyncClient(stack.agent, token=TOKEN) as a:
            with pytest.raises(NotFound) as missing:
                await a.result(nope, timeout=1)
            assert missing.value.code == "not_found"
            with pytest.raises(BadRequest) as bad_task:
                await a.submit(bad)
            assert bad_task.value.field == "task.adapter"

    asyncio.run(typed_async())

    # Nothing listens on a port just released: a transport error, not an API one.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(TransportError):
        Client(f"http://127.0.0.1:{port}", token=TOKEN).list()

    async def unreachable() -> None:
        async with AsyncClient(f"http://127.0.0.1:{port}", token=TOKEN) as a:
            await a.list()

    with pytest.raises(TransportError):
        asyncio.run(unreachable())


def test_many_results_awaited_at_once_on_one_event_loop(stack: ServeStack) -> None:
    """Twelve rollouts over eight slots, every result long-polled at once, no thread added."""
    t = tag("many")
    ids = [f"{t}-{i}" for i in range(12)]
    threads_before = threading.active_count()

    async def main() -> list[RolloutResult]:
        async with AsyncClient(stack.agent, token=TOKEN) as a:
            refs = await asyncio.gather(*(a.submit(counting_task(i, lines=4)) for i in ids))
            assert [r.id for r in refs] == ids
            waits = [a.result(i, timeout=LIMIT_S, poll_ms=2000) for i in ids]
            results = await asyncio.gather(*waits)
            assert threading.active_count() == threads_before
            return list(results)

    for rid, r in zip(ids, asyncio.run(main()), strict=True):
        assert_passed(r, rid, 0)


def test_the_agent_and_the_coordinator_serve_the_dashboard(stack: ServeStack) -> None:
    """The dashboard of a run spread over services, in headless Chromium: the coordinator's
    counts are its agent's, its checkpoint is drawn, a rollout's calls come in ledger order
    through the coordinator, and the agent's page needs the token for its data."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    assert chromium, "no chromium on PATH: install Debian's chromium (scripts/install-deps does)"
    agent = Client(stack.agent, token_file=stack.token_file)
    coord = Client(stack.coordinator, token=TOKEN)
    native = f"{tag('dv')}-n"
    agent.submit(native_task(native, stack.bins.worker))
    wait_running(agent, [native])
    ck = coord.checkpoint()
    assert native in ck.scope, ck
    assert_passed(agent.result(native, timeout=LIMIT_S), native, 0)
    ledger = sqlite3.connect(f"file:{stack.run / 'gateway/ledger.sqlite'}?mode=ro", uri=True)
    want = [
        r[0]
        for r in ledger.execute(
            "SELECT call_id FROM calls WHERE rollout = ? ORDER BY attempt, seq", (native,)
        )
    ]
    ledger.close()
    assert want, "the native rollout made model calls"
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 1000})
            page.goto(f"{stack.coordinator}/#token={TOKEN}")
            page.wait_for_selector("body[data-ready='1']", timeout=30_000)
            states = {s.rollout: s.state for s in agent.list()}
            total = int(page.get_attribute("table#rollouts", "data-total") or -1)
            assert total == len(states), (total, states)
            verified = page.query_selector("#states li[data-state='verified']")
            assert verified is not None
            done = sum(1 for v in states.values() if v == "done")
            assert int(verified.get_attribute("data-count") or 0) <= done
            assert page.query_selector("line.checkpoint"), "the coordinator's checkpoint is drawn"
            page.goto(f"{stack.coordinator}/#/rollout/{native}")
            page.wait_for_selector("ol#calls li.call", timeout=30_000)
            shown = [
                li.get_attribute("data-call-id")
                for li in page.query_selector_all("ol#calls li.call")
            ]
            assert shown == want, (shown, want)
            marks = [
                li.get_attribute("data-checkpoint")
                for li in page.query_selector_all("#rollout-checkpoints li")
            ]
            assert ck.id in marks, marks
            # The agent's own page: no data without the token.
            plain = browser.new_page()
            plain.goto(f"{stack.agent}/")
            plain.wait_for_selector("#token-form", state="visible", timeout=30_000)
        finally:
            browser.close()
