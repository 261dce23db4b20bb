"""Sluice's connector framework (BitSail's v1 API): sources make splits on the driver and read them in Spark
executors. See docs/connectors.md for a source in fifty lines."""

from sluice.connectors.api import (Boundedness, CoordinatorContext, FairSplitAssigner, ReaderContext, Serializer,
                                   SizeBalancedSplitAssigner, Source, SourceReader, SourceSplit, SplitAssigner,
                                   SplitCoordinator)
from sluice.connectors.base import BoundedSource, PlannedSplitCoordinator, SplitReader
from sluice.connectors.reading import read_all

__all__ = [
    "Boundedness", "BoundedSource", "CoordinatorContext", "FairSplitAssigner", "PlannedSplitCoordinator",
    "ReaderContext", "Serializer", "SizeBalancedSplitAssigner", "Source", "SourceReader", "SourceSplit",
    "SplitAssigner", "SplitCoordinator", "SplitReader", "read_all",
]
