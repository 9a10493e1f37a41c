"""The batch example pipeline: order totals by customer."""
