"""The per-pipeline time series the web UI charts (``GET /api/v1/pipelines/NAME/series``).

One point per step (10 s by default) over the last hour, oldest first, each from the
newest worker heartbeat the answering nimbus had read then
(``nimbus/scheduling/pipeline_series.py``).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class SeriesPoint(BaseModel):
    """The figures of one pipeline's worker at one instant (sums over its queries; the
    slowest query's batch and watermark)."""

    model_config = ConfigDict(frozen=True)

    at: float = Field(description="wall-clock time of the heartbeat, epoch seconds")
    input_rows_per_second: float = Field(description="rows per second the queries read")
    processed_rows_per_second: float = Field(description="rows per second they processed")
    batch_duration_secs: float | None = Field(description="the longest last batch, seconds")
    trigger_interval_secs: float | None = Field(description="the pipeline's trigger interval")
    watermark_lag_secs: float | None = Field(
        description="the largest lag of a watermark behind its batch's start, seconds"
    )


class PipelineSeries(BaseModel):
    """A pipeline's points, oldest first, and the step between two of them."""

    pipeline: str
    step_secs: float = Field(description="seconds between two points (at least)")
    points: list[SeriesPoint]
