"""The rules that turn the index types a request names into the partitions it builds or drops."""

from __future__ import annotations

import pytest

from metadata_table.layout import dropped_partitions, requested_partitions
from timeline.errors import ConfigError, UnknownPartitionError


def test_a_build_names_at_least_one_known_index_type() -> None:
    with pytest.raises(ConfigError, match="name at least one of files, column_stats"):
        requested_partitions([], [], [], with_files=True)
    with pytest.raises(UnknownPartitionError, match="'colum_stats'; known: files"):
        requested_partitions(["colum_stats"], [], [], with_files=True)


def test_files_comes_first_when_the_table_has_none_and_the_config_says_so() -> None:
    assert requested_partitions(["column_stats"], [], [], with_files=True) == [
        "files",
        "column_stats",
    ]
    assert requested_partitions(["column_stats"], [], [], with_files=False) == ["column_stats"]
    assert requested_partitions(["column_stats"], [], ["files"], with_files=True) == [
        "column_stats"
    ]
    # named, it stays where it was named, once
    assert requested_partitions(["bloom_filters", "files", "files"], [], [], with_files=True) == [
        "bloom_filters",
        "files",
    ]


def test_a_secondary_index_needs_the_record_index_built_with_or_before_it() -> None:
    with pytest.raises(ConfigError, match="add record_index to --index-types"):
        requested_partitions(["secondary_index"], ["fare"], ["files"], with_files=True)
    assert requested_partitions(
        ["record_index", "secondary_index"], ["fare"], ["files"], with_files=True
    ) == ["record_index", "secondary_index_fare"]
    assert requested_partitions(
        ["secondary_index"], ["fare", "rider"], ["files", "record_index"], with_files=True
    ) == ["secondary_index_fare", "secondary_index_rider"]


def test_a_drop_of_the_record_index_takes_the_secondary_indexes_with_it() -> None:
    present = ["files", "record_index", "secondary_index_fare", "secondary_index_rider"]
    with pytest.raises(ConfigError, match="secondary_index_fare, secondary_index_rider find"):
        dropped_partitions(["record_index"], present)
    with pytest.raises(ConfigError, match="secondary_index_rider find records through"):
        dropped_partitions(["record_index", "secondary_index_fare"], present)
    assert dropped_partitions(["record_index", "secondary_index"], present) == [
        "record_index",
        "secondary_index_fare",
        "secondary_index_rider",
    ]
    assert dropped_partitions(["secondary_index_fare"], present) == ["secondary_index_fare"]
    # a partition the table does not have is named, not refused (the drop says what it removed)
    assert dropped_partitions(["column_stats"], present) == ["column_stats"]
