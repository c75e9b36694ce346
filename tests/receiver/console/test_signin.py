"""receiver.console.signin on its own: argon2 stays off the event loop, against a real Redis."""

from __future__ import annotations

import asyncio
import time

from receiver.console.signin import PasswordSignIn
from receiver.services import build_services
from svcgw import passwords
from svcgw.settings import Settings
from tests.receiver.console.members import PASSWORD, make_member


def test_a_storm_of_sign_ins_leaves_the_event_loop_free(settings: Settings) -> None:
    member = make_member(settings)
    started = time.monotonic()
    passwords.verify(passwords.hash_password(PASSWORD), PASSWORD)
    one_check = (time.monotonic() - started) / 2  # a hash and a verification, here and now

    async def storm() -> tuple[list[str | None], float]:
        services = build_services(settings)
        signin = PasswordSignIn(services)
        gaps: list[float] = []
        running = True

        async def ticker() -> None:
            # How late the loop wakes this up: on the loop, one argon2 run would hold it a whole check.
            while running:
                before = time.monotonic()
                await asyncio.sleep(0.005)
                gaps.append(time.monotonic() - before)

        tick = asyncio.create_task(ticker())
        attempts = [signin.attempt(member.login, PASSWORD, "192.0.2.1") for _ in range(3)]
        attempts += [signin.attempt(f"nobody{n}@example.com", "wrong password!", "192.0.2.1") for n in range(5)]
        outcomes = await asyncio.gather(*attempts)
        running = False
        await tick
        await services.redis.aclose()
        await services.text_redis.aclose()
        return [outcome.account for outcome in outcomes], max(gaps)

    accounts, worst = asyncio.run(storm())
    assert accounts == [member.account] * 3 + [None] * 5
    assert worst < one_check / 2, (worst, one_check)
