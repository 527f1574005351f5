"""The run's sshd port (issue 32): from the node's range, never one a run holds nor one
something on the host listens on already (another program, another agent's run)."""

from __future__ import annotations

import socket

from agent import ssh


def test_a_port_something_listens_on_is_passed_over() -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]

        chosen = ssh.free_port(range(port, port + 3), held=[port + 1], listen="127.0.0.1")

    assert chosen == port + 2


def test_none_when_the_range_is_taken() -> None:
    assert ssh.free_port(range(40000, 40002), held=[40000, 40001]) is None
