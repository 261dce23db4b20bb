"""Druid's DataSketches post-aggregators of native queries (HLL, Theta and Quantiles sketches), as validated models
with Druid's field names and defaults; `query` puts them among the other post-aggregators.

A sketch post-aggregator's `field` (`fields`) are post-aggregators, which `query` defines: the models are
completed there, once those are.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import Field, model_validator

from sluice.spec.model import SpecModel, power_of_two

if TYPE_CHECKING:
    from sluice.broker.native.query import PostAggregator


HllType = Literal["HLL_4", "HLL_6", "HLL_8"]


class SketchPostAggregator(SpecModel):
    """A post-aggregator of one sketch: `field` (a fieldAccess of a sketch aggregator, or a post-aggregator that
    makes a sketch)."""

    name: str | None = None
    field: PostAggregator


class HllSketchEstimatePostAggregator(SketchPostAggregator):
    type: Literal["HLLSketchEstimate"]
    round: bool = False


class HllSketchEstimateWithBoundsPostAggregator(SketchPostAggregator):
    type: Literal["HLLSketchEstimateWithBounds"]
    num_std_dev: int = Field(default=1, ge=1, le=3)


class SketchSummaryPostAggregator(SketchPostAggregator):
    """A sketch's summary, for debugging."""

    type: Literal["HLLSketchToString", "quantilesDoublesSketchToString"]


class HllSketchUnionPostAggregator(SpecModel):
    type: Literal["HLLSketchUnion"]
    name: str | None = None
    fields: list[PostAggregator] = Field(min_length=1)
    lg_k: int = Field(default=12, ge=4, le=21)
    tgt_hll_type: HllType = "HLL_4"


class ThetaSketchEstimatePostAggregator(SketchPostAggregator):
    type: Literal["thetaSketchEstimate"]
    #: with it, the estimate and its bounds at this many standard deviations, as one object
    error_bounds_std_dev: int | None = Field(default=None, ge=1, le=3)


class ThetaSketchSetOpPostAggregator(SpecModel):
    type: Literal["thetaSketchSetOp"]
    name: str | None = None
    func: Literal["UNION", "INTERSECT", "NOT"]
    fields: list[PostAggregator] = Field(min_length=1)
    size: Annotated[int, power_of_two(16, 1 << 26)] = 16384


class QuantilePostAggregator(SketchPostAggregator):
    type: Literal["quantilesDoublesSketchToQuantile"]
    fraction: float = Field(ge=0, le=1)


class QuantilesPostAggregator(SketchPostAggregator):
    type: Literal["quantilesDoublesSketchToQuantiles"]
    fractions: list[Annotated[float, Field(ge=0, le=1)]] = Field(min_length=1)


class RankPostAggregator(SketchPostAggregator):
    type: Literal["quantilesDoublesSketchToRank"]
    value: float


class CdfPostAggregator(SketchPostAggregator):
    type: Literal["quantilesDoublesSketchToCDF"]
    split_points: list[float] = Field(min_length=1)


class HistogramPostAggregator(SketchPostAggregator):
    """Counts of the values between the split points, or in `numBins` equal bins (10 when neither is given) from
    the least value to the greatest."""

    type: Literal["quantilesDoublesSketchToHistogram"]
    split_points: list[float] | None = Field(default=None, min_length=1)
    num_bins: int | None = Field(default=None, ge=2)

    @model_validator(mode="after")
    def _split_points_or_bins(self) -> HistogramPostAggregator:
        if self.split_points is not None and self.num_bins is not None:
            raise ValueError("Cannot accept both 'splitPoints' and 'numBins'")
        return self


class TDigestQuantilesPostAggregator(SketchPostAggregator):
    """The druid-tdigestsketch extension's post-aggregator: the digest's value at each fraction."""

    type: Literal["quantilesFromTDigestSketch"]
    fractions: list[Annotated[float, Field(ge=0, le=1)]] = Field(min_length=1)


SKETCH_POST_AGGREGATORS = (
    HllSketchEstimatePostAggregator, HllSketchEstimateWithBoundsPostAggregator, SketchSummaryPostAggregator,
    HllSketchUnionPostAggregator, ThetaSketchEstimatePostAggregator, ThetaSketchSetOpPostAggregator,
    QuantilePostAggregator, QuantilesPostAggregator, RankPostAggregator, CdfPostAggregator, HistogramPostAggregator,
    TDigestQuantilesPostAggregator,
)
