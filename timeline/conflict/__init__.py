"""Optimistic concurrency control (docs/architecture.md §7.5): which instants a committing write must check,
and whether it conflicts with each. Strategies are pure objects over :class:`ConcurrentOperation`
values, tested without storage; :func:`operation_of` builds those values from the timeline.
"""

from timeline.conflict.operation import ConcurrentOperation, TxnStart, operation_of
from timeline.conflict.strategies import (
    STRATEGIES,
    BucketStrategy,
    ConflictResolutionStrategy,
    PreferWriterStrategy,
    SimpleStrategy,
    strategy_for,
)

__all__ = [
    "STRATEGIES",
    "BucketStrategy",
    "ConcurrentOperation",
    "ConflictResolutionStrategy",
    "PreferWriterStrategy",
    "SimpleStrategy",
    "TxnStart",
    "operation_of",
    "strategy_for",
]
