"""The dashboard, ``rollpoint logs``, ``exec`` and ``shell`` against a real run (root).

A run with its control endpoint (two echoing counting tasks and a native-worker task
against the scripted model) is checkpointed, SIGKILLed and resumed with the endpoint on.
Then, while it runs: the dashboard in headless Chromium (Debian's, driven by Playwright)
against ``rollpoint status --json`` and the ledger; ``logs -f`` following a rollout; ``exec``
reading a file the rollout wrote, refused while the rollout is frozen, and with
``--while-frozen`` in a fork the rollout never sees; ``shell`` through a pseudo-terminal.
Last, the report of a run of 10,000 synthetic rows loads and filters in the browser.
"""

from __future__ import annotations

import json
import os
import pty
import select
import shutil
import signal
import sqlite3
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, sync_playwright
from support import (
    LIMIT_S,
    TOKEN,
    Binaries,
    Services,
    end_run,
    model_script,
    native_task,
    remove_tree,
    short_tmpdir,
    wait_control,
    write_secret,
)

import rollpoint

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
ECHOING = ["echo-0", "echo-1"]
NATIVE = "native-0"
LINES = 240
TICK = "0.25"


def echoing_task(rid: str) -> dict[str, Any]:
    """Appends 1..LINES to a file and prints each, continuing from the file's length."""
    script = (
        f'n=$(wc -l < lines 2>/dev/null || echo 0); while [ "$n" -lt {LINES} ]; '
        f'do n=$((n+1)); echo "$n" >> lines; echo "line $n"; sleep {TICK}; done'
    )
    return {
        "v": 1,
        "task": {
            "id": rid,
            "verify": {"command": ["/bin/sh", "-c", f"test $(wc -l < lines) -eq {LINES}"]},
        },
        "adapter": {"kind": "command", "argv": ["/bin/sh", "-c", script], "pauses": True},
    }


@dataclass
class Live:
    base: Path
    run_dir: Path
    token_file: Path
    services: Services
    bins: Binaries
    child: subprocess.Popen[bytes]

    def rollpoint(
        self, *args: str | os.PathLike[str], timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [self.bins.rollpoint, *args],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def client(self) -> rollpoint.Client:
        return rollpoint.Client.from_run_dir(self.run_dir, token_file=self.token_file)

    def addr(self) -> str:
        return str(json.loads((self.run_dir / "control.json").read_text())["addr"])


@pytest.fixture(scope="module")
def live(bins: Binaries) -> Iterator[Live]:
    assert CHROMIUM, "no chromium on PATH: install Debian's chromium (scripts/install-deps does)"
    base = short_tmpdir("rpd")
    tasks = [echoing_task(r) for r in ECHOING] + [native_task(NATIVE, bins.worker)]
    (base / "tasks.jsonl").write_text("".join(json.dumps(t) + "\n" for t in tasks))
    model_script(base / "model.json")
    (base / "run.toml").write_text(
        "v = 1\nconcurrency = 8\ncheckpoint_every_s = 0\nkeep = 3\n"
        'model_script = "model.json"\nstore = "copy"\n'
        f'supervisor = "{bins.supervisor}"\n'
    )
    token = write_secret(base / "token", TOKEN)
    logs = base / "logs"
    logs.mkdir()
    run_dir = base / "run"
    services = Services(bins, logs)
    listen = ["--listen", "127.0.0.1:0", "--control-token-file", token]
    child = services.spawn(
        "run",
        ["run", base / "tasks.jsonl", "--config", base / "run.toml", "--run-dir", run_dir, *listen],
    )
    try:
        wait_control(run_dir, child, services, "run")
        c = rollpoint.Client.from_run_dir(run_dir, token_file=token)
        end = time.monotonic() + LIMIT_S
        while c.run_status().in_flight < 3:
            assert time.monotonic() < end, c.run_status()
            time.sleep(0.2)
        time.sleep(2.0)
        c.checkpoint()
        # A crash: the runner is killed outright, then resumed with its endpoint on.
        child.send_signal(signal.SIGKILL)
        child.wait()
        (run_dir / "control.json").unlink(missing_ok=True)
        child = services.spawn("resume", ["resume", run_dir, *listen])
        wait_control(run_dir, child, services, "resume")
        yield Live(base, run_dir, token, services, bins, child)
    finally:
        end_run(bins, child, run_dir)
        remove_tree(base)


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    assert CHROMIUM
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            yield b
        finally:
            b.close()


def ready(page: Page) -> None:
    page.wait_for_selector("body[data-ready='1']", timeout=30_000)


def dom_states(page: Page) -> dict[str, int]:
    out: dict[str, int] = {}
    for li in page.query_selector_all("#states li[data-state]"):
        out[li.get_attribute("data-state") or ""] = int(li.get_attribute("data-count") or 0)
    return out


def test_the_dashboard_shows_the_live_run(live: Live, browser: Browser) -> None:
    page = browser.new_page(viewport={"width": 1280, "height": 1000})
    page.goto(f"http://{live.addr()}/#token={TOKEN}")
    ready(page)
    assert "token" not in page.evaluate("location.hash"), "the token leaves the URL"
    page.wait_for_selector("#live-state[data-state='connected']", timeout=30_000)

    # The counts agree with `rollpoint status --json` (read until both are read between
    # the same two changes of the run).
    agreed = False
    for _ in range(40):
        status = json.loads(live.rollpoint("status", live.run_dir, "--json").stdout)
        shown = dom_states(page)
        finished = {
            k: v
            for k, v in shown.items()
            if k in {"verified", "unverified", "infra_error", "cancelled"}
        }
        in_flight = sum(v for k, v in shown.items() if k not in finished)
        if finished == {k: v for k, v in status["by_status"].items() if v} and in_flight == len(
            status["unfinished"]
        ):
            agreed = True
            break
        time.sleep(0.5)
    assert agreed, f"dashboard {dom_states(page)} vs status {status}"
    crashes = page.inner_text("[data-name='crashes survived'] b")
    assert crashes == "1", crashes
    assert page.query_selector("line.resume.crash"), "the crash and its resume are drawn"

    # The native rollout's page lists its model calls in ledger order.
    end = time.monotonic() + LIMIT_S
    while time.monotonic() < end:
        ledger = sqlite3.connect(f"file:{live.run_dir / 'gateway/ledger.sqlite'}?mode=ro", uri=True)
        want = [
            r[0]
            for r in ledger.execute(
                "SELECT call_id FROM calls WHERE rollout = ? ORDER BY attempt, seq", (NATIVE,)
            )
        ]
        ledger.close()
        if len(want) >= 3:
            break
        time.sleep(0.5)
    page.goto(f"http://{live.addr()}/#/rollout/{NATIVE}")
    ready(page)
    page.wait_for_selector("ol#calls li.call", timeout=30_000)
    shown_calls = [
        li.get_attribute("data-call-id") for li in page.query_selector_all("ol#calls li.call")
    ]
    assert shown_calls[: len(want)] == want, (shown_calls, want)

    # The rollout saved in the checkpoint continued after the crash: its launch after the
    # resume is drawn as a continuation.
    end = time.monotonic() + LIMIT_S
    kinds: list[str | None] = []
    while time.monotonic() < end:
        page.goto(f"http://{live.addr()}/#/rollout/{NATIVE}")
        ready(page)
        kinds = [li.get_attribute("data-kind") for li in page.query_selector_all("li.launch-item")]
        if "continued" in kinds:
            break
        time.sleep(1.0)
    assert kinds[0] == "started", kinds
    assert "continued" in kinds, kinds
    assert page.query_selector("#rollout-timeline rect.launch.resumed"), "the continuation is drawn"

    # A rollout in flight: what its sandbox has used so far, from the owner.
    page.goto(f"http://{live.addr()}/#/rollout/{ECHOING[0]}")
    ready(page)
    page.wait_for_selector("#rollout[data-state='running'] dl#resources", timeout=30_000)
    assert "cpu" in page.inner_text("dl#resources").lower()

    page.goto(f"http://{live.addr()}/#/")
    ready(page)
    shot = live.base / "dashboard.png"
    page.screenshot(path=str(shot))
    keep = os.environ.get("ROLLPOINT_DASHBOARD_SCREENSHOT")
    if keep:
        shutil.copy(shot, keep)
    assert shot.stat().st_size > 10_000

    # The data routes need the token; the page alone does not.
    wrong = browser.new_page()
    wrong.goto(f"http://{live.addr()}/#token=wrong")
    wrong.wait_for_selector("#token-form", state="visible", timeout=30_000)
    wrong.close()
    page.close()


def test_exec_reads_the_rollout_and_is_refused_while_frozen(live: Live) -> None:
    tok = str(live.token_file)
    done = live.rollpoint(
        "exec", live.run_dir, ECHOING[0], "--control-token-file", tok, "--", "cat", "lines"
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("1\n2\n"), done.stdout[:200]

    # A checkpoint that holds every rollout frozen for a while.
    held = threading.Thread(target=lambda: live.client().checkpoint(hold_ms=15_000))
    held.start()
    try:
        refused = None
        end = time.monotonic() + 60
        while time.monotonic() < end:
            refused = live.rollpoint(
                "exec", live.run_dir, ECHOING[0], "--control-token-file", tok, "--", "true"
            )
            if refused.returncode != 0 and "frozen" in refused.stderr:
                break
            time.sleep(0.2)
        assert refused is not None
        assert refused.returncode != 0, refused
        assert "frozen" in refused.stderr, refused
        forked = live.rollpoint(
            "exec",
            live.run_dir,
            ECHOING[0],
            "--control-token-file",
            tok,
            "--while-frozen",
            "--",
            "/bin/sh",
            "-c",
            "wc -l < lines; echo planted > fork-marker",
        )
        assert forked.returncode == 0, forked.stderr
        assert int(forked.stdout.strip()) > 0, forked.stdout
        assert "a fork of checkpoint" in forked.stderr, forked.stderr
    finally:
        held.join(timeout=120)
    # The rollout never sees what the fork did.
    after = live.rollpoint(
        "exec",
        live.run_dir,
        ECHOING[0],
        "--control-token-file",
        tok,
        "--",
        "test",
        "-e",
        "fork-marker",
    )
    assert after.returncode == 1, (after.returncode, after.stderr)
    events = [
        json.loads(x) for x in (live.run_dir / "events.jsonl").read_text().splitlines() if x.strip()
    ]
    execs = [e for e in events if e.get("kind") == "exec"]
    assert any(e["while_frozen"] for e in execs), execs
    assert any(not e["while_frozen"] for e in execs), execs


def test_shell_runs_a_command_on_a_terminal(live: Live) -> None:
    shell = [
        live.bins.rollpoint,
        "shell",
        live.run_dir,
        ECHOING[0],
        "--control-token-file",
        live.token_file,
    ]
    leader, follower = pty.openpty()
    child = subprocess.Popen(
        shell,
        stdin=follower,
        stdout=follower,
        stderr=follower,
        close_fds=True,
    )
    os.close(follower)
    out = b""

    def read_until(marker: bytes, limit_s: float = 60) -> None:
        nonlocal out
        end = time.monotonic() + limit_s
        while marker not in out:
            assert time.monotonic() < end, out[-2000:]
            r, _, _ = select.select([leader], [], [], 0.5)
            if r:
                try:
                    out += os.read(leader, 4096)
                except OSError:
                    break

    try:
        os.write(leader, b"tty && echo shell-$((6*7)) && id -u\n")
        read_until(b"shell-42")
        os.write(leader, b"exit 3\n")
        code = child.wait(timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
        os.close(leader)
    assert b"/dev/pts/" in out, out[-2000:]
    assert code == 3, (code, out[-2000:])

    # A command of one's own, on a terminal too.
    leader, follower = pty.openpty()
    done = subprocess.run(
        [
            *shell,
            "--",
            "/bin/sh",
            "-c",
            "test -t 0 && exit 5",
        ],
        stdin=follower,
        stdout=follower,
        stderr=follower,
        timeout=60,
        check=False,
    )
    os.close(follower)
    os.close(leader)
    assert done.returncode == 5, done


def test_logs_follow_a_running_rollout(live: Live) -> None:
    child = subprocess.Popen(
        [live.bins.rollpoint, "logs", live.run_dir, ECHOING[1], "-f"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    seen: list[str] = []
    end = time.monotonic() + LIMIT_S
    while time.monotonic() < end:
        line = child.stdout.readline()
        if not line:
            break
        seen.append(line)
        if line.startswith("== ") and "finished" in line:
            break
    child.wait(timeout=60)
    text = "".join(seen)
    assert child.returncode == 0, child.stderr.read() if child.stderr else ""
    assert "== launch" in text, text[:2000]
    numbers = [int(x.split()[1]) for x in text.splitlines() if x.startswith("line ")]
    assert numbers, text[-2000:]
    assert numbers[-1] == LINES, text[-2000:]
    assert f"== {ECHOING[1]} finished" in text, text[-500:]


def test_the_report_of_ten_thousand_rollouts_loads_and_filters(
    live: Live, browser: Browser
) -> None:
    # A run directory of 10,000 rows made from one real row.
    src = live.run_dir
    rows = [json.loads(x) for x in (src / "results.jsonl").read_text().splitlines() if x.strip()]
    if not rows:
        end = time.monotonic() + LIMIT_S
        while not rows and time.monotonic() < end:
            time.sleep(1)
            rows = [
                json.loads(x) for x in (src / "results.jsonl").read_text().splitlines() if x.strip()
            ]
    assert rows, "no finished row to copy"
    big = live.base / "big"
    big.mkdir()
    shutil.copy(src / "run.json", big / "run.json")
    statuses = ["verified", "unverified", "infra_error"]
    with (big / "results.jsonl").open("w") as f:
        for i in range(10_000):
            r = dict(rows[0])
            r["rollout"] = f"s{i:05d}"
            r["task_id"] = f"s{i:05d}"
            r["status"] = statuses[i % 3]
            r["reward"] = (i % 5) / 4
            if r["status"] == "infra_error":
                r["infra_class"] = "sandbox_lost"
                r["reward"] = None
            f.write(json.dumps(r) + "\n")
    # The copied run.json names the real run's tasks file, which is still there.
    out = live.base / "big.html"
    done = live.rollpoint("report", big, "--out", out, timeout=300)
    assert done.returncode == 0, done.stderr
    page = browser.new_page(viewport={"width": 1280, "height": 1000})
    started = time.monotonic()
    page.goto(f"file://{out}")
    ready(page)
    loaded_s = time.monotonic() - started
    assert loaded_s < 20, f"the page took {loaded_s:.1f} s"
    assert page.get_attribute("table#rollouts", "data-shown") == "100"
    page.select_option("select#filter-state", "unverified")
    page.wait_for_function(
        "document.querySelector('table#rollouts').dataset.total === '3333'", timeout=10_000
    )
    page.close()
