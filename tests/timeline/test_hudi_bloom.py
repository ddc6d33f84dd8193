"""Hudi's bloom filter of record keys, pinned to what Apache Hudi 0.15's Java writes: the SHA-256
of the footer string BloomFilterFactory.createBloomFilter(60000, 1e-9, 100000, "DYNAMIC_V0")
serialized after adding keys "key-%07d" (with "é€" after every seventh), computed with the 0.15
bundle on this machine; and on the footers of files Hudi writes
(test_hudi_metadata_records.py)."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from timeline.formats.hudi_bloom import DYNAMIC_V0, SIMPLE, HudiBloomFilter, sizes

JAVA = {
    0: "b3d5cc53dc8f85b4fe61f186deb2b03d94e5cc7f6bb65e98e4217b2d435ab1f7",
    1: "5ce62ae636e35b7a5a03333571dc2c6c66cc9262a8c79500e770f972cd427bd4",
    25: "edf91cb397774066ee90dc02ebb66c1a78def1bb2a2b982b0a615f1ea46d18f0",
    60000: "49c0998db45655bf9fd997c99a790c309aeeb0d3024e4858c5c36410bb756511",
    60001: "8451cef1a62e5ec30731dc1932789859ee5b1366482511433c375fbf98c6b2ab",  # a second row
    130000: "bdd87389c442680a670edafec6a44023631f7f2aaa10f6057ddd54fb173efa0d",  # past the bound
}


def keys(n: int) -> list[str]:
    return [f"key-{i:07d}" + ("\u00e9\u20ac" if i % 7 == 0 else "") for i in range(n)]


@pytest.mark.parametrize("n", sorted(JAVA))
def test_the_footer_string_is_hudis(n: int) -> None:
    text = HudiBloomFilter.of_keys(keys(n)).serialize()
    assert hashlib.sha256(text.encode()).hexdigest() == JAVA[n]
    assert len(text) == (431380 if n <= 60000 else 862724)


def test_a_simple_filter_is_hudis() -> None:
    # SimpleBloomFilter(1000, 1e-6): keys "key-0000000" .. "key-0000999"
    text = HudiBloomFilter.of_keys(
        [f"key-{i:07d}" for i in range(1000)], SIMPLE, entries=1000, fpp=1e-6
    ).serialize()
    expected = "43f42ba9e6babaed054508e5f2645f1e164f11649e0bbb13e00d2d4b24ca5d64"
    assert hashlib.sha256(text.encode()).hexdigest() == expected


def test_sizes_are_hudis_defaults() -> None:
    assert sizes(60000, 1e-9) == (2587966, 30)


@pytest.mark.parametrize("type_code", [DYNAMIC_V0, SIMPLE])
def test_parsed_filters_answer_membership(type_code: str) -> None:
    present = keys(70000 if type_code == DYNAMIC_V0 else 5000)
    text = HudiBloomFilter.of_keys(present, type_code).serialize()
    parsed = HudiBloomFilter.parse(text, type_code)
    assert parsed.serialize() == text
    assert parsed.might_contain(present).all()  # never a false negative
    absent = [f"other-{i}" for i in range(20000)]
    assert parsed.might_contain(absent).sum() <= 2


def test_damaged_strings_are_refused() -> None:
    with pytest.raises(ValueError, match="not a Hudi"):
        HudiBloomFilter.parse("AAAA")
    text = HudiBloomFilter.of_keys(["a"]).serialize()
    with pytest.raises(ValueError, match="type"):
        HudiBloomFilter.parse(text, "BLOCKED")
    assert not np.any(HudiBloomFilter.parse(text).might_contain(["b", "c"]))
