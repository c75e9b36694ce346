"""Placement over shards, the instance counts it reads, and the shard a receiver token names."""

from __future__ import annotations

import secrets
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from svcgw.config.shards import Shard
from svcgw.intake.receivers import receiver_shard
from svcgw.shards.placement import (
    NoOpenShard,
    instance_counts,
    place,
    placement_order,
    shard_of_token,
    token_for_shard,
)


def equal(k: int) -> list[Shard]:
    return [Shard(i, f"redis://r{i}:6379/0", i) for i in range(k)]


def placed(shards: list[Shard], n: int, counts: dict[int, int] | None = None) -> dict[int, int]:
    counts = dict(counts or {})
    for _ in range(n):
        index = place(shards, counts).index
        counts[index] = counts.get(index, 0) + 1
    return counts


def test_a_new_instance_goes_to_the_shard_with_the_fewest_the_lowest_index_on_a_tie() -> None:
    shards = equal(3)
    assert place(shards, {}).index == 0
    assert place(shards, {0: 5, 1: 3, 2: 3}).index == 1
    assert place(shards, {0: 5, 1: 4, 2: 3}).index == 2


def test_weights_and_closed_shards() -> None:
    shards = [Shard(0, "a"), Shard(1, "b", 1, weight=2.0), Shard(2, "c", 2, closed=True)]
    counts = placed(shards, 300)
    assert counts.get(2, 0) == 0
    assert counts == {0: 100, 1: 200}
    with pytest.raises(NoOpenShard):
        place([Shard(0, "a", closed=True)], {})


def test_a_new_shard_takes_the_new_instances_until_it_catches_up_and_nothing_moves() -> None:
    counts = placed(equal(2), 100)  # 50 and 50
    grown = placed(equal(3), 30, counts)
    assert grown == {0: 50, 1: 50, 2: 30}  # the placed ones stayed where they were


@given(k=st.integers(1, 12), n=st.integers(0, 600))
def test_n_placements_over_k_equal_shards_stay_within_one(k: int, n: int) -> None:
    counts = placed(equal(k), n)
    every = [counts.get(i, 0) for i in range(k)]
    assert sum(every) == n
    assert max(every) - min(every) <= 1


@given(
    start=st.lists(st.integers(0, 50), min_size=2, max_size=6),
    closed=st.sets(st.integers(0, 5)),
    n=st.integers(1, 300),
)
def test_placement_only_fills_open_shards_and_evens_them_out(start: list[int], closed: set[int], n: int) -> None:
    shards = [Shard(i, str(i), i, closed=i in closed) for i in range(len(start))]
    open_ = [s.index for s in shards if not s.closed]
    counts = {i: c for i, c in enumerate(start)}
    if not open_:
        with pytest.raises(NoOpenShard):
            place(shards, counts)
        return
    after = placed(shards, n, counts)
    assert all(after[i] == start[i] for i in closed if i < len(start))
    assert all(after[i] >= start[i] for i in range(len(start)))  # nothing moves
    # Once the open shards are even, they stay within one of each other.
    if n >= sum(max(start[i] for i in open_) - start[i] for i in open_):
        assert max(after[i] for i in open_) - min(after[i] for i in open_) <= 1


def test_the_placement_order_ranks_every_open_shard_as_placement_would_without_the_ones_before() -> None:
    shards = [Shard(0, "a", closed=True), Shard(1, "b", 1), Shard(2, "c", 2, weight=2.0), Shard(3, "d", 3)]
    order = placement_order(shards, {0: 0, 1: 4, 2: 6, 3: 4})
    assert [shard.index for shard in order] == [2, 1, 3]  # 6 / 2 first; 1 and 3 tie: the lower index
    with pytest.raises(NoOpenShard):
        placement_order([Shard(0, "a", closed=True)], {})


@given(
    counts=st.lists(st.integers(0, 50), min_size=1, max_size=8),
    closed=st.sets(st.integers(0, 7)),
    weights=st.lists(st.sampled_from([0.5, 1.0, 2.0, 3.0]), min_size=8, max_size=8),
)
def test_each_shard_in_the_order_is_places_choice_once_those_before_it_are_set_aside(
    counts: list[int], closed: set[int], weights: list[float]
) -> None:
    shards = [Shard(i, str(i), i, weights[i], i in closed) for i in range(len(counts))]
    if all(shard.closed for shard in shards):
        return
    by_index = dict(enumerate(counts))
    order = placement_order(shards, by_index)
    assert {shard.index for shard in order} == {shard.index for shard in shards if not shard.closed}
    for position, shard in enumerate(order):
        set_aside = {earlier.index for earlier in order[:position]}
        rest = [s if s.index not in set_aside else replace(s, closed=True) for s in shards]
        assert place(rest, by_index) == shard


def test_instances_older_than_the_counts_are_shard_0s() -> None:
    shards = equal(3)
    # 40 instances registered before shards; then 10 counted on shard 1 and 5 on shard 2.
    assert instance_counts({"1": "10", "2": "5"}, 55, shards) == {0: 40, 1: 10, 2: 5}
    assert instance_counts({}, 7, equal(1)) == {0: 7}
    assert instance_counts({"0": "3", "1": "2"}, 5, shards) == {0: 3, 1: 2, 2: 0}


def test_a_token_names_its_shard_and_shard_0_keeps_todays_tokens() -> None:
    secret = secrets.token_urlsafe(24)
    assert token_for_shard(secret, 0) == secret
    assert shard_of_token(secret) == 0
    assert token_for_shard(secret, 7) == f"s7.{secret}"
    assert receiver_shard(token_for_shard(secret, 7)) == 7
    for bad in ("x7.abc", "s.abc", "s07.abc", "s0.abc", "s-1.abc", "s².abc", ".abc"):
        assert shard_of_token(bad) is None, bad


def test_a_shard_number_longer_than_any_shard_is_no_shard() -> None:
    # Python reads no integer of more than 4,300 digits: such a token must still be just "no shard".
    for digits in (7, 4300, 4301, 5000, 100_000):
        assert shard_of_token(f"s{'9' * digits}.abc") is None, digits
        assert receiver_shard(f"s1{'0' * (digits - 1)}.abc") is None, digits
    # Six digits are read: far more shards than any deployment has.
    assert shard_of_token("s999999.abc") == 999_999


@given(
    secret=st.text("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_", min_size=1),
    shard=st.integers(0, 10_000),
)
def test_every_token_says_the_shard_it_was_made_for(secret: str, shard: int) -> None:
    assert shard_of_token(token_for_shard(secret, shard)) == shard
