"""How long a long poll waits: a share of the asked wait, drawn anew for each, so that waiters
that came together do not all end, and come back, together."""

from __future__ import annotations

from execution import longpoll


def test_a_wait_is_drawn_between_jitter_and_all_of_the_asked_wait() -> None:
    # Given a 30 s wait asked 200 times,
    waits = [longpoll.Waiting(topics=(), ready=lambda: True, wait_s=30).wait_s for _ in range(200)]
    # then each waits between JITTER and all of it, and they do not all wait alike.
    assert all(30 * longpoll.JITTER <= wait <= 30 for wait in waits)
    assert len(set(waits)) > 1
