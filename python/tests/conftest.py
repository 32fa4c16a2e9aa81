"""Fixtures: the real binaries and a running ``rollpoint serve`` stack."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from support import Binaries, ServeStack, binaries, remove_tree, start_serve_stack


@pytest.fixture(scope="session")
def bins() -> Binaries:
    return binaries()


@pytest.fixture(scope="module")
def stack(bins: Binaries) -> Iterator[ServeStack]:
    """Model, gateway, owner, agent and coordinator, shared by one test module.

    At the end every service gets SIGTERM and must exit 0 (the agent cancels
    what is still in flight, the owner destroys its sandboxes).
    """
    s = start_serve_stack(bins, "rpy")
    try:
        yield s
    finally:
        try:
            s.services.stop()
        finally:
            s.services.kill_all()
    remove_tree(s.dir)
