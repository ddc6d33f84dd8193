"""The record-key hash on Arrow arrays equals its plain-Python definition, for any keys and any
array layout (slices, chunks, large strings, nulls), and stays fixed (routing and the order of
index files depend on it)."""

from __future__ import annotations

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from timeline.hashing import key_hash64, key_hash64_of

keys = st.lists(st.text(max_size=40), max_size=60)


@settings(max_examples=200, deadline=None)
@given(keys, st.integers(0, 10))
def test_vectorized_hash_is_the_definition(values: list[str], cut: int) -> None:
    expected = [key_hash64_of(k) for k in values]
    array = pa.array(values, pa.string())
    assert key_hash64(array).tolist() == expected
    assert key_hash64(values).tolist() == expected
    assert key_hash64(array.cast(pa.large_string())).tolist() == expected
    cut = min(cut, len(values))
    assert key_hash64(array.slice(cut)).tolist() == expected[cut:]
    chunked = pa.chunked_array([array.slice(0, cut), array.slice(cut)], pa.string())
    assert key_hash64(chunked).tolist() == expected


def test_nulls_hash_as_empty_keys_and_values_are_pinned() -> None:
    assert key_hash64(pa.array([None, ""], pa.string())).tolist() == [key_hash64_of("")] * 2
    assert key_hash64(pa.array([], pa.string())).tolist() == []
    # fixed forever: the record index's file groups and file order are laid out by these
    assert key_hash64_of("") == key_hash64(["", "a"]).tolist()[0]
    assert [key_hash64_of(k) for k in ("a", "trip-000000001", "é")] == PINNED


PINNED = [14824345798597932911, 8470690010248927164, 6714046590821335856]
